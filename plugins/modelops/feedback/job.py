"""The feedback-join Spark job: predictions x feedback events -> CTR/CVR per version + quarantine.

:func:`run_feedback_join` is the entry point for the ``modelops feedback`` command and the
``feedback_join`` DAG. The counting rules are in :mod:`modelops.feedback.definitions`;
:mod:`modelops.feedback.reference` computes the same thing in plain Python.

Shape of the work (built-in SQL functions only: no Python UDFs; the verdicts are built by
:mod:`modelops.feedback.plan`):

1. predictions: only ``feedback_token, ts, model, model_version`` are read; ``dt=/hour=``
   folders outside the run (plus :data:`~modelops.feedback.definitions.PARTITION_SLACK`)
   are pruned and ``start <= ts < end`` is pushed down into the Parquet scan. Impressions
   per version are one small aggregate of that scan (the first action); they also number
   the run's versions (:class:`~modelops.feedback.versions.VersionCodes`).
2. Spark's runtime Bloom filter (enabled for this size in :data:`RUNTIME_BLOOM_FILTER`)
   is built from the well-formed events' tokens and applied to the prediction scan, so
   the predictions nobody reacted to (most of them) are never shuffled; nothing big is
   broadcast (the filter is a few MB).
3. the earliest prediction per token (a hash aggregate of one long, without a partial
   aggregation: :data:`BYPASS_PARTIAL_AGGREGATION`), one shuffled hash join with the
   well-formed events, cached uncompressed; duplicates and kept counts follow without a
   further shuffle.
4. two more actions: the quarantine write, which counts the rejections by reason as it goes
   (a Spark ``Observation``), and one small collect of the kept counts per version.

Inputs and the output are local paths or object-store locations (``s3://bucket/prefix``,
read and written by the executors through :mod:`modelops.spark_store`). A re-run of the same
window replaces the whole output (:mod:`modelops.feedback.outputs`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from modelops.feedback.definitions import (
    DEFAULT_WINDOW_HOURS,
    PARTITION_SLACK,
    REASON_PRECEDENCE,
    VersionCounts,
    check_interval,
    hour_floor,
    rejected_counts,
    result_document,
    version_sort_key,
    window_micros,
)
from modelops.feedback.logs import Locations, read_log, tune
from modelops.feedback.outputs import JSON_NAME, PARQUET_NAME, QUARANTINE_NAME, output_for
from modelops.feedback.plan import CODE, KEPT_COLUMNS, REASON, build_plan
from modelops.feedback.versions import Version, VersionCodes
from modelops.records import FEEDBACK, OPTIONAL_COLUMNS, PREDICTIONS
from modelops.spark import session_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from modelops.feedback.outputs import Writer

APP_NAME = "modelops-feedback-join"
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


BYPASS_PARTIAL_AGGREGATION = {"spark.sql.execution.bypassPartialAggregation": "true"}
"""Set while ``matched`` and the quarantine are planned: their grouped aggregates (the earliest
prediction per token, the copies per ``(token, action)``) have about one row per key, so a
partial aggregation before the shuffle (or, already partitioned by token, before the final one
in the same task) only hashes every row twice. Not for the impressions and the kept counts per
version, whose few groups a partial aggregation reduces to a handful of rows; global aggregates
(the Bloom filter, the observed counts) are never bypassed."""


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
            ``ctr_cvr.parquet`` and ``quarantine/`` (replaced as a whole on a re-run; in the object
            store under a generation the pointer ``_current.json`` names: see
            :mod:`modelops.feedback.outputs`).
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
    tune(spark, RUNTIME_BLOOM_FILTER)

    preds = read_log(spark, predictions, "predictions", ("feedback_token", "ts", "model", "model_version"),
                     PREDICTIONS, project=True)
    preds = _in_run(preds, start, end)
    impressions = _impressions(preds)
    codes = VersionCodes.of(impressions, start, end)
    raw_events = _actions_only(read_log(spark, events, "events", ("feedback_token", "action", "ts"), FEEDBACK,
                                        project=False, optional=tuple(sorted(OPTIONAL_COLUMNS["feedback"]))))
    plan = build_plan(raw_events, preds, codes, window_us)
    try:
        with output.writing() as writer:
            with session_conf(spark, BYPASS_PARTIAL_AGGREGATION):  # the cached plan is planned by persist()
                plan.matched.persist()
                rejected = _write_quarantine(plan.rejected, writer)
            rows = _rows(impressions, codes, plan.kept)
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
        json_path=writer.location(JSON_NAME),
        parquet_path=writer.location(PARQUET_NAME),
        quarantine_path=writer.location(QUARANTINE_NAME),
    )


def _actions_only(raw_events: DataFrame) -> DataFrame:
    """The user actions of the feedback log: a delayed label (``label`` / ``value``) is no action of this join.

    Labels are the outcome job's (:mod:`modelops.feedback.outcome_job`); counted here they would be
    rejected as malformed. Logs written before labels existed read those columns as nulls: every
    event stays.
    """
    from pyspark.sql import functions as F

    return raw_events.where(F.col("label").isNull() & F.col("value").isNull())


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


def _epoch_hours(when: datetime) -> int:
    return int(when.timestamp()) // 3600


def _write_quarantine(rejected: DataFrame, writer: Writer) -> dict[str, int]:
    """Write the rejected events and count them by reason in the same pass."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("feedback_rejected")
    counted = rejected.observe(
        observation, *(F.count_if(F.col(REASON) == r.value).alias(r.value) for r in REASON_PRECEDENCE)
    )
    writer.frame(QUARANTINE_NAME, counted)
    return rejected_counts({k: int(v) for k, v in observation.get.items()})


def _impressions(preds: DataFrame) -> dict[Version, int]:
    """Predictions per ``(model, model_version)`` of the run (one small collect)."""
    counts = preds.groupBy("model", "model_version").count().collect()
    return {(row["model"], row["model_version"]): int(row["count"]) for row in counts}


def _rows(impressions: dict[Version, int], codes: VersionCodes, kept: DataFrame) -> tuple[VersionCounts, ...]:
    """Per-version rows: impressions from the predictions, the rest from the kept counts by code."""
    counts = {int(row[CODE]): [int(row[c]) for c in KEPT_COLUMNS] for row in kept.collect()}
    rows = (
        VersionCounts(version[0], version[1], impressions[version], *counts.get(code, [0] * len(KEPT_COLUMNS)))
        for code, version in enumerate(codes.versions)
    )
    return tuple(sorted(rows, key=version_sort_key))


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
