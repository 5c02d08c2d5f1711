"""The reconciler's plan: what one Triton must change so it serves exactly the routed versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelops.serving.reconcile import plan


def served(*versions: int) -> dict[str, list[int]]:
    return {"preprocess": list(versions), "model": list(versions), "ensemble": list(versions)}


def test_in_sync_when_exactly_the_routed_versions_serve_with_the_rendered_config() -> None:
    todo = plan("m", frozenset({3, 4}), frozenset(), served(3, 4), config_ok=True)
    assert todo.in_sync and todo.target == (3, 4)


def test_after_a_triton_restart_every_routed_version_is_loaded() -> None:
    todo = plan("m", frozenset({3, 4}), frozenset(), served(), config_ok=True)
    assert todo.load == {3, 4} and todo.unload == set() and todo.target == (3, 4)


def test_unknown_versions_are_unloaded_and_an_unrouted_one_is_never_loaded() -> None:
    todo = plan("m", frozenset({3}), frozenset({5}), served(3, 4), config_ok=True)
    assert todo.unload == {4}
    assert todo.load == set()
    assert 5 not in todo.target  # held but not served: a hold never loads


def test_held_or_recently_routed_versions_stay_loaded() -> None:
    todo = plan("m", frozenset({4}), frozenset({3}), served(3, 4), config_ok=True)
    assert todo.in_sync and todo.target == (3, 4)


def test_a_plain_load_serving_the_newest_version_is_corrected() -> None:
    # A plain load serves the newest integer version: the rolled-back canary 5, not stable 4.
    todo = plan("m", frozenset({4}), frozenset(), served(5), config_ok=True)
    assert todo.load == {4} and todo.unload == {5} and todo.target == (4,)


def test_a_wrong_config_with_the_right_versions_is_reloaded() -> None:
    todo = plan("m", frozenset({4}), frozenset(), served(4), config_ok=False)
    assert todo.reload and not todo.load and not todo.unload


def test_a_half_loaded_pipeline_is_completed() -> None:
    state = {"preprocess": [4], "model": [], "ensemble": [4]}
    todo = plan("m", frozenset({4}), frozenset(), state, config_ok=True)
    assert todo.load == {4} and not todo.in_sync


class _Bucket:
    """An in-memory bucket with the four calls the reconciler and the holds use."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "") -> str:
        self.objects[key] = data
        return ""

    def get_bytes(self, key: str) -> bytes:
        return self.objects[key]

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def test_the_grace_of_a_replaced_stable_survives_a_restart_of_the_reconciler() -> None:
    import time
    from datetime import UTC, datetime

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.serving.holds import active_holds
    from modelops.serving.reconcile import Reconciler

    bucket = _Bucket()

    def route(stable: int, revision: int) -> None:
        routes = Routes("m", revision, VersionRef(stable, f"{stable:064x}"), None, 0.0, datetime.now(UTC).isoformat(),
                        "tests")
        bucket.put_bytes(routes_key("m"), serialize_routes(routes))

    first = Reconciler(bucket, tritons=[], specs_of=None, grace_s=600.0)  # type: ignore[arg-type]
    route(3, 1)
    first.tick()
    assert active_holds(bucket, "m") == set()  # a routed version needs no hold
    route(4, 2)  # v4 promoted over v3
    first.tick()
    assert first._kept("m", time.monotonic()) == {3, 4}
    # A restarted reconciler has no memory of v3, but the hold written when the routes dropped it keeps it.
    second = Reconciler(bucket, tritons=[], specs_of=None, grace_s=600.0)  # type: ignore[arg-type]
    second.tick()
    assert active_holds(bucket, "m") == {3}


def test_every_server_behind_a_discovered_name_is_a_target() -> None:
    from pathlib import Path

    from modelops.serving.reconcile import TritonTarget, targets_of

    addresses = {"triton": ["172.18.0.9", "172.18.0.4", "172.18.0.4"]}
    found = targets_of(["dns+http://triton:8000"], Path("/repo"), resolve=lambda host, port: addresses[host])
    assert found == [TritonTarget("http://172.18.0.4:8000", Path("/repo")),
                     TritonTarget("http://172.18.0.9:8000", Path("/repo"))]
    assert targets_of(["http://127.0.0.1:8300"]) == [TritonTarget("http://127.0.0.1:8300")]


def test_each_server_gets_its_own_plan() -> None:
    """Three servers after a rollback of v5 to stable v4: one in sync, one restarted (empty), one that a
    plain load left serving the newest integer version (the rolled-back v5)."""
    routed = frozenset({4})
    plans = {name: plan("m", routed, frozenset(), state, config_ok=True)
             for name, state in {"a": served(4), "b": served(), "c": served(5)}.items()}
    assert plans["a"].in_sync
    assert (plans["b"].load, plans["b"].unload) == ({4}, set())  # the restarted one gets its versions back
    assert (plans["c"].load, plans["c"].unload) == ({4}, {5})
    assert all(5 not in p.target and 5 not in p.load for p in plans.values())  # never loaded again


def test_a_tick_covers_every_server_discovered_at_that_tick() -> None:
    from datetime import UTC, datetime

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.serving.reconcile import Outcome, Reconciler, TritonTarget

    bucket = _Bucket()
    for model in ("m", "n"):
        routes = Routes(model, 1, VersionRef(3, f"{3:064x}"), None, 0.0, datetime.now(UTC).isoformat(), "tests")
        bucket.put_bytes(routes_key(model), serialize_routes(routes))
    servers = ["http://a:8000", "http://b:8000"]
    visited: list[tuple[str, str]] = []

    class Recording(Reconciler):
        def _one(self, triton: TritonTarget, model: str, routed: frozenset[int], kept: frozenset[int]) -> Outcome:
            visited.append((triton.url, model))
            return Outcome(triton.url, model, "in_sync", tuple(routed))

    reconciler = Recording(bucket, tritons=[], specs_of=None,  # type: ignore[arg-type]
                           discover=lambda: [TritonTarget(url) for url in servers])
    reconciler.tick()
    assert sorted(visited) == [("http://a:8000", "m"), ("http://a:8000", "n"), ("http://b:8000", "m"),
                               ("http://b:8000", "n")]
    visited.clear()
    servers[:] = ["http://a:8000", "http://c:8000"]  # b restarted at a new address
    outcomes = reconciler.tick()
    assert {url for url, _ in visited} == {"http://a:8000", "http://c:8000"}
    assert {o.triton for o in outcomes} == {"http://a:8000", "http://c:8000"}


def test_models_in_a_release_are_reconciled_first() -> None:
    from datetime import UTC, datetime

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.serving.reconcile import Outcome, Reconciler, TritonTarget

    bucket = _Bucket()
    now = datetime.now(UTC).isoformat()
    for model in ("a", "b", "y"):  # stable only
        routes = Routes(model, 1, VersionRef(3, f"{3:064x}"), None, 0.0, now, "tests")
        bucket.put_bytes(routes_key(model), serialize_routes(routes))
    in_release = Routes("z", 2, VersionRef(3, f"{3:064x}"), VersionRef(4, f"{4:064x}"), 0.25, now, "tests")
    bucket.put_bytes(routes_key("z"), serialize_routes(in_release))
    visited: list[str] = []

    class Recording(Reconciler):
        def _one(self, triton: TritonTarget, model: str, routed: frozenset[int], kept: frozenset[int]) -> Outcome:
            visited.append(model)
            return Outcome(triton.url, model, "in_sync", tuple(routed))

    reconciler = Recording(bucket, tritons=[TritonTarget("http://a:8000")], specs_of=None,  # type: ignore[arg-type]
                           parallel=1)
    reconciler.tick()
    assert visited == ["z", "a", "b", "y"]


def test_an_unexpected_error_of_one_model_is_an_error_outcome_and_the_tick_goes_on() -> None:
    """A bug in one model's reconciliation (an exception no adapter translated) does not end the daemon's tick."""
    from datetime import UTC, datetime

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.serving.reconcile import Reconciler, TritonTarget

    bucket = _Bucket()
    for model in ("broken", "fine"):
        routes = Routes(model, 1, VersionRef(3, f"{3:064x}"), None, 0.0, datetime.now(UTC).isoformat(), "tests")
        bucket.put_bytes(routes_key(model), serialize_routes(routes))
    reached: list[str] = []

    class OneBroken(Reconciler):
        def _spec(self, model: str, version: int) -> None:
            reached.append(model)
            if model == "broken":
                raise KeyError("a field the code did not expect")
            return None

    reconciler = OneBroken(bucket, tritons=[TritonTarget("http://127.0.0.1:9")],
                           specs_of=lambda model: {})  # type: ignore[arg-type]
    outcomes = {o.model: o for o in reconciler.tick()}
    assert sorted(reached) == ["broken", "fine"]
    assert outcomes["broken"].action == "error"
    assert outcomes["broken"].detail.startswith("unexpected KeyError: ")
    assert "a field the code did not expect" in outcomes["broken"].detail
    # The other model was reconciled as usual: nothing serves on port 9, a translated (ServingError) error.
    assert outcomes["fine"].action == "error" and not outcomes["fine"].detail.startswith("unexpected")


def test_a_tick_that_fails_outside_the_models_is_recorded_and_the_daemon_goes_on(tmp_path: Path) -> None:
    """The daemon's tick: a translated error skips it, an unexpected one is recorded (raised with --once)."""
    import pytest

    from modelops.errors import ObjectStoreError
    from modelops.serving.reconcile import Reconciler, read_status, tick_and_record

    class Failing(Reconciler):
        def __init__(self, error: Exception) -> None:
            self.error = error

        def tick(self) -> list[Any]:
            raise self.error

    status = tmp_path / "reconciler.status.json"
    assert tick_and_record(Failing(ObjectStoreError("store unreachable")), status) == []
    assert (read_status(status) or {})["error"] == "store unreachable"
    assert tick_and_record(Failing(AttributeError("'NoneType' has no attribute 'url'")), status) == []
    doc = read_status(status) or {}
    assert doc["error"] == "unexpected AttributeError: 'NoneType' has no attribute 'url'" and doc["outcomes"] == []
    with pytest.raises(AttributeError):
        tick_and_record(Failing(AttributeError("bug")), status, strict=True)
