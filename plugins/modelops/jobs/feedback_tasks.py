"""The feedback_join DAG's task bodies: locate the day's logs, (Spark runs), publish CTR / CVR and outcomes.

Day D's run reads predictions of [D, D+1) and feedback events of [D, D+1+window) and
writes ``metrics/ctr_cvr/dt=D/`` (JSON, Parquet, quarantine). Re-running D replaces the
same keys with the same numbers. Everything the tasks hand each other is an ``s3://``
location: the Spark job reads the partitions and writes its output in the object store.

The outcome job of day D recomputes the prediction days [D-N+1, D] (N = ``outcome_days``) from
every feedback event received since D-N+1 up to D+1+window, and writes one document per model and
day, ``metrics/outcomes/dt=Di/<model>.json``: labels that come days late update their day.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from modelops.objectstore import ObjectStore
from modelops.records import LOG_PREFIXES

METRICS_PREFIX = "metrics/ctr_cvr"
OUTCOMES_PREFIX = "metrics/outcomes"


def window(day: str, window_hours: float) -> tuple[datetime, datetime, datetime]:
    """(start, end, events_end) of day D: predictions [D, D+1), events up to D+1+window."""
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    end = start + timedelta(days=1)
    return start, end, end + timedelta(hours=window_hours)


def output_prefix(day: str) -> str:
    return f"{METRICS_PREFIX}/dt={day}"


def locate(day: str, window_hours: float) -> dict[str, Any]:
    """The ``s3://`` locations of the day's prediction partitions and of the feedback partitions of its window.

    A log without a partition in the window is handed over as the day's (empty) prefix: the job
    reads it as an empty log.
    """
    from modelops.jobs.staging import partition_uris

    start, end, events_end = window(day, window_hours)
    store = ObjectStore.from_settings()
    predictions, n_pred = partition_uris(store, LOG_PREFIXES["predictions"], start, end)
    events, n_events = partition_uris(store, LOG_PREFIXES["feedback"], start, events_end)
    return {"predictions": predictions or [store.uri(f"{LOG_PREFIXES['predictions']}/dt={day}")],
            "events": events or [store.uri(f"{LOG_PREFIXES['feedback']}/dt={day}")],
            "out": store.uri(output_prefix(day)), "prediction_files": n_pred, "event_files": n_events,
            "start": start.isoformat(), "end": end.isoformat()}


def submit_args(located: dict[str, Any], window_hours: float, master: str) -> list[str]:
    """The ``modelops feedback`` arguments for spark-submit (object-store locations only)."""
    return ["feedback", "--predictions", *located["predictions"], "--events", *located["events"],
            "--start", located["start"], "--end", located["end"], "--out", located["out"],
            "--window-hours", str(window_hours), "--master", master]


def publish(day: str) -> dict[str, Any]:
    """Read the day's results the job wrote to ``metrics/ctr_cvr/dt=D/`` and log CTR / CVR to MLflow per version."""
    from modelops.feedback.outputs import JSON_NAME, current_prefix

    store = ObjectStore.from_settings()
    prefix = current_prefix(store, output_prefix(day))  # the JSON and the Parquet of one run, never a mix
    document = json.loads(store.get_bytes(f"{prefix}/{JSON_NAME}"))
    files = sum(1 for _ in store.list_keys(prefix + "/"))
    logged = log_to_mlflow(day, document["by_version"])
    pushed = _push_metrics(day, document)
    return {"uri": store.uri(prefix + "/"), "files": files, "by_version": document["by_version"],
            "rejected": document["rejected"], "mlflow_versions": logged, "metrics_pushed": pushed}


def locate_outcomes(day: str, window_hours: float, outcome_days: int) -> dict[str, Any]:
    """The ``s3://`` locations the outcome job of day D reads: N days of predictions, the feedback since then."""
    from modelops.feedback.outcome_metrics import covered_days
    from modelops.jobs.staging import partition_uris
    from modelops.serving.repository import REPOSITORY_PREFIX

    start, end = covered_days(day, outcome_days)
    events_end = window(day, window_hours)[2]
    store = ObjectStore.from_settings()
    predictions, n_pred = partition_uris(store, LOG_PREFIXES["predictions"], start, end)
    events, n_events = partition_uris(store, LOG_PREFIXES["feedback"], start, events_end)
    return {"predictions": predictions or [store.uri(f"{LOG_PREFIXES['predictions']}/dt={day}")],
            "events": events or [store.uri(f"{LOG_PREFIXES['feedback']}/dt={day}")],
            "out": store.uri(OUTCOMES_PREFIX), "specs": store.uri(REPOSITORY_PREFIX.rstrip("/")),
            "prediction_files": n_pred, "event_files": n_events}


def outcome_submit_args(day: str, located: dict[str, Any], window_hours: float, outcome_days: int,
                        master: str) -> list[str]:
    """The ``modelops outcomes`` arguments for spark-submit (object-store locations only)."""
    return ["outcomes", "--predictions", *located["predictions"], "--events", *located["events"], "--day", day,
            "--days", str(outcome_days), "--out", located["out"], "--specs", located["specs"],
            "--window-hours", str(window_hours), "--master", master]


def publish_outcomes(day: str, outcome_days: int) -> dict[str, Any]:
    """Read the documents of the days the outcome job covered; push them and tag each labelled MLflow version."""
    from modelops.feedback.outcome_metrics import covered_days
    from modelops.observability.pushed import outcome_groups, push_if_configured

    store = ObjectStore.from_settings()
    first, _ = covered_days(day, outcome_days)
    documents = []
    for i in range(outcome_days):
        prefix = f"{OUTCOMES_PREFIX}/dt={(first + timedelta(days=i)).date().isoformat()}/"
        documents += [json.loads(store.get_bytes(key)) for key in store.list_keys(prefix) if key.endswith(".json")]
    pushed = push_if_configured(outcome_groups(documents), f"feedback_join outcomes {day}")
    tagged = _tag_outcomes(documents)
    return {"uri": store.uri(OUTCOMES_PREFIX + "/"), "documents": len(documents), "metrics_pushed": pushed,
            "mlflow_versions": tagged}


def _tag_outcomes(documents: list[dict[str, Any]]) -> list[str]:
    """``modelops.outcome.<day>`` on each MLflow version of a labelled Triton version: its realized performance."""
    from modelops.registry.mlflow_registry import MlflowRegistry

    labelled = [(doc, e) for doc in documents for e in doc["versions"] if "label" in e]
    if not labelled:
        return []
    registry = MlflowRegistry.from_settings()
    tagged = []
    for doc, entry in labelled:
        label = entry["label"]
        text = " ".join([f"coverage={_fmt(label['coverage'])}",
                         *(f"{k}={_fmt(v)}" for k, v in label["metrics"].items())])
        for info in _versions_with_triton_version(registry, str(doc["model"]), int(entry["model_version"])):
            registry.set_tags(info.name, info.version, {f"modelops.outcome.{doc['day']}": text})
            tagged.append(f"{info.name}/{info.version}@{doc['day']}")
    return tagged


def _push_metrics(day: str, document: dict[str, Any]) -> int:
    """CTR / CVR per version and the rejected counts to the Pushgateway (when one is configured)."""
    from modelops.observability.pushed import feedback_groups, push_if_configured

    return push_if_configured(feedback_groups(day, document["by_version"], document["rejected"]),
                              f"feedback_join {day}")


def log_to_mlflow(day: str, rows: list[dict[str, Any]]) -> list[str]:
    """Tag each MLflow version whose Triton version is in ``rows`` and log CTR / CVR on its run.

    The run gets metrics ``online_ctr`` / ``online_cvr`` with step = YYYYMMDD (one point a day,
    re-runs overwrite the same step); the version gets ``modelops.ctr.<day>`` tags.
    """
    from modelops.registry.mlflow_registry import MlflowRegistry

    registry = MlflowRegistry.from_settings()
    step = int(day.replace("-", ""))
    logged = []
    for row in rows:
        for info in _versions_with_triton_version(registry, str(row["model"]), int(row["model_version"])):
            tags = {f"modelops.ctr.{day}": _fmt(row["ctr"]), f"modelops.cvr.{day}": _fmt(row["cvr"]),
                    f"modelops.impressions.{day}": str(row["impressions"])}
            registry.set_tags(info.name, info.version, tags)
            if info.run_id:
                for key in ("ctr", "cvr"):
                    if row[key] is not None:
                        registry.log_metric(info.run_id, f"online_{key}", float(row[key]), step=step)
            logged.append(f"{info.name}/{info.version}")
    from modelops.canary.description import refresh_quietly

    for name_version in logged:  # the version's MLflow description shows CTR / CVR by day
        name, version = name_version.rsplit("/", 1)
        refresh_quietly(name, version, registry=registry)
    return logged


def _versions_with_triton_version(registry: Any, model: str, triton_version: int) -> list[Any]:
    from modelops.errors import RegistryError

    try:
        return [v for v in registry.versions(model)
                if v.tags.get("modelops.triton_version") == str(triton_version)]
    except RegistryError:
        return []  # a model the registry does not know (e.g. served from elsewhere): nothing to log


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.6f}"
