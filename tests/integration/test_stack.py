"""The embedded stack, against its real servers: Airflow, MLflow, Triton, the object store."""

from __future__ import annotations

import os
import signal
import time
import uuid

import numpy as np
import pytest
import requests

from modelops import process
from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from modelops.stack import launcher
from modelops.stack.launcher import all_services

pytestmark = pytest.mark.integration


def test_every_service_is_healthy(stack_settings: Settings) -> None:
    states = launcher.status(stack_settings)
    assert {s.name: s.state for s in states} == {s.name: "healthy" for s in states}
    assert {s.name for s in states} >= {"objectstore", "mlflow", "triton", "airflow-api-server",
                                         "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}


def test_airflow_rest_api_answers_with_a_token(airflow: AirflowClient) -> None:
    assert airflow.version().startswith("3.3")
    unauthenticated = requests.get(f"{airflow.base_url}/api/v2/dags", timeout=5)
    assert unauthenticated.status_code == 401


def test_wrong_password_is_refused(stack_settings: Settings) -> None:
    response = requests.post(f"{stack_settings.airflow_api_url}/auth/token",
                             json={"username": stack_settings.airflow_user, "password": "wrong"}, timeout=5)
    assert response.status_code == 401


def test_trivial_dag_triggered_through_rest_succeeds(airflow: AirflowClient) -> None:
    import modelops

    run_id = airflow.trigger("modelops_smoke", run_id=f"test-{uuid.uuid4().hex[:8]}")
    assert airflow.wait("modelops_smoke", run_id, timeout_s=240) == "success"
    assert airflow.xcom("modelops_smoke", run_id, "package_version") == modelops.__version__


def test_mlflow_registers_a_model_version(mlflow_uri: str) -> None:
    import mlflow
    from mlflow import MlflowClient
    from sklearn.linear_model import LogisticRegression

    mlflow.set_tracking_uri(mlflow_uri)
    model = LogisticRegression().fit(np.array([[0.0], [1.0], [2.0], [3.0]]), [0, 0, 1, 1])
    name = f"stack-test-{uuid.uuid4().hex[:6]}"
    with mlflow.start_run() as run:
        mlflow.sklearn.log_model(model, name="model", registered_model_name=name)
    client = MlflowClient(mlflow_uri)
    versions = client.search_model_versions(f"name='{name}'")
    assert [v.version for v in versions] == ["1"]
    assert versions[0].run_id == run.info.run_id
    # The artifact went to the object store through the MLflow server.
    loaded = mlflow.sklearn.load_model(f"models:/{name}/1")
    assert loaded.predict(np.array([[3.0]]))[0] == 1


def test_triton_loads_the_smoke_model_and_answers(triton_url: str) -> None:
    load = requests.post(f"{triton_url}/v2/repository/models/smoke/load", json={}, timeout=60)
    assert load.status_code == 200, load.text
    body = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": "FP32",
                        "data": [1, 2, 3, 4, 0.5, -1, 0, 10]}]}
    response = requests.post(f"{triton_url}/v2/models/smoke/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    out = response.json()["outputs"][0]
    assert out["shape"] == [2, 4]
    assert out["data"] == [2, 4, 6, 8, 1, -2, 0, 20]


def test_object_store_round_trips_a_file(object_store: ObjectStore, tmp_path: object) -> None:
    key = f"tests/{uuid.uuid4().hex}.bin"
    payload = os.urandom(256 * 1024)
    digest = object_store.put_bytes(key, payload)
    assert object_store.get_bytes(key) == payload
    assert object_store.exists(key)
    assert key in list(object_store.list_keys("tests/"))
    import hashlib

    assert digest == hashlib.sha256(payload).hexdigest()
    object_store.delete(key)
    assert not object_store.exists(key)


def test_second_up_is_idempotent_and_restarts_a_dead_service(stack_settings: Settings) -> None:
    before = {s.name: s.pid for s in launcher.status(stack_settings)}
    t0 = time.monotonic()
    launcher.up(stack_settings, progress=lambda line: None)
    assert time.monotonic() - t0 < 10
    assert {s.name: s.pid for s in launcher.status(stack_settings)} == before

    kept = f"tests/{uuid.uuid4().hex}.bin"
    ObjectStore.from_settings(stack_settings).put_bytes(kept, b"written before the kill")
    store = next(s for s in all_services(stack_settings) if s.name == "objectstore")
    pid = process.live_pid(store.pid_file(stack_settings.home))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process.live_pid(store.pid_file(stack_settings.home)) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {s.name: s.state for s in launcher.status(stack_settings)}["objectstore"] == "stopped"
    states = {s.name: s for s in launcher.up(stack_settings, progress=lambda line: None)}
    assert states["objectstore"].state == "healthy"
    assert states["objectstore"].pid not in (None, pid)
    assert states["mlflow"].pid == before["mlflow"]
    # SeaweedFS keeps its data on disk: what was written before the kill is still there, and writes work.
    assert ObjectStore.from_settings(stack_settings).get_bytes(kept) == b"written before the kill"
    ObjectStore.from_settings(stack_settings).put_bytes("tests/after-restart", b"ok")


@pytest.mark.stack_teardown
def test_stack_down_leaves_no_port_listening(stack_settings: Settings) -> None:
    ports = [p for s in all_services(stack_settings) for p in s.ports]
    stopped = launcher.down(stack_settings, progress=lambda line: None)
    assert "triton" in stopped and "airflow-api-server" in stopped
    assert [p for p in ports if process.port_in_use(stack_settings.bind_host, p)] == []
    assert all(s.state == "stopped" for s in launcher.status(stack_settings))
