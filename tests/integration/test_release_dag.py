"""model_release (first half) as Airflow runs it on the real stack.

register → release DAG run → Triton serves the version with the model's own scores;
a contract violation fails the release with the named expectations, leaves Triton
untouched and notifies; a Staging transition in MLflow starts exactly one release run.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from tests.support.receiver import NotificationReceiver

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained() -> Any:
    """A small reference model (fast to train; same code path as the real one)."""
    from modelops.example.synthetic import WorldSpec
    from modelops.example.train import TrainSpec, train

    return train(TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25))


@pytest.fixture(scope="module")
def model_name() -> str:
    return f"rel_{uuid.uuid4().hex[:6]}"


def _register(trained: Any, mlflow_uri: str, name: str) -> int:
    from modelops.example.tracking import log_trained_model

    logged = log_trained_model(trained, mlflow_uri, register_name=name, experiment="modelops-tests-release")
    assert logged.registered_version is not None
    return int(logged.registered_version)


def _release(airflow: AirflowClient, conf: dict[str, Any]) -> tuple[str, str]:
    run_id = airflow.trigger("model_release", conf, run_id=f"test-{uuid.uuid4().hex[:8]}")
    return run_id, airflow.wait("model_release", run_id, timeout_s=420)


def _task_states(airflow: AirflowClient, run_id: str) -> dict[str, str]:
    return {t["task_id"]: t["state"] for t in airflow.task_instances("model_release", run_id)}


def test_a_registered_version_is_released_and_triton_serves_its_scores(
    airflow: AirflowClient, mlflow_uri: str, triton_url: str, trained: Any, model_name: str
) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.publisher import publish_version

    version = _register(trained, mlflow_uri, model_name)
    run_id, state = _release(airflow, {"model": model_name, "version": str(version)})
    assert state == "success", _task_states(airflow, run_id)
    published = airflow.xcom("model_release", run_id, "publish")
    triton_version = int(published["triton_version"])

    # Triton serves the version; 100 requests score like the model's own ONNX pipeline in-process.
    from modelops.example.train import onnx_scores

    sample = trained.eval_sample[list(trained.feature_names)].to_numpy(np.float32)
    rng = np.random.default_rng(1)
    for _ in range(100):
        rows = sample[rng.choice(len(sample), size=int(rng.integers(1, 8)), replace=False)]
        body = {"inputs": [{"name": "features", "shape": list(rows.shape), "datatype": "FP32",
                            "data": rows.ravel().tolist()}]}
        response = requests.post(f"{triton_url}/v2/models/{model_name}/versions/{triton_version}/infer",
                                 json=body, timeout=30)
        assert response.status_code == 200, response.text
        served = np.array(response.json()["outputs"][0]["data"], dtype=np.float64)
        expected = onnx_scores(trained.preprocess_onnx, trained.model_onnx, rows).ravel()
        assert np.max(np.abs(served - expected)) <= 1e-5

    # The gate moved it to Staging; as the model's first version (no stable routes yet) the canary
    # stage then routes it 100% and promotes it.
    info = MlflowRegistry.from_settings().get(model_name, version)
    assert info.tags.get("modelops.contract_passed") == "true"
    assert info.stage == "Production"
    assert "champion" in info.aliases
    assert info.tags["modelops.triton_version"] == str(triton_version)
    assert info.tags["modelops.sha256"] == published["sha256"]

    # A second publish of the same version is a no-op: same integer, nothing uploaded.
    again = publish_version(model_name, version)
    assert (again.triton_version, again.uploaded) == (triton_version, False)


def test_a_contract_violation_fails_the_release_names_the_expectation_and_notifies(
    airflow: AirflowClient, mlflow_uri: str, triton_url: str, trained: Any, model_name: str,
    notifications: NotificationReceiver, stack_settings: Settings,
) -> None:
    from modelops.objectstore import ObjectStore
    from modelops.registry.mlflow_registry import MlflowRegistry

    bad_sample = trained.eval_sample.copy()
    bad_sample.loc[: len(bad_sample) // 2, "user_ctr_30d"] = 7.5  # a rate far above its max of 1
    bad = replace(trained, eval_sample=bad_sample, variant_json=b'{"variant": "good", "note": "bad sample"}')
    version = _register(bad, mlflow_uri, model_name)
    store = ObjectStore.from_settings(stack_settings)
    triton_keys_before = sorted(store.list_keys(f"triton/repository/{model_name}"))
    already = len(notifications.messages)

    run_id, state = _release(airflow, {"model": model_name, "version": str(version)})
    assert state == "failed"
    states = _task_states(airflow, run_id)
    assert states["contract_gate"] == "failed"
    assert states["publish"] in ("upstream_failed", None)

    info = MlflowRegistry.from_settings().get(model_name, version)
    assert info.stage == "None"
    assert info.tags.get("modelops.contract_passed") == "false"
    assert sorted(store.list_keys(f"triton/repository/{model_name}")) == triton_keys_before

    messages = notifications.wait_for(already + 1, timeout_s=30)[already:]
    assert messages, "no notification delivered for the failed contract"
    text = messages[-1]["title"] + messages[-1]["message"]
    assert f"{model_name} v{version}" in text
    assert "user_ctr_30d" in text and "expect_column_values_to_be_between" in text


def test_a_staging_transition_in_mlflow_starts_exactly_one_release(
    airflow: AirflowClient, mlflow_uri: str, trained: Any, model_name: str
) -> None:
    from mlflow import MlflowClient

    version = _register(trained, mlflow_uri, model_name)
    MlflowClient(mlflow_uri).transition_model_version_stage(model_name, str(version), "Staging")

    def runs_for(v: int) -> list[dict[str, Any]]:
        runs = airflow.request("GET", "/api/v2/dags/model_release/dagRuns", params={"limit": 100})["dag_runs"]
        return [r for r in runs if (r.get("conf") or {}).get("model") == model_name
                and str((r.get("conf") or {}).get("version")) == str(v)]

    # Two watcher ticks (as the schedule would run them): the version is released once.
    for _ in range(2):
        tick = airflow.trigger("release_on_staging", run_id=f"test-watch-{uuid.uuid4().hex[:8]}")
        assert airflow.wait("release_on_staging", tick, timeout_s=240) == "success"
    started = runs_for(version)
    assert len(started) == 1
    assert started[0]["conf"]["started_by"] == "staging-watcher"
    assert airflow.wait("model_release", started[0]["dag_run_id"], timeout_s=420) == "success"
    # The version released from the UI earlier (moved to Staging by its gate) was not released again.
    assert len(runs_for(1)) == 1
