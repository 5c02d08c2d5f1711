"""The MLflow registry adapter against the embedded MLflow server."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest

from modelops.errors import RegistryError
from modelops.registry.lifecycle import CHALLENGER, CHAMPION, TAG
from modelops.registry.mlflow_registry import MlflowRegistry

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run_uri(mlflow_uri: str) -> str:
    import mlflow

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("modelops-tests-registry")
    with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "model.onnx").write_bytes(b"onnx bytes")
        mlflow.log_artifact(str(Path(tmp) / "model.onnx"), artifact_path="onnx")
    return f"runs:/{run.info.run_id}/onnx"


def test_release_lifecycle_keeps_stages_and_aliases_in_step(mlflow_uri: str, run_uri: str) -> None:
    registry = MlflowRegistry(mlflow_uri)
    name = f"reg_{uuid.uuid4().hex[:8]}"
    v1 = registry.register(run_uri, name)
    v2 = registry.register(run_uri, name)
    assert (v1.version, v2.version, v1.stage, v1.source) == ("1", "2", "None", run_uri)

    with pytest.raises(RegistryError, match="contract gate failed"):
        registry.to_staging(name, 1, contract_passed=False, contract_result="3 expectations failed")
    failed = registry.get(name, 1)
    assert failed.stage == "None" and failed.tags[TAG["contract_passed"]] == "false"

    staged = registry.to_staging(name, 1, contract_passed=True, contract_result="ok")
    assert (staged.stage, staged.aliases) == ("Staging", (CHALLENGER,))
    promoted = registry.promote(name, 1)
    assert (promoted.stage, promoted.aliases) == ("Production", (CHAMPION,))
    assert registry.by_alias(name, CHALLENGER) is None

    registry.to_staging(name, 2, contract_passed=True)
    assert registry.by_alias(name, CHALLENGER).version == "2"  # type: ignore[union-attr]
    registry.promote(name, 2)
    assert registry.get(name, 1).stage == "Archived" and registry.get(name, 1).aliases == ()
    assert registry.by_alias(name, CHAMPION).version == "2"  # type: ignore[union-attr]
    assert registry.stage_alias_consistent(name) == []

    with pytest.raises(RegistryError, match="Archived -> Production is not allowed"):
        registry.promote(name, 1)


def test_rollback_marks_the_canary_and_leaves_the_champion(mlflow_uri: str, run_uri: str) -> None:
    registry = MlflowRegistry(mlflow_uri)
    name = f"reg_{uuid.uuid4().hex[:8]}"
    registry.register(run_uri, name)
    registry.register(run_uri, name)
    registry.to_staging(name, 1, contract_passed=True)
    registry.promote(name, 1)
    registry.to_staging(name, 2, contract_passed=True)
    rolled = registry.mark_rollback(name, 2, reason="error rate 5.1% > 1%")
    assert rolled.stage == "Archived" and CHALLENGER not in rolled.aliases
    assert rolled.tags[TAG["rollback_reason"]] == "error rate 5.1% > 1%"
    assert registry.by_alias(name, CHAMPION).version == "1"  # type: ignore[union-attr]
    assert registry.get(name, 1).stage == "Production"

    # An operator re-runs the rolled-back release: the version is staged again, then promotable.
    restaged = registry.restage(name, 2)
    assert (restaged.stage, restaged.aliases) == ("Staging", (CHALLENGER,))
    assert restaged.tags[TAG["rollback_reason"]] == "error rate 5.1% > 1%", "its history stays"
    assert registry.restage(name, 2).stage == "Staging", "idempotent"
    registry.promote(name, 2)
    assert registry.get(name, 1).stage == "Archived" and registry.stage_alias_consistent(name) == []
    # A version whose contract gate never passed does not come back.
    registry.register(run_uri, name)
    registry.mark_rollback(name, 3, reason="never gated")
    with pytest.raises(RegistryError, match="contract gate has not passed"):
        registry.restage(name, 3)
    assert registry.get(name, 3).stage == "Archived"


def test_a_release_is_claimed_once(mlflow_uri: str, run_uri: str) -> None:
    registry = MlflowRegistry(mlflow_uri)
    name = f"reg_{uuid.uuid4().hex[:8]}"
    registry.register(run_uri, name)
    assert registry.claim_release(name, 1, released_by="airflow", release_run_id="manual__1")
    assert registry.claim_release(name, 1, released_by="airflow", release_run_id="manual__1")
    assert not registry.claim_release(name, 1, released_by="watcher", release_run_id="scheduled__2")
    assert registry.get(name, 1).tags[TAG["released_by"]] == "airflow"


def test_mlflow_errors_become_registry_errors(mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = MlflowRegistry(mlflow_uri)
    with pytest.raises(RegistryError, match="no_such_model"):
        registry.get("no_such_model", 1)
    with pytest.raises(RegistryError, match="must look like runs:/"):
        registry.register("models:/x/1", "x")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    with pytest.raises(RegistryError, match=r"127\.0\.0\.1:9"):
        MlflowRegistry("http://127.0.0.1:9").get("x", 1)
