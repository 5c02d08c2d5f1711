"""Chaos on the shared test stack: a server dies in the middle of a platform operation.

Each case kills a real server (SIGKILL of its process group) at a chosen point of a real
operation — the kill is fired from a hook on the operation's own client, so "during" is
exact and not a race with a timer — then restarts it as a supervisor would (``stack up``),
checks the invariants, and prints the recovery time:

- the object store dies during a publish: the publish fails (nothing half-published is
  loadable), and the retried publish gives the same single integer version, served;
- the object store dies during a routes write: the write fails, the gateway keeps serving
  the last routes, and the retried write is applied by the gateway and the reconciler;
- MLflow dies during a promotion (stage set, alias not yet): the promotion fails, and the
  retried one leaves stage and aliases in step with the routes.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from modelops.config import Settings
from modelops.errors import ModelopsError
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore
from modelops.serving.pbtxt import ROLES
from modelops.serving.publisher import Provenance, publish_artifacts, specs_for
from modelops.serving.testing import fixture_artifacts
from modelops.serving.triton import TritonClient
from modelops.stack import launcher
from tests.support.stackops import kill_service, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECOVERY_BOUND_S = 90.0


def _fresh_store(cfg: Settings) -> ObjectStore:
    """A store whose client is not shared with other tests (the hooks below are registered on it)."""
    return ObjectStore.from_settings(cfg)


def _kill_on(store: ObjectStore, operation: str, when: Callable[[dict[str, Any]], bool],
             kill: Callable[[], object]) -> list[float]:
    """Kill a server right before the first ``operation`` request whose params satisfy ``when``."""
    fired: list[float] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        if not fired and when(params):
            fired.append(time.monotonic())
            kill()

    store.client.meta.events.register(f"before-parameter-build.s3.{operation}", hook)
    return fired


def _restart(cfg: Settings, name: str) -> float:
    started = time.monotonic()
    launcher.up(cfg, progress=lambda line: None, only=[name])
    return time.monotonic() - started


def _routes(model: str, revision: int, stable: Any, canary: Any = None, weight: float = 0.0) -> bytes:
    from modelops.documents.routes import Routes, VersionRef, serialize_routes

    canary_ref = None if canary is None else VersionRef(canary.triton_version, canary.sha256)
    return serialize_routes(Routes(model, revision, VersionRef(stable.triton_version, stable.sha256), canary_ref,
                                   weight, datetime.now(UTC).isoformat(), "chaos-tests"))


def _served(client: TritonClient, cfg: Settings, model: str) -> list[int] | None:
    """The versions all three pipeline models serve (None when they disagree)."""
    specs = specs_for(model, cfg)
    sets = {tuple(client.ready_versions(specs[role].name)) for role in ROLES}
    return list(sets.pop()) if len(sets) == 1 else None


@pytest.fixture(scope="module")
def routed_model(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> Iterator[dict[str, Any]]:
    """A model with two published versions, v1 routed and served through the gateway."""
    from modelops.documents.routes import routes_key
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables

    model = f"chs_{uuid.uuid4().hex[:6]}"
    client = TritonClient(triton_url)
    versions = [publish_artifacts(model, fixture_artifacts(800 + k), Provenance(owner="tests"), cfg=stack_settings,
                                  store=object_store, client=client, load=False) for k in range(2)]
    users, items = generate_tables(recommender_features(), replace(WorldSpec(), seed=13, n_users=40, n_items=40))
    publish_feature_tables(object_store, f"chaos-{uuid.uuid4().hex[:6]}", users, items)
    object_store.put_bytes(routes_key(model), _routes(model, 1, versions[0]))
    def predict() -> requests.Response:
        body = {"user_id": "u_000001", "item_ids": ["i_000001", "i_000002"], "timestamp": int(time.time())}
        return requests.post(f"{stack_settings.gateway_url}/v1/models/{model}/predict", json=body, timeout=10)

    wait_for(lambda: predict().status_code == 200, 60, "the gateway serves v1")
    yield {"model": model, "versions": versions, "client": client, "predict": predict}
    object_store.delete(routes_key(model))
    for role in ROLES:
        name = specs_for(model, stack_settings)[role].name
        if client.ready_versions(name):
            client.unload(name)


def test_object_store_killed_during_a_publish(stack_settings: Settings, triton_url: str) -> None:
    from modelops.serving.index_store import S3ConditionalStore, read_index
    from modelops.serving.repository import REPOSITORY_PREFIX, marker_path

    model = f"chp_{uuid.uuid4().hex[:6]}"
    store = _fresh_store(stack_settings)
    client = TritonClient(triton_url)
    artifacts = fixture_artifacts(900)
    # Dies at the second object the publish uploads: the version's files are half in the store.
    uploads: list[str] = []

    def second_upload(params: dict[str, Any]) -> bool:
        if str(params.get("Key", "")).startswith("triton/staging/"):
            uploads.append(params["Key"])
        return len(uploads) >= 2

    fired = _kill_on(store, "PutObject", second_upload, lambda: kill_service(stack_settings, "objectstore"))
    with pytest.raises(ModelopsError):
        publish_artifacts(model, artifacts, Provenance(owner="tests"), cfg=stack_settings, store=store, client=client)
    assert fired, "the object store was killed during the publish"
    restart_s = _restart(stack_settings, "objectstore")
    recovered = ObjectStore.from_settings(stack_settings)
    assert not recovered.exists(REPOSITORY_PREFIX + marker_path(model, 1)), "a half version is never complete"
    assert client.ready_versions(model) == [], "nothing half-published was loaded"
    started = time.monotonic()
    result = publish_artifacts(model, artifacts, Provenance(owner="tests"), cfg=stack_settings, store=recovered,
                               client=client)
    print(f"object store killed mid-publish: back in {restart_s:.1f} s, publish retried in "
          f"{time.monotonic() - started:.1f} s")
    assert (result.triton_version, result.loaded) == (1, True)
    index, _ = read_index(S3ConditionalStore(recovered), model)
    assert dict(index.versions) == {result.sha256: 1}, "one sha256, one integer"
    assert recovered.exists(REPOSITORY_PREFIX + marker_path(model, 1))
    assert client.ready_versions(model) == [1]
    for role in reversed(ROLES):
        client.unload(specs_for(model, stack_settings)[role].name)


def test_object_store_killed_during_a_routes_write(stack_settings: Settings, routed_model: dict[str, Any]) -> None:
    from modelops.documents.routes import load_routes, routes_key

    model, (v1, v2), client = routed_model["model"], routed_model["versions"], routed_model["client"]
    store = _fresh_store(stack_settings)
    before = store.get_bytes(routes_key(model))
    fired = _kill_on(store, "PutObject", lambda p: p.get("Key") == routes_key(model),
                     lambda: kill_service(stack_settings, "objectstore"))
    with pytest.raises(ModelopsError):
        store.put_bytes(routes_key(model), _routes(model, 2, v1, v2, 0.5))
    killed_at = fired[0]
    # The gateway keeps serving the last routes it applied while the store is down.
    outage = [routed_model["predict"]().status_code for _ in range(5)]
    assert outage == [200] * 5, outage
    restart_s = _restart(stack_settings, "objectstore")
    recovered = ObjectStore.from_settings(stack_settings)
    assert recovered.get_bytes(routes_key(model)) == before, "the failed write left the old document"
    recovered.put_bytes(routes_key(model), _routes(model, 2, v1, v2, 0.5))

    def applied() -> bool:
        view = requests.get(f"{stack_settings.gateway_url}/v1/routes", timeout=5).json()
        return bool(view["models"][model]["revision"] == 2 and _served(client, stack_settings, model) == [1, 2])

    wait_for(applied, RECOVERY_BOUND_S, "the gateway applies revision 2 and Triton serves v1 and v2")
    print(f"object store killed mid routes write: store back in {restart_s:.1f} s, new routes applied and "
          f"served {time.monotonic() - killed_at:.1f} s after the kill")
    assert load_routes(recovered.get_bytes(routes_key(model))).canary is not None


def test_mlflow_killed_during_a_promotion(stack_settings: Settings, mlflow_uri: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile
    from pathlib import Path

    import mlflow

    from modelops.registry.mlflow_registry import MlflowRegistry

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the task fails at once; its retry recovers
    name = f"chm_{uuid.uuid4().hex[:6]}"
    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("modelops-tests-chaos")
    versions = []
    for k in range(2):
        with mlflow.start_run() as run, tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "model.txt").write_text(f"model {k}")
            mlflow.log_artifacts(tmp, artifact_path="model")
        versions.append(MlflowRegistry(mlflow_uri).register(f"runs:/{run.info.run_id}/model", name).version)
    registry = MlflowRegistry(mlflow_uri)
    for version in versions:
        registry.to_staging(name, version, contract_passed=True, contract_result="passed")
    registry.promote(name, versions[0])
    # v2's promotion: the stage is set, then MLflow dies before the champion alias moves.
    real_alias = registry.client.set_registered_model_alias
    killed: list[float] = []

    def dying_alias(*args: Any, **kwargs: Any) -> Any:
        if not killed:
            killed.append(time.monotonic())
            kill_service(stack_settings, "mlflow", signal.SIGKILL)
        return real_alias(*args, **kwargs)

    monkeypatch.setattr(registry.client, "set_registered_model_alias", dying_alias)
    with pytest.raises(ModelopsError):
        registry.promote(name, versions[1])
    assert killed
    restart_s = _restart(stack_settings, "mlflow")
    monkeypatch.undo()
    after = MlflowRegistry(mlflow_uri)
    assert after.get(name, versions[1]).stage == "Production"  # the half-done promotion is visible ...
    info = after.promote(name, versions[1])  # ... and the retried promotion completes it
    print(f"MLflow killed mid-promotion: back in {restart_s:.1f} s, promotion retried "
          f"{time.monotonic() - killed[0]:.1f} s after the kill")
    assert info.stage == "Production" and "champion" in info.aliases
    assert after.get(name, versions[0]).stage == "Archived"
    assert after.stage_alias_consistent(name) == []
