"""The nightly_drift DAG's task bodies: contract check, baselines, job arguments, publishing, alerts.

For day D and each model version in Production:

* baseline = the version's launch-day sample: the scored samples of the first full day
  after promotion, captured once (``baselines/<model>/v<K>/samples.parquet``) and recorded
  on the MLflow version (``modelops.drift_baseline*`` tags); the day it is captured has no
  drift report. Rows that form the baseline never count as current.
* current = D's scored samples of that version (``jobs/drift/dt=D/<model>-v<K>/current.parquet``).
* a model published from its spec: its samples are the gateway's model samples (``logs/model_samples``),
  widened to one column per feature of its spec and ``score`` on the way to the store, and the job
  reads its features (names, ``drift_sensitivity``, ``drift_threshold``) from the version's
  ``model-spec.json``: every model gets its own report.

Spark computes the statistics (``modelops drift`` through spark-submit): its executors read
the baseline and the current samples from the object store and the job writes the report to
``reports/drift/<model>/v<K>/dt=D/``. The tasks hand each other ``s3://`` locations only, so
each may run on a different machine; these functions pick data, record results and notify.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from modelops.drift.model_samples import features_of
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES
from modelops.objectstore import ObjectStore
from modelops.records import LOG_PREFIXES

REPORTS_PREFIX = "reports/drift"
BASELINES_PREFIX = "baselines"
JOBS_PREFIX = "jobs/drift"
SECTIONS_NAME = "contract_section.json"
BASELINE_TAG = "modelops.drift_baseline"
BASELINE_DAY_TAG = "modelops.drift_baseline_day"
BASELINE_UNTIL_TAG = "modelops.drift_baseline_until"


def samples_prefix(day: str) -> str:
    """D's scored-sample partitions (``dt=D/hour=HH/``) in the platform bucket."""
    return f"{LOG_PREFIXES['scored_samples']}/dt={day}"


def model_samples_prefix(day: str) -> str:
    """D's model-sample partitions (the rows of models published from their spec)."""
    return f"{LOG_PREFIXES['model_samples']}/dt={day}"


def work_prefix(day: str) -> str:
    """D's intermediate objects: the contract section and each version's current samples."""
    return f"{JOBS_PREFIX}/dt={day}"


WORK_KEEP_DAYS = 7
"""Days of intermediate objects kept (the newest reruns and debugging need them); older ones are deleted."""


def stale_work_keys(keys: Iterator[str] | list[str], day: str, keep_days: int = WORK_KEEP_DAYS) -> list[str]:
    """The intermediate objects (``jobs/drift/dt=X/...``) of days more than ``keep_days`` before ``day``.

    Keys that do not carry a ``dt=YYYY-MM-DD`` folder are never selected.
    """
    oldest_kept = date.fromisoformat(day) - timedelta(days=keep_days)
    stale = []
    for key in keys:
        folder = key[len(JOBS_PREFIX) + 1:].split("/", 1)[0] if key.startswith(JOBS_PREFIX + "/") else ""
        try:
            when = date.fromisoformat(folder.removeprefix("dt=")) if folder.startswith("dt=") else None
        except ValueError:
            when = None
        if when is not None and when < oldest_kept:
            stale.append(key)
    return stale


def prune_work(day: str, keep_days: int = WORK_KEEP_DAYS) -> int:
    """Delete the intermediate objects of days older than ``keep_days`` before ``day``; returns how many."""
    store = ObjectStore.from_settings()
    stale = stale_work_keys(list(store.list_keys(JOBS_PREFIX + "/")), day, keep_days)
    for key in stale:
        store.delete(key)
    return len(stale)


def locate_day(day: str) -> dict[str, Any]:
    """The ``s3://`` location of D's scored samples and how many Parquet objects it holds."""
    store = ObjectStore.from_settings()
    files = sum(1 for key in store.list_keys(samples_prefix(day) + "/") if key.endswith(".parquet"))
    return {"day": day, "samples": store.uri(samples_prefix(day)), "files": files}


def validate_contract(day: str, files: int) -> dict[str, Any]:
    """The GX feature suite on D's scored samples (Spark reads them from the store); stored for every report."""
    from modelops.contracts.validation import validate_path

    store = ObjectStore.from_settings()
    if not files:
        section: dict[str, Any] = {"status": "no scored samples for this day"}
    else:
        report = validate_path(store.uri(samples_prefix(day)), "features", engine="spark")
        failed = [o.describe() for o in report.failed]
        section = {
            "suite": report.suite, "engine": report.engine, "success": report.success,
            "rows": report.row_count, "failed_expectations": failed or ["none"],
        }
    document = {"Feature contract (Great Expectations, Spark)": section}
    store.put_bytes(f"{work_prefix(day)}/{SECTIONS_NAME}", json.dumps(document, indent=2).encode(),
                    content_type="application/json")
    return section


def production_versions() -> list[dict[str, Any]]:
    """Every model version in Production that has a Triton version."""
    from modelops.registry.mlflow_registry import MlflowRegistry

    registry = MlflowRegistry.from_settings()
    out = []
    for name in registry.model_names():
        for info in registry.versions(name, stage="Production"):
            triton_version = info.tags.get("modelops.triton_version")
            if triton_version:
                out.append({"model": name, "version": info.version, "run_id": info.run_id,
                            "triton_version": int(triton_version), "tags": dict(info.tags)})
    return out


def first_full_day_after(promoted_at: str) -> date:
    """The launch day whose samples become the baseline: the first full UTC day after promotion."""
    when = datetime.fromisoformat(promoted_at.replace("Z", "+00:00")).astimezone(UTC)
    return (when + timedelta(days=1)).date()


def _filter_version(samples: str, model: str, triton_version: int, dst: str, *, after: datetime | None = None,
                    widen_to: Sequence[str] | None = None) -> tuple[int, datetime | None]:
    """Write the rows of one version (optionally ts > after) under ``samples`` to the object ``dst``.

    Both are ``s3://`` locations; record batches are streamed from the store to the store
    (pyarrow dataset), so memory stays bounded by one batch. ``widen_to``: the samples are a spec
    model's (``logs/model_samples``) and are written in the job's wide shape with these feature
    columns (:func:`modelops.drift.model_samples.widen`). Returns (rows, latest ts); nothing is
    written when no row matches.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from modelops import spark_store
    from modelops.drift.model_samples import widen

    objects = spark_store.list_parquet([samples], "scored samples", empty_schema=pa.schema([]))
    if not objects.paths:
        return 0, None
    store = spark_store.filesystem()
    bucket, key = spark_store.split_uri(dst)
    dataset = ds.dataset(list(objects.paths), filesystem=store, format="parquet")
    condition = (ds.field("model") == model) & (ds.field("model_version") == triton_version)
    if after is not None:
        condition = condition & (ds.field("ts") > pa.scalar(after, type=pa.timestamp("us", tz="UTC")))
    latest: Any = None

    def matching() -> Iterator[pa.RecordBatch]:
        nonlocal latest
        for batch in dataset.to_batches(filter=condition):
            if batch.num_rows:
                top = pc.max(batch.column("ts")).as_py()
                latest = top if latest is None or (top is not None and top > latest) else latest
                yield batch if widen_to is None else widen(batch, widen_to)

    # Whole or not at all: a failed copy must not leave a truncated baseline at its final key.
    rows = spark_store.write_batches(store, f"{bucket}/{key}", matching(), atomic=True)
    return rows, latest


def prepare_version(day: str, version: dict[str, Any]) -> dict[str, Any] | None:
    """Object-store locations of the baseline and current samples of one version, or None (nothing to compare).

    On the launch day the day's samples are captured as the baseline (written to the store,
    recorded on the MLflow version) and no comparison is made that day.
    """
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.spec_reconcile import read_spec, spec_key

    model, triton_version = str(version["model"]), int(version["triton_version"])
    tags: dict[str, str] = version["tags"]
    store = ObjectStore.from_settings()
    spec = read_spec(store, model, triton_version)
    samples = store.uri(samples_prefix(day) if spec is None else model_samples_prefix(day))
    widen_to = None if spec is None else [f.name for f in features_of(spec)]
    if widen_to is not None and not widen_to:
        return None  # a model of tensors: no feature columns to compare
    baseline_key = tags.get(BASELINE_TAG)
    if not baseline_key:
        promoted_at = tags.get("modelops.promoted_at")
        if not promoted_at or date.fromisoformat(day) < first_full_day_after(promoted_at):
            return None  # launch day not complete yet
        key = f"{BASELINES_PREFIX}/{model}/v{triton_version}/samples.parquet"
        rows, until = _filter_version(samples, model, triton_version, store.uri(key), widen_to=widen_to)
        if rows == 0 or until is None:
            return None
        MlflowRegistry.from_settings().set_tags(model, version["version"], {
            BASELINE_TAG: key, BASELINE_DAY_TAG: day, BASELINE_UNTIL_TAG: until.isoformat()})
        print(f"{model} v{triton_version}: captured {rows} rows of {day} as the drift baseline ({key})")
        return None
    after = None
    if tags.get(BASELINE_DAY_TAG) == day and tags.get(BASELINE_UNTIL_TAG):
        after = datetime.fromisoformat(tags[BASELINE_UNTIL_TAG])  # rows of the baseline are not current
    current = store.uri(f"{work_prefix(day)}/{model}-v{triton_version}/current.parquet")
    rows, _ = _filter_version(samples, model, triton_version, current, after=after, widen_to=widen_to)
    if rows == 0:
        return None
    features = str(RECOMMENDER_FEATURES) if spec is None else store.uri(spec_key(model, triton_version))
    return {**{k: v for k, v in version.items() if k != "tags"}, "baseline": store.uri(baseline_key),
            "current": current, "out": store.uri(f"{REPORTS_PREFIX}/{model}/v{triton_version}/dt={day}"),
            "current_rows": rows, "features": features}


def submit_args(prepared: dict[str, Any], day: str, master: str) -> list[str]:
    """The ``modelops drift`` arguments for spark-submit: object-store locations and the features' document.

    The recommender's features are its declaration's ``features.yaml``; a spec model's, its version's
    ``model-spec.json`` in the store.
    """
    sections = ObjectStore.from_settings().uri(f"{work_prefix(day)}/{SECTIONS_NAME}")
    return ["drift", "--baseline", prepared["baseline"], "--current", prepared["current"],
            "--features", str(prepared.get("features") or RECOMMENDER_FEATURES), "--out", prepared["out"],
            "--sections", sections, "--master", master]


def publish(day: str, prepared: dict[str, Any]) -> dict[str, Any]:
    """Read the report the job wrote to the store, attach it to the version's MLflow run, notify on drift."""
    from modelops.spark_store import split_uri

    bucket, prefix = split_uri(prepared["out"])
    store = ObjectStore.from_settings(bucket=bucket)
    document = json.loads(store.get_bytes(f"{prefix}/drift.json"))
    model, triton_version = prepared["model"], prepared["triton_version"]
    from modelops.registry.mlflow_registry import MlflowRegistry

    with tempfile.TemporaryDirectory(prefix="modelops-drift-") as tmp:
        for name in ("drift.json", "drift_report.html"):
            (Path(tmp) / name).write_bytes(store.get_bytes(f"{prefix}/{name}"))
        MlflowRegistry.from_settings().log_artifacts(prepared["run_id"], Path(tmp), f"drift/dt={day}")
    report_uri = store.uri(f"{prefix}/drift_report.html")
    from modelops.canary.description import refresh_quietly

    refresh_quietly(model, str(prepared["version"]), store=store)  # the latest drift verdict in MLflow
    if document["drifted"]:
        _notify(model, triton_version, day, document, report_uri)
    pushed = _push_metrics(model, triton_version, day, document)
    return {"model": model, "triton_version": triton_version, "drifted": document["drifted"],
            "top_causes": document["top_causes"], "report": report_uri, "metrics_pushed": pushed}


def _push_metrics(model: str, triton_version: int, day: str, document: dict[str, Any]) -> int:
    """The version's drift results to the Pushgateway (when MODELOPS_PUSHGATEWAY_URL is set)."""
    from modelops.observability.pushed import drift_group, push_if_configured

    return push_if_configured([drift_group(model, triton_version, day, document)], f"nightly_drift {day}")


def drift_message(model: str, triton_version: int, day: str, document: dict[str, Any], report_uri: str) -> Any:
    """The notification for a drifted version: verdict, top causes with D and sensitivity, report."""
    from modelops.notify import Message, table

    by_name = {f["name"]: f for f in document["features"]}
    rows = [[name, f"{by_name[name]['ks']:.4f}", f"{by_name[name]['sensitivity']:.2f}",
             f"{by_name[name]['weighted_score']:.4f}"] for name in document["top_causes"]]
    score = document["score"]
    body = (f"{model} v{triton_version}: drift on {day} "
            f"({sum(1 for f in document['features'] if f['drifted'])} feature(s) drifted; "
            f"score KS {score['ks']:.4f}{' drifted' if score['drifted'] else ''}).\n\nTop causes:\n"
            + (table(rows, ["feature", "KS D", "sensitivity", "weighted"]) if rows else "(none: the score moved)"))
    return Message(title=f"Drift detected: {model} v{triton_version} ({day})", body=body, severity="warning",
                   key=f"drift/{model}/{triton_version}/{day}", facts={"report": report_uri})


def _notify(model: str, triton_version: int, day: str, document: dict[str, Any], report_uri: str) -> None:
    from modelops.notify import default_notifier

    default_notifier().send(drift_message(model, triton_version, day, document, report_uri))
