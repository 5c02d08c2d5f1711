"""The release steps that the ``model_release`` DAG wires together (first half).

resolve candidate → contract gate → publish to Triton → verify served. Each step is
idempotent and returns a small JSON-able dict (it travels through XCom). A failed gate
raises :class:`~modelops.errors.GateFailed` (not retried); infrastructure errors raise
the package's other exceptions (retried by Airflow).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from modelops.errors import GateFailed, RegistryError
from modelops.release.autostart import release_options, staging_versions_to_release

__all__ = ["Candidate", "contract_gate", "publish", "release_options", "resolve_candidate",
           "staging_versions_to_release", "verify"]

EVAL_SAMPLE_ARTIFACT = "eval/features.parquet"
CONTRACT_ARTIFACT_DIR = "contracts"
_VERSION = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Candidate:
    """The version a release takes; ``kind`` says how it is published (:mod:`modelops.release.spec_release`)."""

    model: str
    version: str
    run_id: str
    stage: str
    started_by: str
    kind: str = "pipeline"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def resolve_candidate(params: Mapping[str, Any], *, release_run_id: str) -> Candidate:
    """The MLflow version to release, from the trigger form's params.

    ``run_uri`` (``runs:/<run_id>/<path>``) is registered first under ``model``; else
    ``version`` is a number or an alias (``challenger``, ``champion`` …). The version is
    claimed for this release run, so the Staging watcher never starts a second release.

    Raises:
        GateFailed: the form names no usable version, or another release run holds it.
    """
    from modelops.registry.mlflow_registry import MlflowRegistry

    model = str(params.get("model") or "").strip()
    if not model:
        raise GateFailed("model: required (example: recommender)")
    registry = MlflowRegistry.from_settings()
    run_uri = str(params.get("run_uri") or "").strip()
    ref = str(params.get("version") or "").strip()
    if run_uri:
        info = registry.register(run_uri, model, tags={"modelops.registered_by": release_run_id})
    elif _VERSION.match(ref):
        info = registry.get(model, ref)
    elif ref:
        found = registry.by_alias(model, ref)
        if found is None:
            raise GateFailed(f"version: alias {ref!r} is not set on model {model!r} (example: 3 or challenger)")
        info = found
    else:
        raise GateFailed("version: give a version number, an alias or a run_uri (example: 3)")
    started_by = str(params.get("started_by") or "airflow-ui")
    claim_id = str(params.get("claim_id") or release_run_id)
    if not registry.claim_release(model, info.version, released_by=started_by, release_run_id=claim_id):
        raise GateFailed(f"{model}/{info.version} is already being released by another run; not releasing twice")
    from modelops.release.spec_release import kind_of

    return Candidate(model, info.version, info.run_id or "", info.stage, started_by,
                     kind_of(registry, info.run_id or ""))


def contract_gate(candidate: Mapping[str, str], *, notify: bool = True) -> dict[str, Any]:
    """Validate the version's evaluation sample against the feature suite (GX, pandas).

    The validation result JSON and its HTML page are stored as artifacts of the version's
    run (``contracts/``); the result is tagged on the version. Pass: the version moves to
    Staging (alias ``challenger``). Fail: a notification names each failed expectation, and
    :class:`GateFailed` stops the release before Triton is touched.
    """
    from modelops.contracts.report import render_html
    from modelops.contracts.suites import load_suite
    from modelops.contracts.validation import read_pandas, validate
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.release.spec_release import SPEC, gate_input

    model, version, run_id = candidate["model"], candidate["version"], candidate["run_id"]
    registry = MlflowRegistry.from_settings()
    with tempfile.TemporaryDirectory() as tmp:
        if candidate.get("kind") == SPEC:
            checked = gate_input(registry, model, version, run_id, Path(tmp))
            if checked.frame is None:
                summary = f"passed (a model of tensors: no columns to check; {checked.source} checked at publish)"
                registry.to_staging(model, version, contract_passed=True, contract_result=summary)
                return {"success": True, "summary": summary, "rows": 0, "artifacts": ""}
            frame, suite, title = checked.frame, checked.suite, checked.title
        else:
            try:
                sample = registry.download(run_id, EVAL_SAMPLE_ARTIFACT, Path(tmp))
            except RegistryError as exc:
                raise GateFailed(f"{model}/{version}: no evaluation sample {EVAL_SAMPLE_ARTIFACT} in run {run_id}: "
                                 f"log one with the model (see modelops example train)") from exc
            frame = read_pandas(sample)
            frame = frame.drop(columns=[c for c in ("score", "label") if c in frame.columns])
            suite, title = load_suite("features"), f"Feature contract: {model} v{version}"
        report = validate(frame, suite)
        out = Path(tmp) / CONTRACT_ARTIFACT_DIR
        out.mkdir()
        (out / "features_validation.json").write_text(json.dumps(report.to_json_dict(), indent=2, default=str))
        (out / "features_validation.html").write_text(render_html(report, title=title))
        if run_id:
            registry.log_artifacts(run_id, out, CONTRACT_ARTIFACT_DIR)
    failed = [o.describe() for o in report.failed]
    # the tag names what failed (the first expectations), so the MLflow UI says why without the artifacts
    summary = "passed" if report.success else f"failed ({len(failed)} expectation(s)): " + "; ".join(failed)
    if not report.success:
        registry.set_tags(model, version, {"modelops.contract_result": summary[:250],
                                           "modelops.contract_passed": "false"})
        message = f"{model}/{version}: the feature contract failed; release stopped before Triton.\n" + \
            "\n".join(f"  - {line}" for line in failed)
        if notify:
            _notify_contract_failure(model, version, failed, run_id)
        raise GateFailed(message)
    registry.to_staging(model, version, contract_passed=True, contract_result=summary)
    return {"success": True, "summary": summary, "rows": report.row_count,
            "artifacts": f"runs:/{run_id}/{CONTRACT_ARTIFACT_DIR}"}


def _notify_contract_failure(model: str, version: str, failed: list[str], run_id: str) -> None:
    from modelops.notify import Message, default_notifier

    default_notifier().send(Message(
        title=f"Release stopped: {model} v{version} failed its feature contract",
        body="\n".join(failed[:20]) + (f"\n… and {len(failed) - 20} more" if len(failed) > 20 else ""),
        severity="failure",
        key=f"contract-failed/{model}/{version}",
        facts={"model": model, "version": version, "results": f"runs:/{run_id}/{CONTRACT_ARTIFACT_DIR}"},
    ))


def publish(candidate: Mapping[str, str]) -> dict[str, Any]:
    """Build, upload (verified) and load the Triton version; returns the publish result."""
    from modelops.release import spec_release
    from modelops.serving.publisher import publish_version

    if candidate.get("kind") == spec_release.SPEC:
        return spec_release.publish(candidate)
    result = publish_version(candidate["model"], candidate["version"])
    return asdict(result)


def verify(candidate: Mapping[str, str], published: Mapping[str, Any]) -> dict[str, Any]:
    """Triton serves the version, its config matches, and it scores like the ONNX files in-process."""
    from modelops.release import spec_release
    from modelops.serving.publisher import fetch_version, verify_published

    if candidate.get("kind") == spec_release.SPEC:
        return spec_release.verify(published)
    artifacts, _ = fetch_version(candidate["model"], candidate["version"])
    check = verify_published(str(published["model"]), int(published["triton_version"]), artifacts)
    return asdict(check)
