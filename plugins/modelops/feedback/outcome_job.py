"""The outcome job: per model, version and day, the rate of each declared action and realized performance.

:func:`run_outcomes` is the entry point of the ``modelops outcomes`` command and of the
``feedback_join`` DAG's outcome task. The rules and metric definitions are in
:mod:`modelops.feedback.outcome_metrics`; the frames in :mod:`modelops.feedback.outcome_plan`.

A run covers several prediction days ``[start, end)`` (by default the 7 ending with the DAG run's
day) and reads every label received so far for them, so a label that arrives days late changes its
prediction's day on the next run, and a rerun over the same logs gives the same numbers. It writes
one document per model and day, ``<out>/dt=YYYY-MM-DD/<model>.json`` (a local folder or an
``s3://`` prefix, beside ``metrics/ctr_cvr/``), each replaced as a whole by later runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelops.feedback.declared import Declaration, SpecReader, declarations
from modelops.feedback.definitions import (
    DEFAULT_WINDOW_HOURS,
    PARTITION_SLACK,
    check_interval,
    hour_floor,
    window_micros,
)
from modelops.feedback.job import BYPASS_PARTIAL_AGGREGATION, RUNTIME_BLOOM_FILTER
from modelops.feedback.logs import Locations, read_log, tune
from modelops.feedback.outcome_metrics import (
    DELAY_QUANTILES,
    OutcomeSums,
    outcome_document,
    quantile_from_ranks,
    version_entry,
)
from modelops.feedback.outcome_plan import CODE, DAY, US_PER_DAY, build_outcome_plan
from modelops.feedback.versions import VersionCodes
from modelops.records import FEEDBACK, OPTIONAL_COLUMNS, PREDICTIONS
from modelops.spark import session_conf
from modelops.spark_store import is_store_uri, split_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

APP_NAME = "modelops-outcomes"
_PRED_COLUMNS = ("feedback_token", "ts", "model", "model_version")
_EVENT_COLUMNS = ("feedback_token", "action", "ts")


@dataclass(frozen=True)
class OutcomeResult:
    """What one run produced: the sums per ``(model, version, day)``, the documents and where they went."""

    sums: tuple[OutcomeSums, ...]
    documents: dict[str, dict[str, Any]]
    """Location (``<out>/dt=D/<model>.json``) -> document."""
    out: str


def run_outcomes(predictions: Locations, events: Locations, start: datetime, end: datetime, out: str, *,
                 specs: SpecReader | None = None, window_hours: float = DEFAULT_WINDOW_HOURS,
                 master: str | None = None, spark: SparkSession | None = None) -> OutcomeResult:
    """Measure each version's outcomes on the prediction days ``[start, end)``; write a document per model and day.

    Args:
        predictions: prediction log of the days (trees or files, local or ``s3://``).
        events: feedback log: every partition received since the first day (labels come late).
        start: midnight (UTC) of the first day; end: midnight after the last.
        out: local folder or ``s3://bucket/prefix`` of the documents.
        specs: reads a version's spec (:func:`modelops.feedback.declared.repository_reader`); None:
            no version has one (all declare the platform's actions).
        window_hours: how long after its prediction an action counts (labels: any time after it).
        master: Spark master URL; ``MODELOPS_SPARK_MASTER`` when omitted.
        spark: an existing session to use (tests, benchmarks).

    Raises:
        ContractError: an input lacks a required column, or a stored spec is unreadable.
        ValueError: an empty interval, bounds that are not midnights, or a non-positive window.
    """
    start, end = check_interval(start, end)
    if any(t != hour_floor(t) or t.hour for t in (start, end)):
        raise ValueError(f"start and end must be midnights (UTC) (example: --start 2026-11-01 --end 2026-11-08), "
                         f"got {start.isoformat()} and {end.isoformat()}")
    window_us = window_micros(window_hours)
    if spark is None:
        from modelops.spark import spark_session

        spark = spark_session(APP_NAME, master)
    tune(spark, RUNTIME_BLOOM_FILTER)
    preds = _in_days(read_log(spark, predictions, "predictions", _PRED_COLUMNS, PREDICTIONS, project=True,
                              optional=tuple(sorted(OPTIONAL_COLUMNS["predictions"]))), start, end)
    impressions = _impressions(preds)
    codes = VersionCodes.of({(m, v) for m, v, _ in impressions}, start, end)
    by_version = declarations(codes.versions, specs)
    declared = {codes.code(v): d for v, d in by_version.items()}
    actions = tuple(sorted({a for d in declared.values() for a in d.actions}))
    raw = read_log(spark, events, "events", _EVENT_COLUMNS, FEEDBACK, project=True,
                   optional=("received_at", "label", "value"))
    plan = build_outcome_plan(raw, preds, codes, declared, actions, window_us)
    with session_conf(spark, BYPASS_PARTIAL_AGGREGATION):  # one row per token: see the CTR join; persist() plans
        plan.matched.persist()
        plan.labels.persist()
    try:
        acted, labelled, auc_rows, rejected = (_by_key(f) for f in (plan.actions, plan.label_sums, plan.auc,
                                                                    plan.rejected))
        delays = _delays(plan.delays)
    finally:
        plan.labels.unpersist()
        plan.matched.unpersist()
    auc = {key: float(row["auc_sum"] or 0.0) for key, row in auc_rows.items()}
    for key, quantiles in delays.items():
        labelled.setdefault(key, {})["delay"] = quantiles
    sums = tuple(_sums(codes, start, m, v, d, n, actions, acted, labelled, auc, rejected)
                 for m, v, d, n in sorted(((m, v, d, n) for (m, v, d), n in impressions.items())))
    documents = _documents(sums, by_version, out, start, end, window_hours)
    for location, document in documents.items():
        put_document(location, (json.dumps(document, indent=2) + "\n").encode())
    return OutcomeResult(sums=sums, documents=documents, out=out)


def _by_key(frame: DataFrame) -> dict[tuple[int, int], dict[str, Any]]:
    """A small result frame's rows by ``(code, day)`` (one collect)."""
    return {(int(r[CODE]), int(r[DAY])): r.asDict() for r in frame.collect()}


def _delays(frame: DataFrame) -> dict[tuple[int, int], list[float | None]]:
    """p50 and p90 of the label delays per ``(code, day)``, from the values at their ranks."""
    ranks: dict[tuple[int, int], tuple[int, dict[int, float]]] = {}
    for r in frame.collect():
        _, values = ranks.setdefault((int(r[CODE]), int(r[DAY])), (int(r["n"]), {}))
        values[int(r["rank"])] = float(r["delay_s"])
    return {key: [quantile_from_ranks(values, n, q) for q in DELAY_QUANTILES] for key, (n, values) in ranks.items()}


def _in_days(preds: DataFrame, start: datetime, end: datetime) -> DataFrame:
    """The run's predictions: ``dt=`` folders pruned (when read as columns), ``ts`` pushed down."""
    from pyspark.sql import functions as F

    if "dt" in preds.columns:
        lo, hi = (start - PARTITION_SLACK).date(), (end + PARTITION_SLACK).date()
        preds = preds.where(F.col("dt").cast("date").between(F.lit(lo), F.lit(hi)))
    ts = F.col("ts").cast("timestamp")
    return preds.where((ts >= F.lit(start)) & (ts < F.lit(end))).select(
        F.col("feedback_token").cast("string").alias("feedback_token"), ts.alias("ts"),
        F.col("model").cast("string").alias("model"), F.col("model_version").cast("long").alias("model_version"),
        F.col("prediction").cast("double").alias("prediction"),
        F.col("probabilities").cast("array<double>").alias("probabilities"))


def _impressions(preds: DataFrame) -> dict[tuple[str, int, int], int]:
    """Predictions per ``(model, version, day index)`` (one small collect; rows without a model or version skipped)."""
    from pyspark.sql import functions as F

    day = F.expr(f"unix_micros(ts) div {US_PER_DAY}")
    rows = preds.groupBy("model", "model_version", day.alias("day")).count().collect()
    return {(r["model"], int(r["model_version"]), int(r["day"])): int(r["count"]) for r in rows
            if r["model"] is not None and r["model_version"] is not None}


def _sums(codes: VersionCodes, start: datetime, model: str, version: int, epoch_day: int, impressions: int,
          actions: tuple[str, ...], acted: dict[tuple[int, int], dict[str, Any]],
          labelled: dict[tuple[int, int], dict[str, Any]], auc: dict[tuple[int, int], float],
          rejected: dict[tuple[int, int], dict[str, Any]]) -> OutcomeSums:
    day_index = epoch_day - codes.start_us // US_PER_DAY
    key = (codes.code((model, version)), day_index)
    a, lab, rej = acted.get(key, {}), labelled.get(key, {}), rejected.get(key, {})
    delay = lab.get("delay") or [None, None]
    return OutcomeSums(
        model=model, model_version=version, day=(start + timedelta(days=day_index)).date().isoformat(),
        impressions=impressions, acted={name: int(a.get(f"a{i}", 0)) for i, name in enumerate(actions)},
        converted=int(a.get("converted", 0) or 0), labelled=int(lab.get("labelled", 0)),
        scored=int(lab.get("scored", 0)), positives=int(lab.get("positives", 0)), correct=int(lab.get("correct", 0)),
        log_loss_sum=float(lab.get("log_loss_sum") or 0.0), squared_sum=float(lab.get("squared_sum") or 0.0),
        absolute_sum=float(lab.get("absolute_sum") or 0.0), auc_sum=auc.get(key, 0.0),
        delay_p50_s=delay[0], delay_p90_s=delay[1],
        rejected={"before_prediction": int(rej.get("before_prediction", 0)),
                  "duplicate": int(lab.get("duplicate", 0) or 0), "not_declared": int(rej.get("not_declared", 0))},
    )


def _documents(sums: tuple[OutcomeSums, ...], declared: dict[tuple[str, int], Declaration], out: str,
               start: datetime, end: datetime, window_hours: float) -> dict[str, dict[str, Any]]:
    entries: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in sums:
        d = declared[(s.model, s.model_version)]
        entries.setdefault((s.model, s.day), []).append(version_entry(s, d.actions, d.kind))
    return {document_location(out, day, model): outcome_document(model=model, day=day, entries=rows, start=start,
                                                                 end=end, window_hours=window_hours)
            for (model, day), rows in sorted(entries.items())}


def document_location(out: str, day: str, model: str) -> str:
    """Where a model's document of ``day`` lies: ``<out>/dt=YYYY-MM-DD/<model>.json``."""
    return f"{out.rstrip('/')}/dt={day}/{model}.json"


def put_document(location: str, data: bytes) -> None:
    """Write one small document, replacing what was there (local: through a temporary file and a rename)."""
    if is_store_uri(location):
        from modelops.objectstore import ObjectStore

        bucket, key = split_uri(location)
        ObjectStore.from_settings(bucket=bucket).put_bytes(key, data, content_type="application/json")
        return
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_bytes(data)
    os.replace(staging, path)
