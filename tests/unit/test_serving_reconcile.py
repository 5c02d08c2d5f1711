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
