"""The whole stack restarted, cleanly and by kill -9 (a power cut): nothing is lost, the champion serves again.

A champion is released (registered, published, Production + ``champion``, routed 100 %
through the gateway), served and given feedback. Then ``stack down`` + ``stack up``, and
later SIGKILL of every stack process + ``stack up``: each time the same champion answers
through the gateway, the MLflow registry holds the same stages, aliases and downloadable
artifacts, the routes, feature tables and every acknowledged log record are in the object
store, and Triton serves exactly the routed versions. Finally a new release through
``model_release`` promotes a new champion. The recovery time of each story is printed.

These tests restart the shared test stack (they run after every other integration test,
before the teardown test); each leaves it healthy.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore
from modelops.stack import launcher
from tests.support.eventlogs import logged_values
from tests.support.stackops import kill_everything, wait_for
from tests.support.worlds import release_champion

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

#: Bound with room on 2 shared cores: at the end of the full suite the reconciler reloads every model the
#: other tests left routed (a dozen pipelines of three python models), not just this champion.
RESTART_BOUND_S = 360.0


def _body(k: int) -> dict[str, Any]:
    return {"user_id": f"u_{k % 80:06d}", "item_ids": [f"i_{(k * 7 + j) % 80:06d}" for j in range(4)],
            "timestamp": int(time.time())}


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def champion(stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str) -> dict[str, Any]:
    """A released champion served through the gateway, with predictions and acknowledged feedback."""
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables

    released = release_champion("rst", mlflow_uri, "modelops-tests-restart")
    model, version = released.model, released.version
    features = recommender_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=5, n_users=80, n_items=80))
    publish_feature_tables(object_store, f"restart-{uuid.uuid4().hex[:6]}", users, items, features=features)
    routes = Routes(model, 1, VersionRef(released.triton_version, released.sha256), None, 0.0,
                    datetime.now(UTC).isoformat(), "tests")
    object_store.put_bytes(routes_key(model), serialize_routes(routes))
    label = routes.stable.label

    def answers() -> bool:
        response = requests.post(f"{stack_settings.gateway_url}/v1/models/{model}/predict", json=_body(0), timeout=10)
        return response.status_code == 200 and response.headers["X-Model-Version"] == label

    wait_for(answers, 60, "the gateway serves the champion")
    tokens = []
    for k in range(30):
        response = requests.post(f"{stack_settings.gateway_url}/v1/models/{model}/predict", json=_body(k), timeout=10)
        assert response.status_code == 200, response.text
        token = response.json()["feedback_token"]
        ack = requests.post(f"{stack_settings.gateway_url}/v1/feedback", timeout=10,
                            json={"feedback_token": token, "action": "click", "timestamp": time.time()})
        assert ack.status_code == 202, ack.text
        tokens.append(token)
    return {"model": model, "version": version, "label": label, "triton_version": released.triton_version,
            "tokens": tokens}


def _snapshot(cfg: Settings, store: ObjectStore, champion: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """What must survive: registry (stages, aliases, artifact bytes), routes and feature tables."""
    import mlflow

    from modelops.registry.mlflow_registry import MlflowRegistry

    model, version = champion["model"], champion["version"]
    registry = MlflowRegistry.from_settings()
    record = registry.get(model, version)
    target = tmp / uuid.uuid4().hex
    mlflow.set_tracking_uri(cfg.mlflow_uri)
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{model}@champion", dst_path=str(target))
    return {
        "stage": record.stage, "aliases": sorted(record.aliases),
        "artifacts": _tree_digest(Path(local)),
        "routes": {k: store.get_bytes(k) for k in store.list_keys("routes/")},
        "features": sorted(store.list_keys("features/")),
    }


def _check_everything_back(cfg: Settings, store: ObjectStore, champion: dict[str, Any], before: dict[str, Any],
                           started: float, story: str, tmp: Path) -> None:
    from modelops.serving.api import served_versions

    model = champion["model"]

    def serves_champion() -> bool:
        response = requests.post(f"{cfg.gateway_url}/v1/models/{model}/predict", json=_body(1), timeout=10)
        return response.status_code == 200 and response.headers["X-Model-Version"] == champion["label"]

    wait_for(serves_champion, RESTART_BOUND_S, f"{story}: the champion answers through the gateway")
    serving_s = time.monotonic() - started
    assert served_versions(model) == [champion["triton_version"]]
    after = _snapshot(cfg, store, champion, tmp)
    assert after == before, f"{story}: registry, artifacts, routes or feature tables changed"
    tokens = set(champion["tokens"])
    wait_for(lambda: logged_values(store, "feedback", "feedback_token", tokens) == tokens, 60,
             f"{story}: every acknowledged feedback record in the store")
    print(f"{story}: champion served through the gateway {serving_s:.1f} s after the restart began")


def test_stack_down_and_up_keeps_everything(stack_settings: Settings, object_store: ObjectStore,
                                            champion: dict[str, Any], tmp_path: Path) -> None:
    before = _snapshot(stack_settings, object_store, champion, tmp_path)
    started = time.monotonic()
    launcher.down(stack_settings, progress=lambda line: None)
    down_s = time.monotonic() - started
    launcher.up(stack_settings, progress=lambda line: None)
    up_s = time.monotonic() - started - down_s
    print(f"stack down {down_s:.1f} s, stack up {up_s:.1f} s")
    _check_everything_back(stack_settings, object_store, champion, before, started, "down/up", tmp_path)


def test_kill_9_of_every_process_keeps_everything(stack_settings: Settings, object_store: ObjectStore,
                                                   champion: dict[str, Any], tmp_path: Path) -> None:
    before = _snapshot(stack_settings, object_store, champion, tmp_path)
    started = time.monotonic()
    killed = kill_everything(stack_settings)
    assert {"objectstore", "mlflow", "triton", "gateway", "airflow-scheduler"} <= set(killed)
    launcher.up(stack_settings, progress=lambda line: None)
    print(f"kill -9 of {len(killed)} services, stack up after {time.monotonic() - started:.1f} s")
    _check_everything_back(stack_settings, object_store, champion, before, started, "kill -9", tmp_path)


def test_a_new_release_after_the_restarts_promotes_a_new_champion(
        stack_settings: Settings, object_store: ObjectStore, airflow: AirflowClient, mlflow_uri: str,
        champion: dict[str, Any]) -> None:
    from modelops.documents.routes import load_routes, routes_key
    from modelops.example.synthetic import WorldSpec
    from modelops.example.tracking import log_trained_model
    from modelops.example.train import TrainSpec, train
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.traffic.runner import BackgroundTraffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    model = champion["model"]
    trained = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500, seed=9), hidden=(16,), max_iter=25))
    trained = replace(trained, variant_json=json.dumps({"variant": "good", "nonce": uuid.uuid4().hex}).encode())
    logged = log_trained_model(trained, mlflow_uri, register_name=model, experiment="modelops-tests-restart")
    version = str(logged.registered_version)
    spec = TrafficSpec(model=model, rate=20.0, max_requests=10**6, max_seconds=400.0, n_users=80, n_items=80,
                       items_per_request=(2, 4), id_width=6, default=Behaviour(0.3, 0.4, 0.2), per_version={},
                       concurrency=4, seed=4)
    started = time.monotonic()
    with BackgroundTraffic(spec, stack_settings.gateway_url):
        run_id = airflow.trigger("model_release", {
            "model": model, "version": version, "canary_steps": "50,100", "analysis_interval_s": 5,
            "min_requests": 20, "stable_grace_s": 2}, run_id=f"test-restart-{uuid.uuid4().hex[:8]}")
        state = airflow.wait("model_release", run_id, timeout_s=420)
    assert state == "success", {t["task_id"]: t["state"] for t in airflow.task_instances("model_release", run_id)}
    routes = load_routes(object_store.get_bytes(routes_key(model)))
    assert routes.stable.version != champion["triton_version"] and routes.canary is None
    record = MlflowRegistry.from_settings().get(model, version)
    assert record.stage == "Production" and "champion" in record.aliases
    print(f"new release after the restarts promoted in {time.monotonic() - started:.1f} s")
