"""The reconciler's plan: what one Triton must change so it serves exactly the routed versions."""

from __future__ import annotations

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

    from modelops.gateway.routes import Routes, VersionRef, routes_key, serialize_routes
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
