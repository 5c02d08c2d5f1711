"""The scaling decision (modelops.serving.scaling) on scripted samples."""

from __future__ import annotations

from typing import Any

import pytest

from modelops.errors import ConfigError
from modelops.serving.scaling import Decision, Load, Policy, State, decide, window_load

POLICY = Policy(min_instances=1, max_instances=3, up_queue_ms=50.0, down_queue_ms=5.0, up_pending=8, cooldown_s=10.0)
BUSY = Load(requests=40, queue_ms=120.0, pending=3)
MID = Load(requests=40, queue_ms=20.0, pending=0)
IDLE = Load(requests=0, queue_ms=0.0, pending=0)


def run(script: list[tuple[float, dict[int, Load]]], start: int = 1, policy: Policy = POLICY) -> list[Decision]:
    """Feed one window per (time, loads) and apply every decision, like the controller does."""
    count, state, out = start, State(), []
    for now, loads in script:
        decision = decide(policy, count, loads, state, now)
        out.append(decision)
        count, state = decision.target, decision.state
    return out


def test_window_load_differences_counters() -> None:
    load = window_load({"queue_us": 1_000, "requests": 10, "pending": 9},
                       {"queue_us": 401_000, "requests": 30, "pending": 2})
    assert load == Load(requests=20, queue_ms=20.0, pending=2)
    assert window_load({"queue_us": 0, "requests": 5}, {"queue_us": 0, "requests": 5, "pending": 4}) == \
        Load(0, 0.0, 4)
    # A reload or a Triton restart sets the counters back: that window is unusable.
    assert window_load({"queue_us": 9_000, "requests": 50}, {"queue_us": 100, "requests": 2}) is None


def test_up_then_cooldown_then_up_to_max() -> None:
    d = run([(0, {1: BUSY}), (3, {1: BUSY}), (10, {1: BUSY}), (21, {1: BUSY}), (40, {1: BUSY})])
    assert [x.target for x in d] == [2, 2, 3, 3, 3]
    assert "cooling down" in d[1].reason and "at max_instances" in d[3].reason
    assert "version 1: queue 120.0 ms" in d[0].reason


def test_pending_alone_scales_up_and_the_busiest_version_decides() -> None:
    d = run([(0, {1: IDLE, 2: Load(requests=2, queue_ms=1.0, pending=8)})])
    assert d[0].target == 2
    d = run([(0, {1: BUSY, 2: IDLE})])
    assert d[0].target == 2 and "version 1" in d[0].reason


def test_down_only_after_low_for_the_cooldown_and_a_middle_sample_restarts_it() -> None:
    d = run([(0, {1: IDLE}), (5, {1: IDLE}), (9, {1: MID}), (10, {1: IDLE}), (19, {1: IDLE}), (20, {1: IDLE}),
             (25, {1: IDLE}), (30, {1: IDLE}), (35, {1: IDLE})], start=3)
    assert [x.target for x in d] == [3, 3, 3, 3, 3, 2, 2, 2, 1]
    assert "between the thresholds" in d[2].reason
    assert "low for 10 s" in d[5].reason


def test_down_needs_every_version_low_and_nothing_pending() -> None:
    d = run([(0, {1: IDLE, 2: MID}), (20, {1: IDLE, 2: MID})], start=2)
    assert [x.target for x in d] == [2, 2]
    d = run([(0, {1: Load(0, 0.0, 1)}), (20, {1: Load(0, 0.0, 1)})], start=2)
    assert [x.target for x in d] == [2, 2]


def test_no_scale_down_within_the_cooldown_of_a_scale_up() -> None:
    d = run([(0, {1: BUSY}), (1, {1: IDLE}), (9, {1: IDLE}), (10.5, {1: IDLE})])
    assert [x.target for x in d] == [2, 2, 2, 2]  # cooled at t=10 but low only since t=1
    assert run([(0, {1: BUSY}), (1, {1: IDLE}), (11, {1: IDLE})])[-1].target == 1


def test_hysteresis_holds_between_the_thresholds() -> None:
    d = run([(t, {1: MID}) for t in range(0, 60, 5)], start=2)
    assert {x.target for x in d} == {2}


def test_bounds_are_enforced_at_once_and_no_samples_changes_nothing() -> None:
    assert run([(0, {1: IDLE})], start=7)[0].target == 3
    assert run([(0, {1: BUSY})], start=0)[0].target == 1
    assert run([(0, {})], start=2)[0] == Decision(2, 2, "no samples", State())
    assert run([(0, {1: IDLE}), (20, {1: IDLE})], start=1)[-1].target == 1  # at min_instances


def test_step() -> None:
    policy = Policy(min_instances=1, max_instances=5, step=2, cooldown_s=0.0)
    assert [x.target for x in run([(0, {1: BUSY}), (1, {1: BUSY}), (2, {1: BUSY})], policy=policy)] == [3, 5, 5]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"min_instances": 0}, "min_instances=0: must be >= 1"),
    ({"min_instances": 3, "max_instances": 2}, "max_instances=2: must be >= min_instances=3"),
    ({"up_queue_ms": 5.0, "down_queue_ms": 5.0}, "up_queue_ms=5.0: must be > down_queue_ms=5.0"),
    ({"up_pending": 0}, "up_pending=0: must be >= 1"),
    ({"cooldown_s": -1.0}, "cooldown_s=-1.0: must be >= 0"),
    ({"step": 0}, "step=0: must be >= 1"),
])
def test_bad_policy_names_field_rule_and_example(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError, match="example") as caught:
        Policy(**kwargs)  # type: ignore[arg-type]
    assert field in str(caught.value)


CONFIG: dict[str, Any] = {
          "name": "m", "backend": "python", "max_batch_size": 0, "version_policy": {"specific": {"versions": [1, 2]}},
          "instance_group": [{"name": "m_0", "kind": "KIND_CPU", "count": 1, "gpus": []}],
          "parameters": {"delay_s": {"string_value": "0.1"}}}


def test_with_count_changes_only_the_count_or_adds_the_marker() -> None:
    from modelops.serving.scaler import MARKER, instance_count, with_count

    updated = with_count(CONFIG, 3, "update")
    assert instance_count(updated) == 3 and instance_count(CONFIG) == 1  # the input is left alone
    assert {k: v for k, v in updated.items() if k != "instance_group"} == \
        {k: v for k, v in CONFIG.items() if k != "instance_group"}
    assert updated["instance_group"] == [{"name": "m_0", "kind": "KIND_CPU", "count": 3, "gpus": []}]
    replaced = with_count(CONFIG, 2)
    assert replaced["parameters"] == {"delay_s": {"string_value": "0.1"}, MARKER: {"string_value": "2"}}
    assert replaced["version_policy"] == CONFIG["version_policy"]


def test_models_the_controller_cannot_scale_are_refused_with_the_rule() -> None:
    from modelops.errors import ServingError
    from modelops.serving.scaler import instance_count, with_count

    with pytest.raises(ServingError, match=r"2 instance groups.*example"):
        instance_count({**CONFIG, "instance_group": CONFIG["instance_group"] * 2})
    with pytest.raises(ServingError, match="must be one of replace, update"):
        with_count(CONFIG, 2, "restart")


def test_lock_name_is_the_pipeline_of_a_step() -> None:
    from modelops.serving.scaler import lock_name

    assert [lock_name(m) for m in ("ranker_preprocess", "ranker_model", "ranker", "_model")] == \
        ["ranker", "ranker", "ranker", "_model"]


def test_the_reconciler_leaves_the_instance_count_to_the_controller() -> None:
    from modelops.serving.pbtxt import config_json, config_mismatches, pipeline_specs
    from modelops.serving.reconcile import _counts_as

    expected = config_json(pipeline_specs("ranker", backend="python")["model"].with_versions([1]))
    scaled = {**expected, "instance_group": [{"name": "g", "kind": "KIND_CPU", "count": 3}]}
    assert config_mismatches(expected, {**scaled, "instance_group": _counts_as(expected, scaled)}) == []
    other_kind = {**expected, "instance_group": [{"kind": "KIND_GPU", "count": 3}]}
    assert config_mismatches(expected, {**other_kind, "instance_group": _counts_as(expected, other_kind)})
    two_groups = {**expected, "instance_group": expected["instance_group"] * 2}
    assert config_mismatches(expected, {**two_groups, "instance_group": _counts_as(expected, two_groups)})


def test_the_status_of_several_triton_servers_is_kept_per_server(tmp_path: Any) -> None:
    import json

    from modelops.serving.scaler import Controller, Metrics, write_status
    from modelops.serving.triton import TritonClient

    shared = Metrics()
    controllers = [Controller(TritonClient(url), f"{url}/metrics", Policy(), ".*", tmp_path / "audit.jsonl",
                              metrics=shared) for url in ("http://10.0.0.1:8000", "http://10.0.0.2:8000")]
    controllers[0].last["m"] = {"to": 2}
    write_status(tmp_path / "one.json", controllers[:1])
    assert json.loads((tmp_path / "one.json").read_text())["models"] == {"m": {"to": 2}}  # one server: as before
    write_status(tmp_path / "two.json", controllers, error="http://10.0.0.2:8000: unreachable")
    status = json.loads((tmp_path / "two.json").read_text())
    assert status["models"] == {"http://10.0.0.1:8000": {"m": {"to": 2}}, "http://10.0.0.2:8000": {}}
    assert status["error"].startswith("http://10.0.0.2:8000")
