"""The nightly_drift DAG's task bodies: contract check, baselines, staging, publishing, alerts.

For day D and each model version in Production:

* baseline = the version's launch-day sample: the scored samples of the first full day
  after promotion, captured once (``baselines/<model>/v<K>/samples.parquet``) and recorded
  on the MLflow version (``modelops.drift_baseline*`` tags); the day it is captured has no
  drift report. Rows that form the baseline never count as current.
* current = D's scored samples of that version.

Spark computes the statistics (``modelops drift`` through spark-submit); these functions
move files, record results and notify.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from modelops.config import settings
from modelops.objectstore import ObjectStore
from modelops.records import LOG_PREFIXES

REPORTS_PREFIX = "reports/drift"
BASELINES_PREFIX = "baselines"
BASELINE_TAG = "modelops.drift_baseline"
BASELINE_DAY_TAG = "modelops.drift_baseline_day"
BASELINE_UNTIL_TAG = "modelops.drift_baseline_until"


@dataclass(frozen=True)
class DayPaths:
    root: Path

    @classmethod
    def for_day(cls, day: str) -> DayPaths:
        return cls(settings().home / "jobs" / "drift" / f"dt={day}")

    @property
    def samples(self) -> Path:
        return self.root / "samples"

    @property
    def sections(self) -> Path:
        return self.root / "contract_section.json"

    def version_dir(self, model: str, triton_version: int) -> Path:
        return self.root / f"{model}-v{triton_version}"


def _day_bounds(day: str) -> tuple[datetime, datetime]:
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return start, start + timedelta(days=1)


def stage_day(day: str) -> dict[str, Any]:
    """Copy D's scored-sample partitions from the object store (replacing an earlier copy)."""
    from modelops.jobs.staging import stage_partitions

    paths = DayPaths.for_day(day)
    start, end = _day_bounds(day)
    files = stage_partitions(ObjectStore.from_settings(), LOG_PREFIXES["scored_samples"], start, end, paths.samples)
    return {"day": day, "samples": str(paths.samples), "files": files}


def validate_contract(day: str) -> dict[str, Any]:
    """The GX feature suite on D's scored samples, with Spark; the summary goes into every report."""
    from modelops.contracts.validation import validate_path

    paths = DayPaths.for_day(day)
    if not any(paths.samples.rglob("*.parquet")):
        section: dict[str, Any] = {"status": "no scored samples for this day"}
    else:
        report = validate_path(paths.samples, "features", engine="spark")
        failed = [o.describe() for o in report.failed]
        section = {
            "suite": report.suite, "engine": report.engine, "success": report.success,
            "rows": report.row_count, "failed_expectations": failed or ["none"],
        }
    paths.sections.write_text(json.dumps({"Feature contract (Great Expectations, Spark)": section}, indent=2))
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


def _filter_version(samples: Path, model: str, triton_version: int, dst: Path,
                    *, after: datetime | None = None) -> int:
    """Write the rows of one version (optionally ts > after) to ``dst`` as one Parquet file; returns rows.

    Streams record batches (pyarrow dataset), so memory stays bounded by one batch.
    """
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    files = sorted(str(p) for p in samples.rglob("*.parquet"))
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not files:
        return 0
    dataset = ds.dataset(files, format="parquet")
    condition = (ds.field("model") == model) & (ds.field("model_version") == triton_version)
    if after is not None:
        import pyarrow as pa

        condition = condition & (ds.field("ts") > pa.scalar(after, type=pa.timestamp("us", tz="UTC")))
    rows = 0
    writer = None
    try:
        for batch in dataset.to_batches(filter=condition):
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pq.ParquetWriter(str(dst), batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows


def prepare_version(day: str, version: dict[str, Any]) -> dict[str, Any] | None:
    """Baseline and current Parquet for one version, or None when there is nothing to compare yet.

    On the launch day the day's samples are captured as the baseline (uploaded, recorded on
    the MLflow version) and no comparison is made that day.
    """
    from modelops.registry.mlflow_registry import MlflowRegistry

    model, triton_version = str(version["model"]), int(version["triton_version"])
    tags: dict[str, str] = version["tags"]
    paths = DayPaths.for_day(day)
    vdir = paths.version_dir(model, triton_version)
    shutil.rmtree(vdir, ignore_errors=True)
    store = ObjectStore.from_settings()
    registry = MlflowRegistry.from_settings()
    baseline_key = tags.get(BASELINE_TAG)
    if not baseline_key:
        promoted_at = tags.get("modelops.promoted_at")
        if not promoted_at or date.fromisoformat(day) < first_full_day_after(promoted_at):
            return None  # launch day not complete yet
        captured = vdir / "baseline.parquet"
        rows = _filter_version(paths.samples, model, triton_version, captured)
        if rows == 0:
            return None
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        until = pc.max(pq.read_table(captured, columns=["ts"])["ts"]).as_py()
        key = f"{BASELINES_PREFIX}/{model}/v{triton_version}/samples.parquet"
        store.put_bytes(key, captured.read_bytes())
        registry.set_tags(model, version["version"], {BASELINE_TAG: key, BASELINE_DAY_TAG: day,
                                                      BASELINE_UNTIL_TAG: until.isoformat()})
        print(f"{model} v{triton_version}: captured {rows} rows of {day} as the drift baseline ({key})")
        return None
    baseline = vdir / "baseline.parquet"
    baseline.parent.mkdir(parents=True, exist_ok=True)
    baseline.write_bytes(store.get_bytes(baseline_key))
    after = None
    if tags.get(BASELINE_DAY_TAG) == day and tags.get(BASELINE_UNTIL_TAG):
        after = datetime.fromisoformat(tags[BASELINE_UNTIL_TAG])  # rows of the baseline are not current
    current = vdir / "current.parquet"
    rows = _filter_version(paths.samples, model, triton_version, current, after=after)
    if rows == 0:
        return None
    return {**{k: v for k, v in version.items() if k != "tags"}, "baseline": str(baseline),
            "current": str(current), "out": str(vdir / "report"), "current_rows": rows}


def submit_args(prepared: dict[str, Any], day: str, master: str) -> list[str]:
    from modelops.features import DEFAULT_FEATURES_FILE

    return ["drift", "--baseline", prepared["baseline"], "--current", prepared["current"],
            "--features", str(DEFAULT_FEATURES_FILE), "--out", prepared["out"],
            "--sections", str(DayPaths.for_day(day).sections), "--master", master]


def publish(day: str, prepared: dict[str, Any]) -> dict[str, Any]:
    """Store the report (object store + MLflow artifacts on the version's run) and notify on drift."""
    from modelops.jobs.staging import upload_folder

    out = Path(prepared["out"])
    document = json.loads((out / "drift.json").read_text())
    model, triton_version = prepared["model"], prepared["triton_version"]
    prefix = f"{REPORTS_PREFIX}/{model}/v{triton_version}/dt={day}"
    store = ObjectStore.from_settings()
    upload_folder(store, out, prefix)
    from modelops.registry.mlflow_registry import MlflowRegistry

    MlflowRegistry.from_settings().log_artifacts(prepared["run_id"], out, f"drift/dt={day}")
    report_uri = store.uri(f"{prefix}/drift_report.html")
    from modelops.cockpit.describe import refresh_quietly

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
