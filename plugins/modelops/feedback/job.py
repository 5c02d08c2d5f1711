"""The feedback-join Spark job: predictions x feedback events -> CTR/CVR per version + quarantine.

:func:`run_feedback_join` is the entry point for the ``modelops feedback`` command and the
``feedback_join`` DAG. The counting rules are in :mod:`modelops.feedback.definitions`;
:mod:`modelops.feedback.reference` computes the same thing in plain Python.

Shape of the work (built-in SQL functions only: no Python UDFs, no window functions):

1. predictions: only ``feedback_token, ts, model, model_version`` are read; ``dt=/hour=``
   folders outside the run (plus :data:`~modelops.feedback.definitions.PARTITION_SLACK`)
   are pruned and ``start <= ts < end`` is pushed down into the Parquet scan.
   Impressions are a plain aggregate of that scan.
2. Spark's runtime Bloom filter (enabled for this size in :data:`RUNTIME_BLOOM_FILTER`)
   is built from the well-formed events' tokens and applied to the prediction scan, so
   the predictions nobody reacted to (most of them) are never shuffled; nothing big is
   broadcast (the filter is a few MB).
3. one shuffled hash join of the well-formed events with the run's predictions (one row
   per token) gives every event its prediction and its unknown/outside verdict; that
   result is cached. Everything after it is already partitioned by token, so the
   duplicate test (an aggregate per ``(token, action)`` and a join back on the few
   repeated pairs) and the per-token flags need no further shuffle.
4. two actions: the quarantine write, which counts the rejections by reason as it goes
   (a Spark ``Observation``), and one small collect of the per-version counts.

Inputs and the output are local paths or object-store locations (``s3://bucket/prefix``,
read and written by the executors through :mod:`modelops.spark_store`). A re-run of the same
window replaces the whole output (:mod:`modelops.feedback.outputs`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from modelops import spark_store
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
from modelops.feedback.outputs import JSON_NAME, PARQUET_NAME, QUARANTINE_NAME, output_for
from modelops.records import ACTIONS, FEEDBACK, PREDICTIONS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from modelops.feedback.outputs import Writer

APP_NAME = "modelops-feedback-join"
PARTITION_COLUMNS = ("dt", "hour")

# Internal column names (prefixed so they never clash with a log's own columns).
_TOKEN, _ACTION, _TS = "_fb_token", "_fb_action", "_fb_ts"
_REASON, _PRE, _EID, _RECV_KEY = "reason", "_fb_pre", "_fb_eid", "_fb_recv_key"
_COUNT_COLUMNS = ("impressions", "clicked", "converted", "skipped", "purchase_without_click")
RUNTIME_BLOOM_FILTER = {
    # Spark builds a Bloom filter of the well-formed events' tokens and applies it to the
    # prediction scan, so predictions nobody reacted to are never shuffled. The defaults
    # only do that for scans over 10 GB with a creation side under 10 MB.
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "true",
    "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "1MB",
    "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "1GB",
    "spark.sql.optimizer.runtime.bloomFilter.expectedNumItems": "4000000",
    "spark.sql.optimizer.runtime.bloomFilter.numBits": "40000000",
}
_LAST = "9999-12-31 23:59:59.999999"


@dataclass(frozen=True)
class FeedbackResult:
    """What one run produced: the per-version rows, rejected counts, the document and where the files are.

    The locations are local paths or ``s3://`` URIs, as ``out_dir`` was given.
    """

    rows: tuple[VersionCounts, ...]
    rejected: dict[str, int]
    document: dict[str, Any]
    out_dir: str
    json_path: str
    parquet_path: str
    quarantine_path: str


Locations = str | Sequence[str]


def run_feedback_join(
    predictions: Locations,
    events: Locations,
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
        predictions: prediction log: ``dt=/hour=`` folder trees or single Parquet files, local
            or ``s3://bucket/prefix`` locations (one or several, not mixed).
        events: feedback log, the same forms; every event in it gets a verdict.
        start: inclusive start of the window (naive means UTC).
        end: exclusive end of the window.
        out_dir: local folder or ``s3://bucket/prefix`` that will hold ``ctr_cvr.json``,
            ``ctr_cvr.parquet`` and ``quarantine/`` (replaced as a whole on a re-run).
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
    output = output_for(out_dir)
    if spark is None:
        from modelops.spark import spark_session

        spark = spark_session(APP_NAME, master)
    _tune(spark)

    preds = _read(spark, predictions, "predictions", ("feedback_token", "ts", "model", "model_version"),
                  PREDICTIONS, project=True)
    preds = _in_run(preds, start, end)
    raw_events = _read(spark, events, "events", ("feedback_token", "action", "ts"), FEEDBACK, project=False)
    plan = _plan(raw_events, preds, window_us)
    plan.matched.persist()
    try:
        with output.writing() as writer:
            rejected = _write_quarantine(plan.rejected, writer)
            rows = _collect_rows(preds, plan.firsts)
            writer.put(PARQUET_NAME, _rows_parquet(rows))
            document = result_document(
                start=start, end=end, window_hours=window_hours, rows=rows, rejected=rejected
            )
            writer.put(JSON_NAME, (json.dumps(document, indent=2) + "\n").encode())
    finally:
        plan.matched.unpersist()
    return FeedbackResult(
        rows=rows,
        rejected=rejected,
        document=document,
        out_dir=output.root,
        json_path=output.location(JSON_NAME),
        parquet_path=output.location(PARQUET_NAME),
        quarantine_path=output.location(QUARANTINE_NAME),
    )


def _tune(spark: SparkSession) -> None:
    # A shuffled hash join skips sorting the prediction side; the window functions then
    # sort only the (smaller) joined events.
    spark.conf.set("spark.sql.join.preferSortMergeJoin", "false")
    # Joins on (token, action) may reuse the partitioning by token instead of a new shuffle.
    spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
    for key, value in RUNTIME_BLOOM_FILTER.items():
        spark.conf.set(key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))


def _read(spark: SparkSession, location: Locations, what: str, required: tuple[str, ...], schema: pa.Schema,
          *, project: bool) -> DataFrame:
    """A log as a frame; from the object store only ``required`` columns when ``project``.

    An object-store location without objects reads as an empty log of ``schema``.
    """
    from pyspark.errors import PySparkException

    locations = [location] if isinstance(location, str) else list(location)
    in_store = [spark_store.is_store_uri(loc) for loc in locations]
    if not locations or (any(in_store) and not all(in_store)):
        raise ContractError(f"{what}: give one or more local paths or one or more s3:// locations, not "
                            f"a mix (example: s3://modelops/logs/feedback/dt=2026-11-01/), got {locations}")
    shown = locations[0] if len(locations) == 1 else locations
    if all(in_store):
        objects = spark_store.list_parquet(locations, what, empty_schema=schema)
        _check_columns(what, shown, required, objects.columns)
        return spark_store.read_frame(spark, objects, list(required) if project else None)
    try:
        frame = spark.read.parquet(*locations)
    except PySparkException as exc:
        raise ContractError(f"{what}: cannot read Parquet at {shown!r}: {exc}") from exc
    _check_columns(what, shown, required, frame.columns)
    return frame


def _check_columns(what: str, shown: object, required: tuple[str, ...], columns: list[str]) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        raise ContractError(
            f"{what} at {shown!r} lack column(s) {missing}; found {columns} "
            f"(see modelops.records for the schema)"
        )


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


@dataclass(frozen=True)
class _Plan:
    """The lazy frames of one run: ``matched`` is cached and feeds the other two."""

    matched: DataFrame  # well-formed events with their prediction and pre-verdict
    firsts: DataFrame  # one row per (token, action, model, version) with valid events, and their count
    rejected: DataFrame  # every rejected event: its own columns plus ``reason``


def _plan(raw_events: DataFrame, preds: DataFrame, window_us: int) -> _Plan:
    """Build the verdicts with joins and aggregates only (no window functions, no UDFs)."""
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
        # Copies are ordered by (ts, received_at nulls last): a null sorts as the latest time.
        F.coalesce(stamp("received_at"), F.lit(_LAST).cast("timestamp")).alias(_RECV_KEY),
    )
    well_formed = (
        F.col(_TOKEN).isNotNull()
        & (F.col(_TOKEN) != "")
        & F.col(_ACTION).isin(*ACTIONS)
        & F.col(_TS).isNotNull()
    )
    malformed = events.where(~F.coalesce(well_formed, F.lit(False))).select(
        *keep, F.lit(Reason.MALFORMED.value).alias(_REASON)
    )
    # The plain filter (not wrapped) lets Spark's runtime Bloom filter (see _tune) drop the
    # predictions nobody reacted to before they are shuffled.
    candidates = events.where(well_formed).withColumn(_EID, F.monotonically_increasing_id())

    # One row per token: a re-logged request is matched on its earliest prediction.
    earliest = (
        preds.where(F.col("feedback_token").isNotNull())
        .groupBy(F.col("feedback_token").alias("_p_token"))
        .agg(F.min(F.struct("ts", "model", "model_version")).alias("_p"))
    )
    delta = F.unix_micros(F.col(_TS)) - F.unix_micros(F.col("_p.ts"))
    pre = F.when(F.col("_p_token").isNull(), F.lit(Reason.UNKNOWN_TOKEN.value)).when(
        (delta < 0) | (delta > window_us), F.lit(Reason.OUTSIDE_WINDOW.value)
    )
    matched = candidates.join(earliest.hint("shuffle_hash"), F.col(_TOKEN) == F.col("_p_token"), "left").select(
        *keep, _TOKEN, _ACTION, _TS, _RECV_KEY, _EID, "_p", pre.alias(_PRE)
    )

    # Everything below is partitioned by token already, so it needs no further shuffle;
    # the aggregates keep fixed-width buffers (hash aggregation, no sort).
    valid = matched.where(F.col(_PRE).isNull()).select(
        *keep, _TOKEN, _ACTION, _TS, _RECV_KEY, _EID,
        F.col("_p.model").alias("_p_model"), F.col("_p.model_version").alias("_p_version"),
    )
    firsts = valid.groupBy(_TOKEN, _ACTION, "_p_model", "_p_version").agg(F.count(F.lit(1)).alias("_copies"))
    repeated = firsts.where(F.col("_copies") > 1).select(
        F.col(_TOKEN).alias("_r_token"), F.col(_ACTION).alias("_r_action")
    )
    # Only the few repeated (token, action) pairs are ordered: the first copy is kept.
    order = Window.partitionBy(_TOKEN, _ACTION).orderBy(_TS, _RECV_KEY, _EID)
    duplicates = (
        valid.join(
            repeated.hint("shuffle_hash"),
            (F.col(_TOKEN) == F.col("_r_token")) & (F.col(_ACTION) == F.col("_r_action")),
        )
        .withColumn("_copy", F.row_number().over(order))
        .where(F.col("_copy") > 1)
        .select(*keep, F.lit(Reason.DUPLICATE.value).alias(_REASON))
    )
    outside = matched.where(F.col(_PRE).isNotNull()).select(*keep, F.col(_PRE).alias(_REASON))
    rejected = malformed.unionByName(outside).unionByName(duplicates)
    return _Plan(matched=matched, firsts=firsts, rejected=rejected)


def _write_quarantine(rejected: DataFrame, writer: Writer) -> dict[str, int]:
    """Write the rejected events and count them by reason in the same pass."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("feedback_rejected")
    counted = rejected.observe(
        observation, *(F.count_if(F.col(_REASON) == r.value).alias(r.value) for r in REASON_PRECEDENCE)
    )
    writer.frame(QUARANTINE_NAME, counted)
    return rejected_counts({k: int(v) for k, v in observation.get.items()})


def _collect_rows(preds: DataFrame, firsts: DataFrame) -> tuple[VersionCounts, ...]:
    """Per-version rows: impressions from the predictions, the rest from the kept events."""
    from pyspark.sql import functions as F

    def has(action: str) -> Column:
        return F.max(F.col(_ACTION) == action)

    # model and version depend on the token alone: grouping by them keeps a hash aggregate.
    per_token = firsts.groupBy(_TOKEN, "_p_model", "_p_version").agg(
        has("click").alias("c"), has("purchase").alias("pu"), has("skip").alias("s")
    )
    kept = per_token.groupBy(F.col("_p_model").alias("model"), F.col("_p_version").alias("model_version")).agg(
        F.lit(0).cast("long").alias("impressions"),
        F.count_if("c").alias("clicked"),
        F.count_if(F.col("c") & F.col("pu")).alias("converted"),
        F.count_if("s").alias("skipped"),
        F.count_if(F.col("pu") & ~F.col("c")).alias("purchase_without_click"),
    )
    zero = F.lit(0).cast("long")
    impressions = preds.groupBy("model", "model_version").agg(
        F.count(F.lit(1)).alias("impressions"),
        *(zero.alias(c) for c in ("clicked", "converted", "skipped", "purchase_without_click")),
    )
    totals: dict[tuple[str | None, int | None], list[int]] = {}
    for row in impressions.unionByName(kept).collect():
        key = (row["model"], row["model_version"])
        values = [int(row[c]) for c in _COUNT_COLUMNS]
        totals[key] = [a + b for a, b in zip(totals.get(key, [0] * len(values)), values, strict=True)]
    orphans = [key for key, values in totals.items() if values[0] == 0]
    if orphans:  # every kept event has a prediction of the run, so this cannot happen
        raise ModelopsError(f"kept feedback for versions without impressions: {sorted(orphans, key=str)}")
    return tuple(
        sorted(
            (VersionCounts(key[0], key[1], *values) for key, values in totals.items()),
            key=version_sort_key,
        )
    )


def _rows_parquet(rows: tuple[VersionCounts, ...]) -> bytes:
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
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([r.to_json() for r in rows], schema=schema), sink)
    return sink.getvalue()
