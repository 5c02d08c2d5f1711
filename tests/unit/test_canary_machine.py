"""The canary state machine: every transition, table-driven over event scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest

from modelops.canary.actions import (
    AbortCommand,
    Action,
    ApproveCommand,
    Event,
    FinishRollback,
    Notify,
    Pause,
    PauseCommand,
    Promote,
    PromotionApplied,
    RequestApproval,
    ResumeCommand,
    Rollback,
    RollbackApplied,
    SetWeight,
    actions_from_list,
    actions_to_list,
)
from modelops.canary.machine import abort, advance, approve, pause, resume, start
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase
from modelops.canary.testing import window
from modelops.errors import ContractError

A = TypeVar("A")
INTERVAL = 10.0
SPEC = CanarySpec(interval_s=INTERVAL, min_requests=100, failure_limit=2, inconclusive_limit=3)
GOOD = (window(), window())
BAD = (window(errors=100), window())  # 10 % errors vs 0
WAITING = (window(requests=120, errors=1), window())  # 1 of 120: the error test needs more evidence
SLOW = (window(latency_s=2.0), window(latency_s=0.02))
COLLAPSED = (window(std=0.0), window())
THIN = (window(requests=20), window())
NAN_METRICS = (VersionWindow(), window())
INCIDENT = (window(errors=300), window(errors=200))  # both beyond the 5 % absolute limit
UNREACHABLE = "unreachable"


@dataclass
class Run:
    """The statuses and actions of a scripted release."""

    statuses: list[CanaryStatus]
    actions: list[Action]

    @property
    def final(self) -> CanaryStatus:
        return self.statuses[-1]

    def of(self, kind: type[A]) -> list[A]:
        return [a for a in self.actions if isinstance(a, kind)]

    def notified(self) -> list[str]:
        return [a.kind for a in self.actions if isinstance(a, Notify)]


def play(script: Sequence[object], spec: CanarySpec = SPEC, t0: float = 1000.0) -> Run:
    """Start at t0, then one event per interval; a pair of windows becomes a measurement."""
    status, actions = start(spec, "rec", 3, 4, t0)
    run = Run([status], list(actions))
    for i, item in enumerate(script, start=1):
        now = t0 + i * INTERVAL
        event: Event
        if item == UNREACHABLE:
            event = Measurement(now - INTERVAL, now, VersionWindow(), VersionWindow(), ("http://gw/metrics",))
        elif isinstance(item, tuple):
            event = Measurement(now - INTERVAL, now, item[0], item[1])
        else:
            assert isinstance(item, (AbortCommand, PauseCommand, ResumeCommand, ApproveCommand, RollbackApplied,
                                     PromotionApplied))
            event = item
        status, actions = advance(spec, status, event, now)
        run.statuses.append(status)
        run.actions.extend(actions)
    return run


@pytest.mark.parametrize(("name", "script", "spec", "phase", "weight", "weights", "notified"), [
    ("good version promoted", [GOOD] * 4 + [PromotionApplied(1051.0)], SPEC, Phase.PROMOTED, 1.0,
     [0.01, 0.05, 0.25, 0.5], ["started", "promoted"]),
    ("two analyses per step", [GOOD] * 7, CanarySpec(analyses_per_step=2), Phase.PROGRESSING, 0.5,
     [0.01, 0.05, 0.25, 0.5], ["started"]),
    ("custom steps", [GOOD] * 2, CanarySpec(steps=(0.1, 0.5, 1.0)), Phase.PROMOTING, 1.0, [0.1, 0.5], ["started"]),
    ("errors rolled back", [GOOD, BAD, BAD], SPEC, Phase.ROLLING_BACK, 0.0, [0.01, 0.05], ["started"]),
    ("slow rolled back", [SLOW, SLOW, RollbackApplied(1031.0)], SPEC, Phase.ROLLED_BACK, 0.0, [0.01],
     ["started", "rolled_back"]),
    ("collapse rolled back", [COLLAPSED, COLLAPSED, RollbackApplied(1031.0)], SPEC, Phase.ROLLED_BACK, 0.0, [0.01],
     ["started", "rolled_back"]),
    ("intermittent failures still roll back", [SLOW, GOOD, SLOW], SPEC, Phase.ROLLING_BACK, 0.0, [0.01, 0.05],
     ["started"]),
    ("one failure below the limit", [SLOW, GOOD], SPEC, Phase.PROGRESSING, 0.05, [0.01, 0.05], ["started"]),
    ("the error test decides at once", [BAD], SPEC, Phase.ROLLING_BACK, 0.0, [0.01], ["started"]),
    ("short of evidence the step waits, no pause", [WAITING] * 1, SPEC, Phase.PROGRESSING, 0.01, [0.01],
     ["started"]),
    ("evidence summed over windows passes the step", [WAITING] * 2, SPEC, Phase.PROGRESSING, 0.05, [0.01, 0.05],
     ["started"]),
    ("thin traffic pauses at the limit", [THIN] * 6, SPEC, Phase.PAUSED, 0.01, [0.01], ["started", "paused"]),
    ("NaN metrics pause at the limit", [NAN_METRICS] * 3, SPEC, Phase.PAUSED, 0.01, [0.01], ["started", "paused"]),
    ("unreachable target pauses as an incident", [UNREACHABLE] * 3, SPEC, Phase.PAUSED, 0.01, [0.01],
     ["started", "incident"]),
    ("an outage that ends resumes by itself", [GOOD, *[UNREACHABLE] * 4, GOOD, GOOD], SPEC, Phase.PROGRESSING,
     0.25, [0.01, 0.05, 0.25], ["started", "incident", "resumed"]),
    ("thin traffic after an outage waits for a person", [UNREACHABLE, UNREACHABLE, THIN, GOOD], SPEC,
     Phase.PAUSED, 0.01, [0.01], ["started", "paused"]),
    ("inconclusive run broken by a pass", [THIN, THIN, GOOD, THIN, THIN], SPEC, Phase.PROGRESSING, 0.05,
     [0.01, 0.05], ["started"]),
    ("incident pauses at once", [GOOD, INCIDENT], SPEC, Phase.PAUSED, 0.05, [0.01, 0.05], ["started", "incident"]),
    ("approval requested at 50%", [GOOD] * 6, CanarySpec(require_approval=True), Phase.WAITING_APPROVAL, 0.5,
     [0.01, 0.05, 0.25, 0.5], ["started", "approval_needed"]),
    ("approved", [GOOD] * 4 + [ApproveCommand("ann"), PromotionApplied(1061.0)], CanarySpec(require_approval=True),
     Phase.PROMOTED, 1.0, [0.01, 0.05, 0.25, 0.5], ["started", "approval_needed", "promoted"]),
    ("approved ahead of time", [ApproveCommand("ann")] + [GOOD] * 4, CanarySpec(require_approval=True),
     Phase.PROMOTING, 1.0, [0.01, 0.05, 0.25, 0.5], ["started"]),
    ("failure while waiting for approval", [GOOD] * 4 + [BAD, BAD], CanarySpec(require_approval=True),
     Phase.ROLLING_BACK, 0.0, [0.01, 0.05, 0.25, 0.5], ["started", "approval_needed"]),
    ("abort", [GOOD, AbortCommand("bob", "looks odd"), RollbackApplied(1025.0)], SPEC, Phase.ABORTED, 0.0,
     [0.01, 0.05], ["started", "aborted"]),
    ("abort while paused", [THIN] * 3 + [AbortCommand(), RollbackApplied(1045.0)], SPEC, Phase.ABORTED, 0.0,
     [0.01], ["started", "paused", "aborted"]),
    ("abort after promotion is ignored", [GOOD] * 4 + [PromotionApplied(1045.0), AbortCommand()], SPEC,
     Phase.PROMOTED, 1.0, [0.01, 0.05, 0.25, 0.5], ["started", "promoted"]),
    ("pause then resume", [GOOD, PauseCommand("ann"), GOOD, GOOD, ResumeCommand("ann"), GOOD], SPEC,
     Phase.PROGRESSING, 0.25, [0.01, 0.05, 0.25], ["started", "paused", "resumed"]),
    ("pause while waiting resumes into waiting", [GOOD] * 4 + [PauseCommand(), ResumeCommand()],
     CanarySpec(require_approval=True), Phase.WAITING_APPROVAL, 0.5, [0.01, 0.05, 0.25, 0.5],
     ["started", "approval_needed", "paused", "resumed"]),
    ("resume after incident", [INCIDENT, ResumeCommand(), GOOD], SPEC, Phase.PROGRESSING, 0.05, [0.01, 0.05],
     ["started", "incident", "resumed"]),
    ("an incident that clears resumes by itself", [GOOD, INCIDENT, INCIDENT, GOOD, GOOD], SPEC, Phase.PROGRESSING,
     0.25, [0.01, 0.05, 0.25], ["started", "incident", "resumed"]),
    ("paused during an incident stays paused", [INCIDENT, PauseCommand("ann"), GOOD, GOOD], SPEC, Phase.PAUSED,
     0.01, [0.01], ["started", "incident"]),
    ("a person's pause is not resumed by a good window", [PauseCommand("ann"), GOOD, GOOD], SPEC, Phase.PAUSED,
     0.01, [0.01], ["started", "paused"]),
    ("stray commands are ignored", [ResumeCommand(), RollbackApplied(1.0), PromotionApplied(1.0), GOOD], SPEC,
     Phase.PROGRESSING, 0.05, [0.01, 0.05], ["started"]),
])
def test_transitions(name: str, script: list[object], spec: CanarySpec, phase: Phase, weight: float,
                     weights: list[float], notified: list[str]) -> None:
    run = play(script, spec)
    assert run.final.phase is phase, name
    assert run.final.weight == weight
    assert [a.weight for a in run.of(SetWeight)] == weights
    assert run.notified() == notified
    if phase in {Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.ABORTED}:
        assert len(run.of(Rollback)) == 1 and not run.of(Promote)
    if phase in {Phase.PROMOTING, Phase.PROMOTED}:
        assert len(run.of(Promote)) == 1 and not run.of(Rollback)
    if phase is Phase.PAUSED:
        assert len(run.of(Pause)) == 1 and not run.of(Promote) and not run.of(Rollback)
    # each transition is recorded with its time, in order
    times = [t.at for t in run.final.transitions]
    assert times == sorted(times)
    assert run.final.transitions[-1].target is phase or phase is Phase.PROGRESSING


def test_thin_traffic_never_promotes_nor_rolls_back_however_long() -> None:
    run = play([THIN] * 50)
    assert not run.of(Promote) and not run.of(Rollback)
    assert run.notified() == ["started", "paused"]  # once per event, never once per interval
    assert run.final.inconclusive_count == 3
    assert "thin traffic" in run.final.reason


def test_notifications_once_per_event_over_a_long_approval_wait() -> None:
    run = play([GOOD] * 40, CanarySpec(require_approval=True))
    assert run.notified() == ["started", "approval_needed"]
    assert len(run.of(RequestApproval)) == 1
    keys = [a.key for a in run.actions if isinstance(a, Notify)]
    assert len(keys) == len(set(keys))


def test_mttr_from_first_failing_window_to_confirmed_rollback() -> None:
    # windows: [1000,1010) good, [1010,1020) bad: the error test decides -> rollback at 1020, applied at 1033.5
    run = play([GOOD, BAD, BAD, RollbackApplied(1033.5)])
    final = run.final
    assert final.first_failing_window_start == 1010.0
    assert final.rollback_requested_at == 1020.0
    assert final.mttr_s == pytest.approx(23.5)
    finish = run.of(FinishRollback)
    assert len(finish) == 1 and finish[0].mttr_s == pytest.approx(23.5)
    notify = next(a for a in run.actions if isinstance(a, Notify) and a.kind == "rolled_back")
    facts = notify.facts_dict()
    assert facts["mttr_s"] == "23.5"
    assert "error_rate" in facts["reason"] and facts["gate error_rate"].endswith("failed")


def test_mttr_clock_restarts_after_a_pass() -> None:
    run = play([SLOW, GOOD, GOOD, SLOW, RollbackApplied(1041.0)])
    assert run.final.first_failing_window_start == 1030.0
    assert run.final.mttr_s == pytest.approx(11.0)


def test_mttr_clock_starts_at_the_first_window_short_of_evidence() -> None:
    # [1000,1010) pending (1 error in 100), [1010,1020) 10 % errors: decided; the clock runs from 1000
    run = play([WAITING, BAD, RollbackApplied(1025.0)])
    assert run.statuses[1].inconclusive_count == 0 and run.statuses[1].last_analysis is not None
    assert run.statuses[1].last_analysis.verdict.value == "pending"
    assert run.final.first_failing_window_start == 1000.0
    assert run.final.mttr_s == pytest.approx(25.0)


def test_error_evidence_is_summed_within_a_step_and_reset_at_the_next() -> None:
    run = play([WAITING, WAITING])
    first, second = run.statuses[1], run.statuses[2]
    assert (first.error_evidence.canary_requests, first.error_evidence.canary_errors) == (120, 1)
    assert second.weight == 0.05 and second.error_evidence.canary_requests == 0  # new step, new evidence
    restored = CanaryStatus.from_json(first.to_json())
    assert restored.error_evidence == first.error_evidence


def test_mttr_of_an_abort_counts_from_the_abort() -> None:
    run = play([GOOD, AbortCommand("bob"), RollbackApplied(1022.0)])
    assert run.final.mttr_s == pytest.approx(2.0)
    assert run.final.reason == "aborted by bob"


def test_incident_does_not_count_against_the_canary() -> None:
    run = play([INCIDENT])
    assert run.final.failed_checks == 0
    assert "not the canary's fault" in run.final.reason


def test_the_window_that_clears_an_incident_is_not_counted() -> None:
    run = play([INCIDENT, INCIDENT, GOOD])
    assert run.final.phase is Phase.PROGRESSING and run.final.reason == "resumed: the incident cleared"
    assert (run.final.analyses, run.final.passed_at_step, run.final.failed_checks) == (1, 0, 0)
    assert run.final.last_window_end == 1030.0  # consumed: a replay after a restart does not resume twice
    assert play([INCIDENT, UNREACHABLE]).final.phase is Phase.PAUSED  # no evidence the incident cleared
    # A canary that keeps taking the serving layer down: two resumptions, then a person decides.
    run = play([INCIDENT, GOOD] * 4)
    assert run.notified() == ["started", "incident", "resumed", "incident", "resumed", "incident"]
    assert run.final.phase is Phase.PAUSED


def test_baseline_taken_from_the_first_healthy_stable_window() -> None:
    # stable's own error rate jumps from 0 to 4 % (below the absolute 5 % limit, far beyond noise): an incident
    degraded = (window(errors=50), window(errors=40))
    run = play([GOOD, degraded])
    # 0 errors in the stable's 1,000 requests: the Agresti-Coull centre (0 + 2) / (1000 + 4)
    assert run.final.baseline is not None and run.final.baseline.error_rate == pytest.approx(2 / 1004)
    assert run.final.phase is Phase.PAUSED and run.notified()[-1] == "incident"


def test_replayed_measurement_is_ignored() -> None:
    status, _ = start(SPEC, "rec", 3, 4, 0.0)
    m = Measurement(0.0, 10.0, *GOOD)
    once, actions = advance(SPEC, status, m, 10.0)
    twice, again = advance(SPEC, once, m, 11.0)
    assert actions == (SetWeight(0.05),) and again == ()
    assert twice == once


def test_status_json_round_trip_at_every_step() -> None:
    run = play([GOOD, THIN, BAD, INCIDENT, ResumeCommand(), BAD, RollbackApplied(1071.0)],
               CanarySpec(require_approval=True))
    for status in run.statuses:
        text = status.to_json()
        assert CanaryStatus.from_json(text).to_json() == text
    with pytest.raises(ContractError, match="schema_version"):
        CanaryStatus.from_json(run.final.to_json().replace('"schema_version": 1', '"schema_version": 7'))


@pytest.mark.parametrize("cut", range(1, 8))
def test_restart_resumes_without_repeating_or_skipping(cut: int) -> None:
    script: list[object] = [GOOD, THIN, GOOD, SLOW, GOOD, GOOD, PromotionApplied(1071.0)]
    straight = play(script)
    # replay the first `cut` events, persist, "restart", replay the last measurement again, go on
    status, actions = start(SPEC, "rec", 3, 4, 1000.0)
    all_actions = list(actions)
    events: list[tuple[float, Event]] = []
    for i, item in enumerate(script, start=1):
        now = 1000.0 + i * INTERVAL
        events.append((now, Measurement(now - INTERVAL, now, item[0], item[1]) if isinstance(item, tuple)
                       else item))  # type: ignore[arg-type]
    for now, event in events[:cut]:
        status, actions = advance(SPEC, status, event, now)
        all_actions.extend(actions)
    status = CanaryStatus.from_json(status.to_json())
    status, actions = advance(SPEC, status, events[cut - 1][1], events[cut - 1][0] + 1)  # a replay after restart
    assert actions == () or isinstance(events[cut - 1][1], PromotionApplied)
    all_actions.extend(a for a in actions if not isinstance(a, Notify))
    for now, event in events[cut:]:
        status, actions = advance(SPEC, status, event, now)
        all_actions.extend(actions)
    assert status.phase is straight.final.phase is Phase.PROMOTED
    assert [a for a in all_actions if isinstance(a, SetWeight)] == straight.of(SetWeight)
    assert status.analyses == straight.final.analyses == 6


def test_convenience_commands() -> None:
    status, _ = start(SPEC, "rec", 3, 4, 0.0)
    paused, actions = pause(SPEC, status, 1.0, "ann", "lunch")
    assert paused.phase is Phase.PAUSED and actions[0] == Pause("paused by ann: lunch")
    resumed, _ = resume(SPEC, paused, 2.0)
    assert resumed.phase is Phase.PROGRESSING and resumed.paused_from is None
    approved, actions = approve(SPEC, resumed, 3.0)
    assert approved.approved and actions == ()
    aborted, actions = abort(SPEC, approved, 4.0, "bob")
    assert aborted.phase is Phase.ROLLING_BACK and actions == (Rollback("aborted by bob"),)


def test_actions_json_round_trip() -> None:
    run = play([GOOD, BAD, BAD, RollbackApplied(1033.0)])
    listed = actions_to_list(run.actions)
    assert actions_from_list(listed) == tuple(run.actions)
    with pytest.raises(ContractError, match="unknown"):
        actions_from_list([{"type": "Explode"}])


def test_nan_never_leaks_into_json() -> None:
    run = play([NAN_METRICS])
    text = run.final.to_json()
    assert "NaN" not in text
    assert run.final.last_analysis is not None
    restored = CanaryStatus.from_json(text).last_analysis
    assert restored is not None and math.isnan(restored.gates[0].value)


def test_report_table_and_summary() -> None:
    from modelops.canary.report import analysis_table, summary

    run = play([GOOD, BAD, BAD, RollbackApplied(1033.5)])
    analysis = run.final.last_analysis
    assert analysis is not None
    text = analysis_table(analysis, 0.05)
    assert "error_rate" in text and "failed" in text and "at 5%" in text
    note = summary(run.final)
    assert note.startswith("rec v4 (stable v3): rolled_back, canary weight 0%") and "MTTR 23.5 s" in note
    assert "progressing → rolling_back" in note


def test_every_spec_field_is_documented() -> None:
    from modelops.canary.spec import describe

    docs = describe()
    assert docs["failure_limit"] == (2, "failed analyses (over the whole release) that trigger a rollback.")
    assert all(text for _, text in docs.values()), [k for k, (_, t) in docs.items() if not t]


def test_approval_given_while_paused_promotes_on_resume() -> None:
    run = play([GOOD] * 4 + [PauseCommand(), ApproveCommand("ann"), ResumeCommand()],
               CanarySpec(require_approval=True))
    assert run.final.phase is Phase.PROMOTING and len(run.of(Promote)) == 1
    assert run.notified() == ["started", "approval_needed", "paused", "resumed"]
