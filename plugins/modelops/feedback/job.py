"""The feedback-join Spark job: predictions x feedback events -> CTR/CVR per version + quarantine.

:func:`run_feedback_join` is the entry point for the ``modelops feedback`` command and the
``feedback_join`` DAG. The counting rules are in :mod:`modelops.feedback.definitions`;
:mod:`modelops.feedback.reference` computes the same thing in plain Python.

Shape of the work (built-in SQL functions only, no Python UDFs):

1. predictions: only ``feedback_token, ts, model, model_version`` are read; ``dt=/hour=``
   folders outside the run (plus :data:`~modelops.feedback.definitions.PARTITION_SLACK`)
   are pruned and ``start <= ts < end`` is pushed down into the Parquet scan.
   Impressions are a plain aggregate of that scan; the join side keeps one row per token.
2. events: every event read is classified in one pass over ``events LEFT JOIN
   predictions`` (a shuffled hash join on the token, nothing big is broadcast); the
   duplicate test and the per-token flags are window functions over the join's own
   partitioning, so they need no further shuffle.
3. the classified events are cached once and used twice: a small aggregate (counts per
   reason and per version) and the quarantine write.

Outputs go to a staging folder next to ``out_dir`` that replaces ``out_dir`` by rename,
so a re-run of the same window overwrites the whole output and a reader never sees half
of one.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelops.errors import ContractError, ModelopsError
from modelops.feedback.definitions import (
    DEFAULT_WINDOW_HOURS,
    PARTITION_SLACK,
    REASON_PRECEDENCE,
    Reason,
    VersionCounts,
    check_interval,
    hour_floor,
    rejected_counts,
    result_document,
    version_sort_key,
    window_micros,
)
from modelops.records import ACTIONS, FEEDBACK

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

APP_NAME = "modelops-feedback-join"
JSON_NAME = "ctr_cvr.json"
PARQUET_NAME = "ctr_cvr.parquet"
QUARANTINE_NAME = "quarantine"
OUTPUT_NAMES = frozenset({JSON_NAME, PARQUET_NAME, QUARANTINE_NAME})
PARTITION_COLUMNS = ("dt", "hour")

# Internal column names (prefixed so they never clash with a log's own columns).
_TOKEN, _ACTION, _TS, _RECEIVED = "_fb_token", "_fb_action", "_fb_ts", "_fb_received"
_REASON, _KEPT, _PRED = "reason", "_fb_kept", "_fb_pred"


@dataclass(frozen=True)
class FeedbackResult:
    """What one run produced: the per-version rows, rejected counts and where the files are."""

    rows: tuple[VersionCounts, ...]
    rejected: dict[str, int]
    out_dir: Path
    json_path: Path
    parquet_path: Path
    quarantine_path: Path


def run_feedback_join(
    predictions: str,
    events: str,
    start: datetime,
    end: datetime,
    out_dir: str,
    *,
    window_hours: float = DEFAULT_WINDOW_HOURS,
    master: str | None = None,
    spark: SparkSession | None = None,
) -> FeedbackResult:
    """Join one window's predictions with the feedback events and write CTR/CVR per version.

    Args:
        predictions: prediction log: a ``dt=/hour=`` folder tree or a single Parquet file.
        events: feedback log (tree or file); every event in it gets a verdict.
        start: inclusive start of the window (naive means UTC).
        end: exclusive end of the window.
        out_dir: local folder that will hold ``ctr_cvr.json``, ``ctr_cvr.parquet`` and
            ``quarantine/`` (replaced as a whole on a re-run).
        window_hours: how long after its prediction an event still counts.
        master: Spark master URL; ``MODELOPS_SPARK_MASTER`` when omitted.
        spark: an existing session to use instead of creating one (tests, benchmarks).

    Raises:
        ContractError: an input lacks a required column or cannot be read.
        ModelopsError: ``out_dir`` holds files this job did not write.
        ValueError: an empty interval or a non-positive window.
    """
    start, end = check_interval(start, end)
    window_us = window_micros(window_hours)
    target = Path(out_dir).resolve()
    _check_target(target)
    if spark is None:
        from modelops.spark import spark_session

        spark = spark_session(APP_NAME, master)
    _tune(spark)

    preds = _read(spark, predictions, "predictions", ("feedback_token", "ts", "model", "model_version"))
    preds = _in_run(preds, start, end)
    raw_events = _read(spark, events, "events", ("feedback_token", "action", "ts"))
    classified = _classify(raw_events, preds, window_us).persist()
    try:
        rows, rejected = _collect_counts(preds, classified)
        staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:12]}"
        try:
            (
                classified.where(_col(_REASON).isNotNull())
                .select(*_original_columns(raw_events), _REASON)
                .write.mode("overwrite")
                .parquet(str(staging / QUARANTINE_NAME))
            )
            _write_rows(staging / PARQUET_NAME, rows)
            document = result_document(
                start=start, end=end, window_hours=window_hours, rows=rows, rejected=rejected
            )
            (staging / JSON_NAME).write_text(json.dumps(document, indent=2) + "\n")
            _swap(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        classified.unpersist()
    return FeedbackResult(
        rows=rows,
        rejected=rejected,
        out_dir=target,
        json_path=target / JSON_NAME,
        parquet_path=target / PARQUET_NAME,
        quarantine_path=target / QUARANTINE_NAME,
    )


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(name)


def _tune(spark: SparkSession) -> None:
    # A shuffled hash join skips sorting the prediction side; the window functions then
    # sort only the (smaller) joined events.
    spark.conf.set("spark.sql.join.preferSortMergeJoin", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))


def _read(spark: SparkSession, path: str, what: str, required: tuple[str, ...]) -> DataFrame:
    from pyspark.errors import PySparkException

    try:
        frame = spark.read.parquet(path)
    except PySparkException as exc:
        raise ContractError(f"{what}: cannot read Parquet at {path!r}: {exc}") from exc
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ContractError(
            f"{what} at {path!r} lack column(s) {missing}; found {frame.columns} "
            f"(see modelops.records for the schema)"
        )
    return frame


def _in_run(preds: DataFrame, start: datetime, end: datetime) -> DataFrame:
    """The run's predictions: partition pruning on ``dt=/hour=`` plus ``ts`` pushdown."""
    from pyspark.sql import functions as F

    lo, hi = hour_floor(start - PARTITION_SLACK), hour_floor(end + PARTITION_SLACK)
    if "dt" in preds.columns:
        day = F.unix_date(F.col("dt").cast("date"))
        if "hour" in preds.columns:
            hour_index = day * 24 + F.col("hour").cast("int")
            lo_i, hi_i = _epoch_hours(lo), _epoch_hours(hi)
            preds = preds.where(hour_index.between(lo_i, hi_i))
        else:
            preds = preds.where(day.between(_epoch_hours(lo) // 24, _epoch_hours(hi) // 24))
    ts = F.col("ts").cast("timestamp")
    return preds.where((ts >= F.lit(start)) & (ts < F.lit(end))).select(
        F.col("feedback_token").cast("string").alias("feedback_token"),
        ts.alias("ts"),
        F.col("model").cast("string").alias("model"),
        F.col("model_version").cast("long").alias("model_version"),
    )


def _original_columns(raw_events: DataFrame) -> list[str]:
    """The event log's own columns: without the ``dt``/``hour`` folders Spark adds as columns."""
    return [c for c in raw_events.columns if c not in PARTITION_COLUMNS or c in FEEDBACK.names]


def _epoch_hours(when: datetime) -> int:
    return int(when.timestamp()) // 3600


def _classify(raw_events: DataFrame, preds: DataFrame, window_us: int) -> DataFrame:
    """Every event with its verdict (``reason`` null when kept) and its prediction's version."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, TimestampType

    fields = {f.name: f.dataType for f in raw_events.schema.fields}

    def text(name: str) -> Column:
        return F.col(name) if isinstance(fields[name], StringType) else F.lit(None).cast("string")

    def stamp(name: str) -> Column:
        if name not in fields:
            return F.lit(None).cast("timestamp")
        return F.col(name) if isinstance(fields[name], TimestampType) else F.col(name).try_cast("timestamp")

    keep = _original_columns(raw_events)
    events = raw_events.select(
        *keep,
        text("feedback_token").alias(_TOKEN),
        text("action").alias(_ACTION),
        stamp("ts").alias(_TS),
        stamp("received_at").alias(_RECEIVED),
    )

    first = (
        preds.where(F.col("feedback_token").isNotNull())
        .groupBy(F.col("feedback_token").alias("_p_token"))
        .agg(F.min(F.struct("ts", "model", "model_version")).alias(_PRED))
    )
    joined = events.join(first, events[_TOKEN] == first["_p_token"], "left")

    well_formed = (
        F.col(_TOKEN).isNotNull()
        & (F.col(_TOKEN) != "")
        & F.col(_ACTION).isin(*ACTIONS)
        & F.col(_TS).isNotNull()
    )
    delta = F.unix_micros(F.col(_TS)) - F.unix_micros(F.col(f"{_PRED}.ts"))
    pre = (
        F.when(~F.coalesce(well_formed, F.lit(False)), F.lit(Reason.MALFORMED.value))
        .when(F.col("_p_token").isNull(), F.lit(Reason.UNKNOWN_TOKEN.value))
        .when((delta < 0) | (delta > window_us), F.lit(Reason.OUTSIDE_WINDOW.value))
    )
    joined = joined.withColumn("_fb_pre", pre)
    copies = Window.partitionBy(_TOKEN, _ACTION, "_fb_pre").orderBy(
        F.col(_TS).asc_nulls_last(), F.col(_RECEIVED).asc_nulls_last()
    )
    reason = F.when(F.col("_fb_pre").isNotNull(), F.col("_fb_pre")).when(
        F.row_number().over(copies) > 1, F.lit(Reason.DUPLICATE.value)
    )
    joined = joined.withColumn(_REASON, reason).withColumn(_KEPT, F.col(_REASON).isNull())
    per_token = Window.partitionBy(_TOKEN)
    kept_click = F.max((F.col(_KEPT) & (F.col(_ACTION) == "click")).cast("int")).over(per_token)
    return joined.select(
        *keep,
        _ACTION,
        _REASON,
        _KEPT,
        F.col(f"{_PRED}.model").alias("_fb_model"),
        F.col(f"{_PRED}.model_version").alias("_fb_version"),
        kept_click.alias("_fb_token_clicked"),
    )


def _collect_counts(preds: DataFrame, classified: DataFrame) -> tuple[tuple[VersionCounts, ...], dict[str, int]]:
    """Per-version rows and rejected counts, from one small aggregate of each input."""
    from pyspark.sql import functions as F

    kept = F.col(_KEPT)
    action = F.col(_ACTION)
    token_clicked = F.col("_fb_token_clicked") == 1
    counts = (
        classified.groupBy(_REASON, "_fb_model", "_fb_version")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.count_if(kept & (action == "click")).alias("clicked"),
            F.count_if(kept & (action == "purchase") & token_clicked).alias("converted"),
            F.count_if(kept & (action == "skip")).alias("skipped"),
            F.count_if(kept & (action == "purchase") & ~token_clicked).alias("purchase_without_click"),
        )
        .collect()
    )
    impressions = preds.groupBy("model", "model_version").count().collect()

    rejected: dict[str, int] = {r.value: 0 for r in REASON_PRECEDENCE}
    kept_by_version: dict[tuple[str | None, int | None], dict[str, int]] = {}
    for row in counts:
        if row[_REASON] is not None:
            rejected[row[_REASON]] += int(row["events"])
        else:
            kept_by_version[(row["_fb_model"], row["_fb_version"])] = row.asDict()
    rows = []
    for row in impressions:
        key = (row["model"], row["model_version"])
        kept_counts: dict[str, Any] = kept_by_version.pop(key, {})
        rows.append(
            VersionCounts(
                model=key[0],
                model_version=key[1],
                impressions=int(row["count"]),
                clicked=int(kept_counts.get("clicked", 0)),
                converted=int(kept_counts.get("converted", 0)),
                skipped=int(kept_counts.get("skipped", 0)),
                purchase_without_click=int(kept_counts.get("purchase_without_click", 0)),
            )
        )
    if kept_by_version:  # every kept event has a prediction of the run, so this cannot happen
        raise ModelopsError(f"kept feedback for versions without impressions: {sorted(kept_by_version, key=str)}")
    return tuple(sorted(rows, key=version_sort_key)), rejected_counts(rejected)


def _write_rows(path: Path, rows: tuple[VersionCounts, ...]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("model", pa.string()),
            ("model_version", pa.int64()),
            ("impressions", pa.int64()),
            ("clicked", pa.int64()),
            ("converted", pa.int64()),
            ("skipped", pa.int64()),
            ("purchase_without_click", pa.int64()),
            ("ctr", pa.float64()),
            ("cvr", pa.float64()),
        ],
        metadata={"schema_version": "1"},
    )
    pq.write_table(pa.Table.from_pylist([r.to_json() for r in rows], schema=schema), path)


def _check_target(target: Path) -> None:
    if target.exists():
        if not target.is_dir():
            raise ModelopsError(f"output {target} exists and is not a folder")
        foreign = sorted(p.name for p in target.iterdir() if p.name not in OUTPUT_NAMES)
        if foreign:
            raise ModelopsError(
                f"refusing to replace output folder {target}: it holds files this job did not write "
                f"{foreign[:5]}; pass an empty or dedicated folder (example: --out runs/feedback/2026-11-01)"
            )
    target.parent.mkdir(parents=True, exist_ok=True)


def _swap(staging: Path, target: Path) -> None:
    """Replace ``target`` with ``staging`` by two renames (the old output is removed last)."""
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)
