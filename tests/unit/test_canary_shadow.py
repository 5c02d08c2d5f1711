"""The shadow phase: its gates and their sequential tests, and the state machine through it (pure)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from modelops.canary.actions import ApproveCommand, RequestApproval, Rollback, RollbackApplied, SetShadow, SetWeight
from modelops.canary.gates import Verdict
from modelops.canary.machine import abort, advance, start
from modelops.canary.measurement import Measurement, ShadowWindow
from modelops.canary.params import spec_from_params
from modelops.canary.sequential import ErrorEvidence
from modelops.canary.shadow import (
    ShadowEvidence,
    count_above,
    disagreement,
    disagreement_sprt,
    evaluate_shadow,
    shadow_fails_early,
)
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase
from modelops.canary.testing import DIVERGENCE_BOUNDS, histogram, shadow_window, window
from modelops.errors import ConfigError

SPEC = CanarySpec(shadow=True, interval_s=10.0, min_requests=100, steps=(0.25, 0.5, 1.0))
PERMUTED_DIFFS = [0.0, 0.05, 0.1, 0.2, 0.3] * 400  # scores swapped between items: large |Δ| for most


def _m(shadow: ShadowWindow | None, start: float = 0.0, stable_errors: float = 0.0,
       stable_requests: float = 1000.0, unreachable: tuple[str, ...] = ()) -> Measurement:
    return Measurement(start, start + 10.0, window(requests=0, errors=0), window(requests=stable_requests,
                                                                                 errors=stable_errors),
                       unreachable, shadow=shadow)


def _gate(m: Measurement, name: str, spec: CanarySpec = SPEC, **kw: object) -> tuple[Verdict, float]:
    gate = evaluate_shadow(spec, m, **kw).gate(name)  # type: ignore[arg-type]
    assert gate is not None
    return gate.verdict, gate.value


# ------------------------------------------------------------------ histogram reading
def test_count_above_is_exact_at_a_bucket_bound_and_interpolates_inside() -> None:
    buckets = histogram([0.0] * 80 + [0.07] * 15 + [0.3] * 5, DIVERGENCE_BOUNDS)
    assert count_above(buckets, 0.1) == 5 and count_above(buckets, 0.05) == 20
    assert count_above(buckets, 0.0001) == 20  # the zeros sit in the first bucket
    inside = count_above(buckets, 0.075)  # a quarter into (0.05, 0.1]: 15 values spread over the bucket
    assert inside == pytest.approx(20 - 15 * 0.5)
    assert count_above(buckets, 5.0) == 0 and count_above((), 0.1) == 0


def test_disagreement_reads_top_k_then_classes_then_a_regressors_rows() -> None:
    assert disagreement(SPEC, shadow_window(answered=200, changed=30)) == ("topk", 200, 30)
    assert disagreement(SPEC, shadow_window(answered=200, changed=7, measure="class")) == ("class", 200, 7)
    rows = shadow_window(answered=200, measure="", rel_diffs=[0.0] * 180 + [0.5] * 20)
    assert disagreement(SPEC, rows) == ("rel", 200, 20)  # relative |Δ| above the 0.1 tolerance
    assert disagreement(SPEC, ShadowWindow(answered=0, errors=0))[0] == ""


@pytest.mark.parametrize(("compared", "disagreed", "decision"), [
    (200, 0, "good"), (200, 60, "bad"), (10, 1, "pending"), (40, 4, "pending"), (60, 18, "bad")])
def test_the_disagreement_sequential_test(compared: float, disagreed: float, decision: str) -> None:
    assert disagreement_sprt(SPEC, ShadowEvidence(compared, disagreed, "topk")).decision == decision


# ------------------------------------------------------------------ the gates, candidate by candidate
def test_a_good_candidate_passes_every_shadow_gate() -> None:
    analysis = evaluate_shadow(SPEC, _m(shadow_window()))
    assert analysis.verdict is Verdict.PASSED, analysis.summary()
    assert {g.name for g in analysis.gates} == {"shadow_error_rate", "shadow_p99_ms", "divergence", "delta_median",
                                                "delta_p95"}


def test_thin_mirrored_traffic_is_inconclusive_never_passed_or_failed() -> None:
    thin = _m(shadow_window(answered=50, errors=10, changed=50, diffs=[0.5] * 250))
    analysis = evaluate_shadow(SPEC, thin)
    assert analysis.verdict is Verdict.INCONCLUSIVE
    assert all(g.verdict is Verdict.INCONCLUSIVE for g in analysis.gates)
    assert "thin traffic: 60 mirrored answers < 100" in analysis.gates[0].detail
    assert evaluate_shadow(SPEC, _m(shadow_window(), stable_requests=40)).verdict is Verdict.INCONCLUSIVE
    assert evaluate_shadow(SPEC, _m(None)).verdict is Verdict.INCONCLUSIVE
    assert evaluate_shadow(SPEC, _m(shadow_window(), unreachable=("gw",))).verdict is Verdict.INCONCLUSIVE


def test_errors_slowness_and_divergence_each_fail_their_own_gate() -> None:
    errors = evaluate_shadow(SPEC, _m(shadow_window(answered=950, errors=50)))
    assert [g.name for g in errors.gates if g.verdict is Verdict.FAILED] == ["shadow_error_rate"]
    slow = evaluate_shadow(SPEC, _m(shadow_window(latency_s=0.6, stable_latency_s=0.2)))
    assert [g.name for g in slow.gates if g.verdict is Verdict.FAILED] == ["shadow_p99_ms"]
    # Silently different: as fast, no errors, but the items' order changed on 90 % of the requests.
    permuted = evaluate_shadow(SPEC, _m(shadow_window(changed=900, diffs=PERMUTED_DIFFS)))
    failed = {g.name for g in permuted.gates if g.verdict is Verdict.FAILED}
    assert failed == {"divergence", "delta_median", "delta_p95"}, permuted.summary()
    assert permuted.gate("divergence").value == pytest.approx(0.9)  # type: ignore[union-attr]


def test_an_intended_change_within_its_declared_allowance_passes() -> None:
    better = _m(shadow_window(changed=150, diffs=[0.01, 0.02, 0.03, 0.02, 0.04] * 1000))
    assert evaluate_shadow(SPEC, better).verdict is Verdict.FAILED  # beyond the default thresholds
    allowance = dataclasses.replace(SPEC, shadow_disagreement_rate=0.3, shadow_disagreement_limit=0.6,
                                    shadow_max_delta_median=0.05, shadow_max_delta_p95=0.1)
    assert evaluate_shadow(allowance, better).verdict is Verdict.PASSED


def test_a_regressor_is_judged_on_its_relative_differences() -> None:
    flipped = _m(shadow_window(measure="", diffs=[1.0] * 1000, rel_diffs=[2.0] * 1000))  # a sign flipped
    analysis = evaluate_shadow(SPEC, flipped)
    assert analysis.gate("divergence").verdict is Verdict.FAILED  # type: ignore[union-attr]
    assert analysis.gate("delta_median").value > 1.0  # type: ignore[union-attr]
    same = _m(shadow_window(measure="", diffs=[0.0] * 1000, rel_diffs=[0.0] * 1000))
    assert evaluate_shadow(SPEC, same).verdict is Verdict.PASSED


def test_evidence_sums_over_the_shadow_phase_so_thin_steps_only_take_longer() -> None:
    little = _m(shadow_window(answered=100, changed=9))  # 9 of 100: not yet enough evidence either way
    first = evaluate_shadow(SPEC, little)
    assert first.gate("divergence").verdict is Verdict.PENDING  # type: ignore[union-attr]
    later = evaluate_shadow(SPEC, little, divergence=ShadowEvidence(300, 4, "topk"),
                            errors=ErrorEvidence(300, 0, 3000, 0))
    assert later.verdict is Verdict.PASSED


def test_looking_early_stops_only_on_a_failed_sequential_test() -> None:
    partial = _m(shadow_window(answered=120, changed=100, diffs=[0.2] * 600))
    assert shadow_fails_early(SPEC, ErrorEvidence(), ShadowEvidence(), partial)
    assert not shadow_fails_early(SPEC, ErrorEvidence(), ShadowEvidence(), _m(shadow_window(answered=120)))
    # the deltas alone are judged at the window's end only
    assert not shadow_fails_early(SPEC, ErrorEvidence(), ShadowEvidence(),
                                  _m(shadow_window(answered=120, diffs=[0.2] * 600)))
    assert not shadow_fails_early(SPEC, ErrorEvidence(), ShadowEvidence(),
                                  _m(shadow_window(answered=120, changed=100), unreachable=("gw",)))


# ------------------------------------------------------------------ the state machine through the shadow phase
def _run(spec: CanarySpec, windows: list[ShadowWindow | None]) -> tuple[list[CanaryStatus], list[object]]:
    status, actions = start(spec, "m", 1, 2, 0.0)
    statuses, done = [status], list(actions)
    for i, shadow in enumerate(windows):
        status, actions = advance(spec, status, _m(shadow, start=i * 10.0), i * 10.0 + 10.0)
        statuses.append(status)
        done += actions
        if any(isinstance(a, Rollback) for a in actions):
            status, actions = advance(spec, status, RollbackApplied(i * 10.0 + 11.0), i * 10.0 + 11.0)
            statuses.append(status)
            done += actions
    return statuses, done


def test_a_release_with_a_shadow_starts_there_with_no_user_weight() -> None:
    status, actions = start(SPEC, "m", 1, 2, 5.0)
    assert (status.phase, status.weight, status.step_index, status.users_exposed) == (Phase.SHADOW, 0.0, -1, False)
    assert SetShadow(1.0, 5) in actions and not any(isinstance(a, SetWeight) for a in actions)
    plain, _ = start(dataclasses.replace(SPEC, shadow=False), "m", 1, 2, 5.0)
    assert (plain.phase, plain.exposed_at) == (Phase.PROGRESSING, 5.0)


@pytest.mark.parametrize("bad", [
    shadow_window(answered=900, errors=100),
    shadow_window(latency_s=0.6, stable_latency_s=0.2),
    shadow_window(changed=900, diffs=PERMUTED_DIFFS),
], ids=["errors", "slow", "silently different"])
def test_a_candidate_failing_in_shadow_is_rolled_back_with_its_weight_never_above_zero(
        bad: ShadowWindow) -> None:
    statuses, actions = _run(SPEC, [bad, bad, bad])
    final = statuses[-1]
    assert final.phase is Phase.ROLLED_BACK and final.reason.startswith("failed in shadow, no user exposed")
    assert max(s.weight for s in statuses) == 0.0
    assert not any(isinstance(a, SetWeight) for a in actions)
    assert not final.users_exposed and final.detection_s is not None and final.detection_s <= 21.0
    assert [t.target for t in final.transitions] == [Phase.SHADOW, Phase.ROLLING_BACK, Phase.ROLLED_BACK]


def test_a_candidate_that_passes_the_shadow_goes_on_to_the_first_step() -> None:
    statuses, actions = _run(SPEC, [shadow_window(answered=50), shadow_window()])
    final = statuses[-1]
    assert statuses[1].phase is Phase.SHADOW and statuses[1].inconclusive_count == 1  # thin: waits
    assert (final.phase, final.weight, final.step_index, final.reason) == (Phase.PROGRESSING, 0.25, 0, "shadow passed")
    assert SetWeight(0.25) in actions and final.users_exposed and final.error_evidence == ErrorEvidence()
    # the canary steps follow as before: a good window at 25 % moves on to 50 %
    status, actions = advance(SPEC, final, Measurement(30.0, 40.0, window(), window()), 40.0)
    assert status.weight == 0.5 and SetWeight(0.5) in actions


def test_an_intended_divergence_waits_for_a_person_with_shadow_approval() -> None:
    spec = dataclasses.replace(SPEC, shadow_approval=True)
    different = shadow_window(changed=900, diffs=PERMUTED_DIFFS)
    statuses, actions = _run(spec, [different])
    waiting = statuses[-1]
    assert (waiting.phase, waiting.approval_for, waiting.weight) == (Phase.WAITING_APPROVAL, "shadow", 0.0)
    assert RequestApproval(0.0) in actions
    # no more windows count while a person decides
    assert advance(spec, waiting, _m(different, start=10.0), 20.0)[0] == waiting
    approved, actions = advance(spec, waiting, ApproveCommand("alice"), 30.0)
    assert (approved.phase, approved.weight, approved.approved) == (Phase.PROGRESSING, 0.25, False)
    assert SetWeight(0.25) in actions and approved.reason == "shadow divergence approved by alice"
    rejected, actions = abort(spec, waiting, 30.0, by="bob", reason="rejected at approval")
    assert rejected.phase is Phase.ROLLING_BACK and rejected.weight == 0.0 and not rejected.users_exposed
    # errors are never approvable: rolled back even with shadow_approval
    failing = _run(spec, [shadow_window(answered=900, errors=100)])[0][-1]
    assert failing.phase is Phase.ROLLED_BACK


def test_status_round_trips_and_reads_statuses_written_before_the_shadow_phase() -> None:
    statuses, _ = _run(SPEC, [shadow_window(answered=100, changed=2)])
    status = statuses[-1]
    assert status.shadow_evidence == ShadowEvidence(100, 2, "topk")
    assert CanaryStatus.from_json(status.to_json()) == status
    old = {k: v for k, v in status.to_dict().items() if k not in ("shadow_evidence", "approval_for", "exposed_at")}
    old.update(phase="progressing", step_index=0)
    assert CanaryStatus.from_dict(old).exposed_at == status.started_at  # an old canary had users from its start


def test_measurement_with_shadow_round_trips() -> None:
    m = _m(shadow_window(changed=3, rel_diffs=[0.1, 0.2]))
    again = Measurement.from_dict(m.to_dict())
    assert again.shadow is not None and again.shadow.topk_changed == 3
    assert again.shadow.rel_buckets[-1][0] == math.inf and again == m
    assert "shadow" not in _m(None).to_dict()


def test_spec_rules_and_model_spec_overrides() -> None:
    with pytest.raises(ConfigError, match="shadow_share"):
        CanarySpec(shadow_share=0.05)
    with pytest.raises(ConfigError, match="shadow_disagreement_rate"):
        CanarySpec(shadow_disagreement_rate=0.3, shadow_disagreement_limit=0.2)
    model = {"shadow": True, "shadow_max_delta_p95": 0.2}
    spec = spec_from_params({"shadow": False, "canary_shadow_max_delta_p95": 0.05}, model)
    assert spec.shadow and spec.shadow_max_delta_p95 == 0.2  # params left at their defaults: the model's
    spec = spec_from_params({"canary_shadow_max_delta_p95": 0.3}, model)
    assert spec.shadow_max_delta_p95 == 0.3  # a param set to another value wins
    with pytest.raises(ConfigError, match="unknown"):
        spec_from_params({}, {"no_such_field": 1})


# ------------------------------------------------------------------ reading the gateway's shadow series
def test_the_shadow_window_from_scraped_series_and_its_promql() -> None:
    from modelops.canary.shadow_source import from_series, promql

    def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted({"model": "m", "version": "4", **labels}.items()))

    gateway_a = {key("modelops_gateway_shadow_mirrored_total"): 120.0,
                 key("modelops_gateway_shadow_dropped_total", reason="budget"): 3.0,
                 key("modelops_gateway_shadow_answers_total", outcome="ok"): 110.0,
                 key("modelops_gateway_shadow_answers_total", outcome="timeout"): 6.0,
                 key("modelops_gateway_shadow_answers_total", outcome="mismatch"): 4.0,
                 key("modelops_gateway_shadow_call_seconds_bucket", role="candidate", le="0.01"): 100.0,
                 key("modelops_gateway_shadow_call_seconds_bucket", role="candidate", le="+Inf"): 120.0,
                 key("modelops_gateway_shadow_divergence_bucket", measure="abs", le="0.1"): 500.0,
                 key("modelops_gateway_shadow_divergence_bucket", measure="abs", le="+Inf"): 550.0,
                 key("modelops_gateway_shadow_compared_total", measure="topk"): 110.0,
                 key("modelops_gateway_shadow_disagreements_total", measure="topk"): 9.0,
                 ("modelops_gateway_shadow_mirrored_total", (("model", "m"), ("version", "5"))): 99.0}
    gateway_b = {key("modelops_gateway_shadow_answers_total", outcome="ok"): 10.0}
    w = from_series([gateway_a, gateway_b], "m", 4)
    assert (w.mirrored, w.dropped, w.answered, w.errors) == (120.0, 3.0, 120.0, 10.0)
    assert w.candidate_buckets == ((0.01, 100.0), (math.inf, 120.0)) and w.stable_buckets == ()
    assert w.abs_buckets == ((0.1, 500.0), (math.inf, 550.0)) and (w.topk_compared, w.topk_changed) == (110, 9)
    queries = promql("m", 4, "5s")
    assert queries["modelops_gateway_shadow_answers_total"] == (
        'sum by (outcome) (increase(modelops_gateway_shadow_answers_total{model="m",version="4"}[5s]))')


def test_the_release_record_and_the_cockpit_show_the_shadow_phase() -> None:
    from modelops.canary.record import ReleaseRef, updated, window_of
    from modelops.cockpit.views import Links, detail, history_row

    statuses, _ = _run(SPEC, [shadow_window(changed=900, diffs=PERMUTED_DIFFS)])
    final = statuses[-1]
    m = _m(shadow_window(changed=900, diffs=PERMUTED_DIFFS, dropped=4))
    assert final.last_analysis is not None
    window = window_of(final.last_analysis, 0.0, m)
    assert window.shadow and window.mirrored == 1000 and window.dropped == 4
    ref = ReleaseRef("m", 2, "b" * 64, "2", "tests", "model_release", "run", SPEC.steps, 1, "a" * 64, "1")
    record = updated(None, ref, final, window)
    assert record.shadow and not record.users_exposed and record.detection_s == pytest.approx(10.0)
    row = history_row(record, Links())
    assert row.outcome == "rolled_back in shadow (0 users exposed, caught after 10.0 s)", row.outcome
    page = detail(record, final, Links(), {})
    assert page.shadow is not None and page.shadow.mirrored == "1000" and page.shadow.dropped == "4"
    assert "0 users exposed" in page.summary
    assert {g.name for g in page.shadow.gates} >= {"divergence", "delta_p95"}


def test_the_runner_writes_the_shadow_into_the_routes_then_the_first_step_without_it() -> None:
    from datetime import UTC, datetime

    from modelops.canary.adapters import next_routes
    from modelops.canary.runner import MemoryStatusStore, Release, Runner, ShadowRef, VersionRef

    applied: list[tuple[VersionRef | None, float, ShadowRef | None]] = []

    class Routes:
        def apply(self, model: str, stable: VersionRef, canary: VersionRef | None, weight: float, by: str,
                  *, shadow: ShadowRef | None = None) -> float:
            applied.append((canary, weight, shadow))
            return 0.0

    class Nothing:
        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: True

    stable, candidate = VersionRef(1, "a" * 64, "1"), VersionRef(2, "b" * 64, "2")
    clock = iter(float(t) for t in range(100, 200))
    runner = Runner(SPEC, Release("m", stable, candidate), Routes(), Nothing(), Nothing(), Nothing(),  # type: ignore[arg-type]
                    MemoryStatusStore(), clock=lambda: next(clock))
    assert runner.begin().phase is Phase.SHADOW
    assert applied == [(None, 0.0, ShadowRef(candidate, 1.0, 5))]
    status = runner.handle(_m(shadow_window(), start=100.0))
    assert status.phase is Phase.PROGRESSING and applied[-1] == (candidate, 0.25, None)
    routes = next_routes(None, "m", stable, None, 0.0, "tests", datetime.now(UTC), shadow=ShadowRef(candidate, 0.5, 3))
    assert routes.shadow is not None and (routes.shadow.version.version, routes.shadow.share) == (2, 0.5)
    assert routes.canary is None and routes.canary_weight == 0.0


def test_model_gates_follow_the_models_outcomes() -> None:
    from modelops.canary.params import with_model_gates

    # the recommender (click / purchase / skip, or nothing declared): every gate, CTR included
    assert "gates" not in with_model_gates({}, ("click", "purchase", "skip"))
    # a labelled model takes no actions: the operational gates alone
    labelled = with_model_gates({"shadow": True}, ())
    assert labelled == {"shadow": True, "gates": ["error_rate", "p99_ms", "score_std"]}
    # other actions: the CTR gate counts clicks, so it goes unless the spec names its own success actions
    assert with_model_gates({}, ("like", "dismiss"))["gates"] == ["error_rate", "p99_ms", "score_std"]
    own = {"ctr_success_actions": ["like"], "ctr_trial_actions": ["like", "dismiss"]}
    assert "gates" not in with_model_gates(own, ("like", "dismiss"))
    # the spec's canary.gates is the model owner's word
    assert with_model_gates({"gates": ["error_rate", "ctr"]}, ())["gates"] == ["error_rate", "ctr"]
    spec = spec_from_params({}, with_model_gates({}, ()))
    assert spec.gates == ("error_rate", "p99_ms", "score_std")
    assert spec_from_params({"canary_gates": ["error_rate"]}, with_model_gates({}, ())).gates == ("error_rate",)
