"""A release through the real ``model_release`` DAG survives a SIGKILL of the process under it.

- The Airflow scheduler is SIGKILLed (with its LocalExecutor workers, which run the task)
  while ``publish`` runs: its integer allocated in the version index, its files uploaded,
  the model's load lock held while Triton loads the version. The stack's own ``stack up``
  starts the scheduler again; the new scheduler resets the orphaned task, the publish runs
  again (idempotent by SHA-256; it takes over the dead process's lock at once) and the
  release completes — or it fails cleanly and its re-run completes.
- Triton is SIGKILLed while the canary runs under traffic; ``stack up`` starts it again
  (what a supervisor does) and the reconciler reloads the routed stable and canary. The
  release ends promoted or rolled back by itself (or fails cleanly and its re-run ends it).

Afterwards there is never a half state: MLflow stage and aliases, the routes documents and
Triton's served versions agree, the version index holds one entry per SHA-256, and a
rolled-back version is never served again. Each case prints its recovery time and leaves
the shared stack healthy.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore
from modelops.stack import launcher
from tests.support.releases import ended, explain, task_states
from tests.support.stackops import kill_service, service_pid, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

#: From the kill to the release's end, on 2 shared cores: the dead scheduler's task is reset once its
#: heartbeat is 30 s old (checked every 15 s), then publish, verify and a first-release promotion run again.
SCHEDULER_RECOVERY_S = 300.0
#: From the Triton kill to Triton serving the routed stable + canary again (reconciler, python stubs).
TRITON_RECOVERY_S = 90.0
#: A release's tasks on a loaded machine (contract gate + publish took 2.5-4 min in the canary tests).
RELEASE_S = 420.0
CANARY = {"canary_steps": "50,100", "analysis_interval_s": 5, "min_requests": 20, "stable_grace_s": 2}


@pytest.fixture(scope="module")
def world(stack_settings: Settings, object_store: ObjectStore) -> Iterator[dict[str, Any]]:
    """A fresh model name, a small trained model and the feature tables its traffic needs."""
    from modelops.documents.routes import routes_key
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables
    from modelops.example.train import TrainSpec, train
    from modelops.serving.api import served_versions, unload_version

    model = f"rlk_{uuid.uuid4().hex[:6]}"
    trained = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500, seed=21), hidden=(16,), max_iter=25))
    users, items = generate_tables(recommender_features(), replace(WorldSpec(), seed=21, n_users=80, n_items=80))
    publish_feature_tables(object_store, f"release-kills-{uuid.uuid4().hex[:6]}", users, items)
    yield {"model": model, "trained": trained}
    object_store.delete(routes_key(model))  # do not leave this model loaded for the tests after it
    for version in served_versions(model):
        unload_version(model, version)


def _register(world: dict[str, Any], mlflow_uri: str) -> str:
    from modelops.example.tracking import log_trained_model

    variant = json.dumps({"variant": "good", "nonce": uuid.uuid4().hex}).encode()  # new bytes, new version
    trained = replace(world["trained"], variant_json=variant)
    logged = log_trained_model(trained, mlflow_uri, register_name=world["model"], experiment="modelops-tests-chaos")
    return str(logged.registered_version)


def _trigger(airflow: AirflowClient, model: str, version: str) -> str:
    return airflow.trigger("model_release", {"model": model, "version": version, **CANARY},
                           run_id=f"test-kills-{uuid.uuid4().hex[:8]}")


def _traffic(model: str, max_seconds: float, *, seed: int) -> Any:
    """Live traffic with feedback for a release of ``model`` (20 req/s, the world's 80 users and items)."""
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    return TrafficSpec(model=model, rate=20.0, max_requests=10**6, max_seconds=max_seconds, n_users=80, n_items=80,
                       items_per_request=(2, 4), id_width=6, default=Behaviour(0.3, 0.4, 0.2), per_version={},
                       concurrency=4, seed=seed)


def _wait_canary_routed(airflow: AirflowClient, store: ObjectStore, model: str, run_id: str) -> Any:
    """The canary's version reference once the routes give it traffic; fails if the run ends before that."""

    def canary_routed() -> Any:
        if airflow.run_state("model_release", run_id) not in ("queued", "running"):
            pytest.fail(f"the release ended before its canary took traffic: {task_states(airflow, run_id)}")
        routes = _routes(store, model)
        return routes.canary if routes.canary is not None and routes.canary_weight > 0 else None

    return wait_for(canary_routed, RELEASE_S, "the canary takes traffic", poll_s=0.5)


def _tasks(airflow: AirflowClient, run_id: str) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for t in airflow.task_instances("model_release", run_id)}


def _finish(airflow: AirflowClient, model: str, run_id: str) -> str:
    """How the release run ended: by itself, or failed cleanly and its re-run completed.

    The re-run is what an operator does with a failed release: clear its failed tasks (the same run,
    so the same claim on the version; the release resumes from its checkpoint).
    """
    state = ended(airflow, model, run_id, RELEASE_S)
    if state == "success":
        return "completed by itself"
    assert state == "failed", f"release run {run_id} ended {state}: {explain(airflow, model, run_id)}"
    failed = {task: s for task, s in task_states(airflow, run_id).items() if s in ("failed", "upstream_failed")}
    airflow.request("POST", "/api/v2/dags/model_release/clearTaskInstances", idempotent=True,
                    json={"dry_run": False, "dag_run_id": run_id, "only_failed": True, "reset_dag_runs": True})
    wait_for(lambda: airflow.run_state("model_release", run_id) != "failed", 60, "the cleared run runs again")
    assert ended(airflow, model, run_id, RELEASE_S) == "success", explain(airflow, model, run_id)
    return f"failed cleanly ({failed}), its re-run completed"


def _routes(store: ObjectStore, model: str) -> Any:
    from modelops.documents.routes import load_routes, routes_key

    return load_routes(store.get_bytes(routes_key(model)))


def _predicted_label(cfg: Settings, model: str) -> str | None:
    body = {"user_id": "u_000003", "item_ids": ["i_000001", "i_000002", "i_000005"], "timestamp": int(time.time())}
    response = requests.post(f"{cfg.gateway_url}/v1/models/{model}/predict", json=body, timeout=10)
    return response.headers.get("X-Model-Version") if response.status_code == 200 else None


def _check_no_half_state(cfg: Settings, store: ObjectStore, model: str, champion: str) -> Any:
    """MLflow, routes, Triton and the gateway agree that ``champion`` (MLflow version) serves alone."""
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.api import served_versions
    from modelops.serving.index_store import S3ConditionalStore, read_index
    from modelops.serving.repository import REPOSITORY_PREFIX, marker_path

    registry = MlflowRegistry.from_settings()
    record = registry.get(model, champion)
    assert record.stage == "Production" and "champion" in record.aliases, (record.stage, record.aliases)
    assert registry.stage_alias_consistent(model) == [], registry.stage_alias_consistent(model)
    routes = _routes(store, model)
    assert routes.canary is None and routes.canary_weight == 0.0, routes
    assert routes.stable.sha256 == record.tags["modelops.sha256"], "the routes name the champion's bytes"
    assert routes.stable.version == int(record.tags["modelops.triton_version"])
    # The retired stable leaves after its grace period; then Triton serves exactly the routed version.
    wait_for(lambda: served_versions(model) == [routes.stable.version], 60,
             f"Triton serves exactly the routed v{routes.stable.version}")
    wait_for(lambda: _predicted_label(cfg, model) == routes.stable.label, 30,
             f"a prediction through the gateway carries {routes.stable.label}")
    # The version index: parses, one integer per SHA-256, integers 1..n without a gap, each one complete.
    index, _ = read_index(S3ConditionalStore(store), model)
    numbers = sorted(index.versions.values())
    assert numbers == list(range(1, len(numbers) + 1)), f"index of {model}: {dict(index.versions)}"
    assert index.version_of(routes.stable.sha256) == routes.stable.version
    for number in numbers:
        assert store.exists(REPOSITORY_PREFIX + marker_path(model, number)), f"v{number} published completely"
    return routes


def _champion(airflow: AirflowClient, store: ObjectStore, world: dict[str, Any], mlflow_uri: str) -> Any:
    """The model's routed stable version; released through the DAG first when the model has none yet."""
    from modelops.documents.routes import routes_key

    if not store.exists(routes_key(world["model"])):
        _finish(airflow, world["model"], _trigger(airflow, world["model"], _register(world, mlflow_uri)))
    return _routes(store, world["model"])


def test_scheduler_sigkilled_during_publish(airflow: AirflowClient, stack_settings: Settings,
                                            object_store: ObjectStore, mlflow_uri: str,
                                            world: dict[str, Any]) -> None:
    import psutil

    from modelops.serving.holds import holds_prefix
    from modelops.serving.index_store import S3ConditionalStore, lock_key, read_index

    model = world["model"]
    version = _register(world, mlflow_uri)
    started = time.monotonic()
    run_id = _trigger(airflow, model, version)

    def publishing() -> dict[str, Any]:
        """The publish task instance once it runs."""
        ti = _tasks(airflow, run_id).get("publish", {})
        if ti.get("state") not in (None, "scheduled", "queued", "running"):
            pytest.fail(f"the publish was not caught running: {task_states(airflow, run_id)}")  # ends the wait at once
        return ti if ti.get("state") == "running" else {}

    ti = wait_for(publishing, RELEASE_S, "the publish task runs", poll_s=0.2)
    asked = [time.monotonic()]

    def loading() -> bool:
        """The publish has allocated, uploaded and holds the model's load lock while Triton loads the version."""
        if object_store.list_keys(holds_prefix(model)) and object_store.exists(lock_key(model)):
            return True
        if time.monotonic() - asked[0] > 1.0:  # still running? (an S3 poll is cheap, an Airflow one is not)
            asked[0] = time.monotonic()
            if task_states(airflow, run_id).get("publish") != "running":
                pytest.fail(f"the publish ended before it was caught loading: {task_states(airflow, run_id)}")
        return False

    wait_for(loading, 120, "the publish loads its version on Triton", poll_s=0.02)
    scheduler = service_pid(stack_settings, "airflow-scheduler")
    assert scheduler is not None
    family = {scheduler, *(p.pid for p in psutil.Process(scheduler).children(recursive=True))}
    assert ti.get("pid") is None or ti["pid"] in family, "the task runs under the scheduler (LocalExecutor)"
    killed_at = time.monotonic()
    kill_service(stack_settings, "airflow-scheduler", signal.SIGKILL)
    try:
        # SIGKILLed with the scheduler: each is gone once the kernel has torn its memory down (a process
        # forked from the preloaded scheduler maps ~1 GB; CI once saw four still exiting when the
        # scheduler's ports were free). One that was not killed would still run after this bound.
        wait_for(lambda: not [pid for pid in family if _alive(pid)], 15,
                 "the scheduler's task processes died with it", poll_s=0.05)
        index, _ = read_index(S3ConditionalStore(object_store), model)
        assert len(index.versions) == 1, f"the killed publish allocated its integer: {dict(index.versions)}"
        assert object_store.exists(lock_key(model)), \
            "killed holding the model's load lock (its successor takes it over)"
    finally:  # a failure here must not leave the stack without a scheduler for the tests after it
        killed_wall = time.time()
        launcher.up(stack_settings, progress=lambda line: None, only=["airflow-scheduler"])
    wait_for(lambda: _scheduler_heartbeat(airflow) > killed_wall, 120, "the new scheduler heartbeats")
    restarted_s = time.monotonic() - killed_at
    print(f"publish running {killed_at - started:.1f} s after the trigger (try {ti.get('try_number')}): "
          f"scheduler SIGKILLed while the publish held the load lock, a new one heartbeating {restarted_s:.1f} s later")

    how = _finish(airflow, model, run_id)
    ended_s = time.monotonic() - killed_at
    assert ended_s <= SCHEDULER_RECOVERY_S, f"released {ended_s:.0f} s after the kill (bound {SCHEDULER_RECOVERY_S})"
    routes = _check_no_half_state(stack_settings, object_store, model, version)
    published = airflow.xcom("model_release", run_id, "publish")
    assert (published["triton_version"], published["sha256"]) == (routes.stable.version, routes.stable.sha256)
    index, _ = read_index(S3ConditionalStore(object_store), model)
    assert dict(index.versions) == {routes.stable.sha256: 1}, "the killed and the repeated publish: one entry"
    tries = _tasks(airflow, run_id)["publish"].get("try_number")
    print(f"scheduler SIGKILLed during publish: release {how} (publish try {tries}); released "
          f"{ended_s:.1f} s after the kill (bound {SCHEDULER_RECOVERY_S:.0f} s), "
          f"champion v{version} served through the gateway as {routes.stable.label}")


def test_triton_sigkilled_during_the_canary(airflow: AirflowClient, stack_settings: Settings,
                                            object_store: ObjectStore, mlflow_uri: str,
                                            world: dict[str, Any]) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.api import served_versions
    from modelops.traffic.runner import BackgroundTraffic

    model = world["model"]
    stable = _champion(airflow, object_store, world, mlflow_uri).stable
    version = _register(world, mlflow_uri)
    with BackgroundTraffic(_traffic(model, RELEASE_S, seed=8), stack_settings.gateway_url):
        run_id = _trigger(airflow, model, version)
        canary = _wait_canary_routed(airflow, object_store, model, run_id)
        killed_at = time.monotonic()
        kill_service(stack_settings, "triton", signal.SIGKILL)
        launcher.up(stack_settings, progress=lambda line: None, only=["triton"])  # what a supervisor does
        restarted_s = time.monotonic() - killed_at

        def routed_served() -> bool:
            routes = _routes(object_store, model)
            routed = sorted({routes.stable.version} | ({routes.canary.version} if routes.canary else set()))
            return served_versions(model) == routed

        wait_for(routed_served, TRITON_RECOVERY_S, "Triton serves the routed versions again")
        served_s = time.monotonic() - killed_at
        how = _finish(airflow, model, run_id)
        ended_s = time.monotonic() - killed_at
    print(f"Triton SIGKILLed during the canary of v{canary.version}: restarted {restarted_s:.1f} s, routed "
          f"versions served again {served_s:.1f} s after the kill (bound {TRITON_RECOVERY_S:.0f} s); release "
          f"{how}, ended {ended_s:.1f} s after the kill")

    record = MlflowRegistry.from_settings().get(model, version)
    promoted = record.stage == "Production"
    champion = version if promoted else _mlflow_version_of(model, stable.sha256)
    routes = _check_no_half_state(stack_settings, object_store, model, champion)
    if promoted:
        assert routes.stable.version == canary.version
        print(f"outcome: v{version} promoted (Triton v{canary.version})")
    else:
        assert routes.stable == stable, "rolled back: the previous stable serves alone"
        # A rolled-back version is never served again: not by Triton, not through the gateway, over
        # several reconciler passes (interval 1 s).
        for _ in range(10):
            assert canary.version not in served_versions(model), "the rolled-back version was loaded again"
            assert _predicted_label(stack_settings, model) == stable.label
            time.sleep(0.5)
        print(f"outcome: v{version} rolled back ({record.stage}); Triton v{canary.version} not served again")
    health = requests.get(f"{stack_settings.gateway_url}/healthz", timeout=5)
    assert health.status_code == 200


def _mlflow_version_of(model: str, sha256: str) -> str:
    """The MLflow version of ``model`` published with these bytes (its ``modelops.sha256`` tag)."""
    from modelops.registry.mlflow_registry import MlflowRegistry

    for info in MlflowRegistry.from_settings().versions(model):
        if info.tags.get("modelops.sha256") == sha256:
            return str(info.version)
    raise AssertionError(f"no MLflow version of {model} has sha256 {sha256}")


def _scheduler_heartbeat(airflow: AirflowClient) -> float:
    """The latest scheduler heartbeat the API server reports (epoch seconds; 0 when none)."""
    from datetime import datetime

    health = airflow.request("GET", "/api/v2/monitor/health")["scheduler"]
    beat = health.get("latest_scheduler_heartbeat")
    return datetime.fromisoformat(beat).timestamp() if beat else 0.0


def _alive(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_a_rolled_back_release_rerun_by_an_operator_serves_stages_and_promotes_its_version(
        airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str,
        world: dict[str, Any]) -> None:
    """The other end of "fails cleanly and its re-run completes": a canary aborted (so rolled back:
    unloaded, archived) is re-run by clearing its failed tasks; the re-run loads and restages the
    version before any traffic, passes its analyses and promotes it, with no half state."""
    from modelops.canary.control import write_control
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.traffic.runner import BackgroundTraffic

    model = world["model"]
    _champion(airflow, object_store, world, mlflow_uri)
    version = _register(world, mlflow_uri)
    registry = MlflowRegistry.from_settings()
    with BackgroundTraffic(_traffic(model, 2 * RELEASE_S, seed=9), stack_settings.gateway_url):
        run_id = _trigger(airflow, model, version)
        canary = _wait_canary_routed(airflow, object_store, model, run_id)
        write_control(object_store, model, canary.version, "abort", "tests", "an operator stops it, then re-runs it")
        assert ended(airflow, model, run_id, RELEASE_S) == "failed", explain(airflow, model, run_id)
        assert registry.get(model, version).stage == "Archived", "the rollback archives the version"
        how = _finish(airflow, model, run_id)
    print(f"aborted canary v{canary.version}, re-run by an operator: {how}")
    assert how.startswith("failed cleanly"), how
    record = registry.get(model, version)
    assert record.stage == "Production" and record.tags.get("modelops.rollback_reason"), record
    routes = _check_no_half_state(stack_settings, object_store, model, version)
    assert routes.stable.version == canary.version
