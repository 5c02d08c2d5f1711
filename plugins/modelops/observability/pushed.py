"""Batch results and release phases as Prometheus metrics, pushed to the Pushgateway.

The builders are pure: they turn a ``drift.json`` document, a ``ctr_cvr.json`` document or
a canary phase into :class:`PushGroup` values (a job, a grouping key and a registry of
gauges). :func:`push_groups` sends them with ``prometheus_client.push_to_gateway`` (PUT:
a group's new push replaces everything the group held, so a version's series are always
those of its latest run).

Grouping (stable across runs, so re-running a day replaces rather than adds):

===========================  ==============================  ==========================================
job                          grouping key                    metrics
===========================  ==============================  ==========================================
``modelops_nightly_drift``   ``model``, ``version``          ``modelops_drift_*``
``modelops_feedback_join``   ``model``, ``version``          ``modelops_feedback_{ctr,cvr,impressions,...}``
``modelops_feedback_join``   ``model="_all"``                ``modelops_feedback_rejected{reason}``
``modelops_outcomes``        ``model``, ``version``          ``modelops_outcome_*{day}`` (every day the run covered)
``modelops_release``         ``model``                       ``modelops_release_phase{version,phase}``
===========================  ==============================  ==========================================

The grouping labels (``model``, ``version``) land on every series of the group; the
metrics themselves carry only their own labels (``feature``, ``side``, ``reason``...).
Prometheus scrapes the Pushgateway with ``honor_labels: true`` so ``job`` stays as pushed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from modelops.errors import ModelopsError

log = logging.getLogger(__name__)

DRIFT_JOB = "modelops_nightly_drift"
FEEDBACK_JOB = "modelops_feedback_join"
OUTCOMES_JOB = "modelops_outcomes"
RELEASE_JOB = "modelops_release"
ALL_MODELS = "_all"

#: Every metric name pushed by this module (the rules and dashboards may use only these).
PUSHED_METRICS = frozenset({
    "modelops_drift_score", "modelops_drift_prediction_ks", "modelops_drift_detected",
    "modelops_drift_feature_ks", "modelops_drift_feature_weighted_score", "modelops_drift_feature_drifted",
    "modelops_drift_rows", "modelops_drift_day_timestamp_seconds",
    "modelops_feedback_ctr", "modelops_feedback_cvr", "modelops_feedback_impressions",
    "modelops_feedback_clicks", "modelops_feedback_conversions", "modelops_feedback_day_timestamp_seconds",
    "modelops_feedback_rejected",
    "modelops_outcome_impressions", "modelops_outcome_action_rate", "modelops_outcome_label_coverage",
    "modelops_outcome_label_delay_seconds", "modelops_outcome_performance",
    "modelops_release_phase", "modelops_release_paused_since_timestamp_seconds",
    "modelops_release_pause_alert_after_seconds",
})


class MetricsPushError(ModelopsError):
    """The Pushgateway refused or could not be reached."""


@dataclass(frozen=True)
class PushGroup:
    """One Pushgateway group: what :func:`prometheus_client.push_to_gateway` takes."""

    job: str
    grouping: Mapping[str, str]
    registry: CollectorRegistry


def _day_timestamp(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


def _value(raw: Any) -> float:
    """A JSON number, or NaN for null (drift.json writes non-finite values as null)."""
    return math.nan if raw is None else float(raw)


def drift_group(model: str, triton_version: int, day: str, document: Mapping[str, Any]) -> PushGroup:
    """The metrics of one version's ``drift.json`` for day ``day``.

    ``modelops_drift_score`` is the largest per-feature weighted score (the ranking behind the
    top causes); ``modelops_drift_prediction_ks`` the KS D of the model's own score column.
    """
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, labelnames=labels, registry=registry)

    features = list(document["features"])
    weighted = [_value(f.get("weighted_score")) for f in features]
    finite = [w for w in weighted if not math.isnan(w)]
    gauge("modelops_drift_score", "Largest weighted drift score of any feature (nightly_drift).").set(
        max(finite) if finite else math.nan)
    gauge("modelops_drift_prediction_ks", "KS D of the prediction scores vs the baseline.").set(
        _value(document["score"]["ks"]))
    gauge("modelops_drift_detected", "1 when nightly_drift found drift for the version, else 0.").set(
        1.0 if document["drifted"] else 0.0)
    ks = gauge("modelops_drift_feature_ks", "KS D of one feature vs the baseline.", ("feature",))
    score = gauge("modelops_drift_feature_weighted_score", "KS D weighted by the feature's drift sensitivity.",
                  ("feature",))
    drifted = gauge("modelops_drift_feature_drifted", "1 when the feature drifted.", ("feature",))
    for feature, weight in zip(features, weighted, strict=True):
        ks.labels(feature["name"]).set(_value(feature["ks"]))
        score.labels(feature["name"]).set(weight)
        drifted.labels(feature["name"]).set(1.0 if feature["drifted"] else 0.0)
    rows = gauge("modelops_drift_rows", "Rows compared, by side (baseline, current).", ("side",))
    for side in ("baseline", "current"):
        rows.labels(side).set(float(document["rows"][side]))
    gauge("modelops_drift_day_timestamp_seconds", "Start (UTC) of the day the drift run covered.").set(
        _day_timestamp(day))
    return PushGroup(DRIFT_JOB, {"model": model, "version": str(triton_version)}, registry)


def feedback_groups(day: str, by_version: Iterable[Mapping[str, Any]],
                    rejected: Mapping[str, int]) -> list[PushGroup]:
    """One group per served version of ``ctr_cvr.json`` (rows without a version are skipped: they
    are in the rejected counts) plus one with the rejected counts by reason."""
    groups = []
    for row in by_version:
        if row.get("model") is None or row.get("model_version") is None:
            continue
        registry = CollectorRegistry()
        for name, doc, value in (
            ("modelops_feedback_ctr", "Click-through rate of the day (clicks / impressions).", row.get("ctr")),
            ("modelops_feedback_cvr", "Conversion rate of the day (purchases / clicks).", row.get("cvr")),
            ("modelops_feedback_impressions", "Served predictions of the day.", row["impressions"]),
            ("modelops_feedback_clicks", "Impressions with a click within the join window.", row["clicked"]),
            ("modelops_feedback_conversions", "Impressions with a purchase.", row["converted"]),
            ("modelops_feedback_day_timestamp_seconds", "Start (UTC) of the day the join covered.",
             _day_timestamp(day)),
        ):
            Gauge(name, doc, registry=registry).set(_value(value))
        groups.append(PushGroup(FEEDBACK_JOB, {"model": str(row["model"]), "version": str(row["model_version"])},
                                registry))
    registry = CollectorRegistry()
    counts = Gauge("modelops_feedback_rejected", "Feedback events the day's join rejected, by reason.",
                   labelnames=("reason",), registry=registry)
    for reason, count in rejected.items():
        counts.labels(reason).set(float(count))
    Gauge("modelops_feedback_day_timestamp_seconds", "Start (UTC) of the day the join covered.",
          registry=registry).set(_day_timestamp(day))
    groups.append(PushGroup(FEEDBACK_JOB, {"model": ALL_MODELS}, registry))
    return groups


def outcome_groups(documents: Iterable[Mapping[str, Any]]) -> list[PushGroup]:
    """One group per model version of the outcome documents (``<model>.json`` of each day a run covered).

    Each series carries the ``day`` it measures, so a group holds the latest run's view of every day it
    recomputed (late labels move earlier days): ``modelops_outcome_performance{metric="auc", day=...}``.
    """
    series: dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]] = {}
    for doc in documents:
        for entry in doc["versions"]:
            series.setdefault((str(doc["model"]), str(entry["model_version"])), []).append((str(doc["day"]), entry))
    groups = []
    for (model, version), days in sorted(series.items()):
        registry = CollectorRegistry()
        impressions = Gauge("modelops_outcome_impressions", "Predictions served that day.", ("day",),
                            registry=registry)
        rate = Gauge("modelops_outcome_action_rate", "Predictions with the action / impressions.", ("day", "action"),
                     registry=registry)
        coverage = Gauge("modelops_outcome_label_coverage", "Predictions whose label has arrived / impressions.",
                         ("day",), registry=registry)
        delay = Gauge("modelops_outcome_label_delay_seconds", "Label ts - prediction ts, by quantile.",
                      ("day", "quantile"), registry=registry)
        performance = Gauge("modelops_outcome_performance", "Realized performance on the labelled predictions.",
                            ("day", "metric"), registry=registry)
        for day, entry in sorted(days, key=lambda d: d[0]):
            impressions.labels(day).set(float(entry["impressions"]))
            for action, counted in entry["actions"].items():
                rate.labels(day, action).set(_value(counted["rate"]))
            label = entry.get("label")
            if label is None:
                continue
            coverage.labels(day).set(_value(label["coverage"]))
            delay.labels(day, "0.5").set(_value(label["delay_p50_s"]))
            delay.labels(day, "0.9").set(_value(label["delay_p90_s"]))
            for metric, value in label["metrics"].items():
                performance.labels(day, metric).set(_value(value))
        groups.append(PushGroup(OUTCOMES_JOB, {"model": model, "version": version}, registry))
    return groups


def release_group(model: str, canary_version: int, phase: str, *, paused_since: float | None = None,
                  waits_for_person: bool = False, pause_alert_s: float | None = None) -> PushGroup:
    """The current phase of a model's release (the group is replaced on each push).

    While paused, also when the pause began, whether it waits for a person (``cause="person"``)
    or resumes by itself (``cause="incident"``), and after how long a pause that waits for a
    person alerts (the release's ``pause_alert_s``): ``ModelopsReleasePaused`` compares them.
    """
    registry = CollectorRegistry()
    Gauge("modelops_release_phase", "1 for the current phase of the model's latest release.",
          labelnames=("version", "phase"), registry=registry).labels(str(canary_version), phase).set(1.0)
    if paused_since is not None:
        cause = "person" if waits_for_person else "incident"
        Gauge("modelops_release_paused_since_timestamp_seconds",
              "When the model's release paused (present only while it is paused).",
              labelnames=("version", "cause"), registry=registry).labels(str(canary_version), cause).set(paused_since)
    if paused_since is not None and pause_alert_s is not None:
        Gauge("modelops_release_pause_alert_after_seconds",
              "How long a pause that waits for a person may last before it alerts (the release's pause_alert_s).",
              registry=registry).set(pause_alert_s)
    return PushGroup(RELEASE_JOB, {"model": model}, registry)


def push_groups(url: str, groups: Iterable[PushGroup], timeout_s: float = 10.0) -> int:
    """PUT every group to the Pushgateway at ``url``; returns how many were pushed.

    Raises:
        MetricsPushError: the gateway could not be reached or refused a group (names job and grouping).
    """
    from prometheus_client import push_to_gateway

    pushed = 0
    for group in groups:
        try:
            push_to_gateway(url, job=group.job, registry=group.registry, grouping_key=dict(group.grouping),
                            timeout=timeout_s)
        except OSError as exc:  # URLError and HTTPError are OSErrors
            raise MetricsPushError(f"push of job={group.job} {dict(group.grouping)} to {url} failed: {exc}") from exc
        pushed += 1
    return pushed


def push_if_configured(groups: Sequence[PushGroup], what: str) -> int:
    """Push to ``MODELOPS_PUSHGATEWAY_URL`` (or the embedded one); a failure is logged, never raised.

    The batch result itself is already stored (object store, MLflow): the metrics are a copy,
    and a Pushgateway outage must not fail the DAG run that produced them.
    """
    from modelops.config import settings
    from modelops.observability.prometheus import pushgateway_endpoint

    url = pushgateway_endpoint(settings())
    if not url:
        return 0
    try:
        pushed = push_groups(url, groups)
    except MetricsPushError as exc:
        log.warning("%s: metrics not pushed: %s", what, exc)
        return 0
    log.info("%s: pushed %d metric group(s) to %s", what, pushed, url)
    return pushed
