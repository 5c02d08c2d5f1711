"""The canary state machine: ``advance(spec, status, event, now) -> (status, actions)``.

Pure: no clock, no I/O. The runner feeds it measurements, control commands and
confirmations, persists the returned status and carries out the returned actions.

Phases::

    start ─► progressing ──pass──► next step … ──► (waiting_approval) ─► promoting ─► promoted
                 │  failed_checks == failure_limit ─► rolling_back ─► rolled_back
                 │  inconclusive × inconclusive_limit, incident, pause ─► paused ─resume─► back
                 └─ abort (from progressing, waiting_approval, paused) ─► rolling_back ─► aborted

Decisions in detail:

* The error gate is a sequential test over the windows of the current step
  (:mod:`modelops.canary.sequential`): while the evidence is short of a decision the
  analysis is *pending* and the step waits (no inconclusive count, the MTTR clock runs);
  when it decides "bad" the canary is rolled back at once.
* Any other failed analysis counts against the release (failed checks are never reset,
  so a canary that fails now and then is not promoted); the rollback comes at
  ``failure_limit``. A passed analysis ends the current run of failures (the MTTR
  clock starts again at the next failing or pending window).
* An inconclusive analysis (thin traffic, NaN, an unreachable target) neither advances
  nor fails; ``inconclusive_limit`` of them in a row pause the release and alert. When the
  last of them could not be measured at all (a gateway's or Triton's metrics unreachable:
  the serving layer is down, not the canary judged), the pause is an incident and resumes
  by itself like one; thin traffic or NaN metrics wait for a person.
* An incident (the stable version degrading too) pauses and alerts at once; nothing is
  counted against the canary. The windows are still analysed while it lasts: the first one
  without an incident (a crashed Triton is serving again) resumes the release by itself
  (notified; that window is not counted), so an outage of the serving layer neither blocks
  a release nor decides it. A pause command meanwhile keeps it paused until resumed; after
  :data:`AUTO_RESUMES` such resumptions the next incident waits for a person.
* Notifications are sent once per event (start, approval needed, pause, incident,
  resume, promotion, rollback, abort), never once per interval.
* A measurement whose window ends at or before the last one consumed is ignored, so a
  replay after a restart never counts twice.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from modelops.canary.actions import (
    AbortCommand,
    Action,
    ApproveCommand,
    Event,
    Facts,
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
    SetShadow,
    SetWeight,
)
from modelops.canary.gates import Analysis, Verdict, baseline_of, evaluate
from modelops.canary.measurement import Measurement
from modelops.canary.sequential import ErrorEvidence
from modelops.canary.shadow import approvable, decisive, evaluate_shadow, shadow_errors
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase, Transition

Outcome = tuple[CanaryStatus, tuple[Action, ...]]

ANALYSING = frozenset({Phase.SHADOW, Phase.PROGRESSING, Phase.WAITING_APPROVAL})  # phases whose windows are analysed
_INCIDENT = "incident, not the canary's fault: "
AUTO_RESUMES = 2
"""Incidents a release resumes from by itself; the next one keeps it paused for a person (a canary that
takes the serving layer down with it would otherwise pause and resume for ever)."""


def _to(status: CanaryStatus, phase: Phase, now: float, reason: str, **changes: Any) -> CanaryStatus:
    transition = Transition(now, status.phase, phase, reason)
    return dataclasses.replace(status, phase=phase, reason=reason, updated_at=now,
                               transitions=(*status.transitions, transition), **changes)


def _notify(status: CanaryStatus, kind: str, message: str, facts: Facts = ()) -> Notify:
    # The key names the transition that caused it: a replay yields the same key.
    key = f"{status.model}:{status.canary_version}:{kind}:{len(status.transitions)}"
    base: Facts = (("model", status.model), ("stable", str(status.stable_version)),
                   ("canary", str(status.canary_version)), ("weight", f"{status.weight:.0%}"))
    return Notify(kind, key, message, base + facts)


def _gate_facts(analysis: Analysis | None) -> Facts:
    if analysis is None:
        return ()
    return tuple((f"gate {g.name}", f"{_fmt(g.value)} vs {_fmt(g.threshold)}: {g.verdict.value}")
                 for g in analysis.gates)


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4g}"


def start(spec: CanarySpec, model: str, stable_version: int, canary_version: int, now: float) -> Outcome:
    """A new release: the shadow phase (``spec.shadow``) or the first step's weight, and the start notification."""
    status = CanaryStatus(model=model, stable_version=stable_version, canary_version=canary_version,
                          started_at=now, updated_at=now)
    steps: Facts = (("steps", " → ".join(f"{s:.0%}" for s in spec.steps)),)
    if spec.shadow:  # no user sees the candidate until its mirrored answers passed
        status = _to(status, Phase.SHADOW, now, f"shadow: {spec.shadow_share:.0%} of the stable's requests mirrored",
                     weight=0.0, step_index=-1)
        return status, (SetShadow(spec.shadow_share, spec.shadow_top_k),
                        _notify(status, "started", f"release of {model} v{canary_version} started in shadow "
                                f"(no user answered by it)", (("shadow", f"{spec.shadow_share:.0%}"), *steps)))
    status = _to(status, Phase.PROGRESSING, now, "started", weight=spec.steps[0], step_index=0, exposed_at=now)
    return status, (SetWeight(spec.steps[0]),
                    _notify(status, "started", f"canary release of {model} v{canary_version} started", steps))


def advance(spec: CanarySpec, status: CanaryStatus, event: Event, now: float) -> Outcome:
    """The next status and the actions to carry out, for one event at time ``now``.

    Events that do not apply to the current phase (a measurement while paused, an
    approval nobody asked for after promotion, …) leave the status unchanged and return
    no action.
    """
    if isinstance(event, Measurement):
        return _measure(spec, status, event, now)
    if isinstance(event, AbortCommand):
        return _abort(status, event, now)
    if isinstance(event, PauseCommand):
        reason = f"paused by {event.by}" + (f": {event.reason}" if event.reason else "")
        if status.phase is Phase.PAUSED and status.reason.startswith(_INCIDENT):  # hold it after the incident
            return _to(status, Phase.PAUSED, now, reason), ()
        if status.phase not in ANALYSING:
            return status, ()
        return _pause(status, now, reason, "paused")
    if isinstance(event, ResumeCommand):
        if status.phase is not Phase.PAUSED:
            return status, ()
        return _resume(spec, status, now, f"resumed by {event.by}")
    if isinstance(event, ApproveCommand):
        return _approve(spec, status, event, now)
    if isinstance(event, RollbackApplied):
        return _rolled_back(status, event, now)
    if isinstance(event, PromotionApplied):
        if status.phase is not Phase.PROMOTING:
            return status, ()
        done = _to(status, Phase.PROMOTED, now, "promoted", weight=1.0)
        return done, (_notify(done, "promoted", f"{status.model} v{status.canary_version} promoted",
                              (("analyses", str(status.analyses)), ("failed_checks", str(status.failed_checks)),
                               *_gate_facts(status.last_analysis))),)
    raise TypeError(f"advance: unknown event {event!r}")  # pragma: no cover - the union is closed


def _resume(spec: CanarySpec, status: CanaryStatus, now: float, reason: str) -> Outcome:
    target = status.paused_from or Phase.PROGRESSING
    resumed = _to(status, target, now, reason, paused_from=None, inconclusive_count=0)
    note = _notify(resumed, "resumed", f"canary release of {status.model} {reason}")
    if target is Phase.WAITING_APPROVAL and status.approved:  # approved while paused
        promoting, actions = _promote(spec, resumed, now, "approved while paused")
        return promoting, (note, *actions)
    return resumed, (note,)


def _incidents(status: CanaryStatus) -> int:
    return sum(1 for t in status.transitions if t.target is Phase.PAUSED and t.reason.startswith(_INCIDENT))


def resumes_by_itself(status: CanaryStatus | None) -> bool:
    """Paused by an incident that the release will resume from by itself once a window is clean.

    False for every other pause (thin traffic, a person's pause, an incident beyond
    :data:`AUTO_RESUMES`): those wait for a person, and callers following a release say so.
    """
    return status is not None and status.phase is Phase.PAUSED and status.reason.startswith(_INCIDENT) \
        and _incidents(status) <= AUTO_RESUMES


def waits_for_person(status: CanaryStatus | None) -> bool:
    """Paused, and only a person ends it (Resume or Abort): every pause but a self-resuming incident."""
    return status is not None and status.phase is Phase.PAUSED and not resumes_by_itself(status)


def _incident_cleared(spec: CanarySpec, status: CanaryStatus, m: Measurement, now: float) -> Outcome:
    """Paused by an incident: a window without one resumes the release (the window itself is not counted)."""
    if status.last_window_end is not None and m.window_end <= status.last_window_end:
        return status, ()
    analysis = evaluate(spec, m, status.baseline, status.error_evidence)
    status = dataclasses.replace(status, last_window_end=m.window_end, updated_at=now)
    if analysis.incident or m.unreachable or not resumes_by_itself(status):
        return status, ()
    return _resume(spec, status, now, "resumed: the incident cleared")


def _pause(status: CanaryStatus, now: float, reason: str, kind: str) -> Outcome:
    paused = _to(status, Phase.PAUSED, now, reason, paused_from=status.phase)
    return paused, (Pause(reason), _notify(paused, kind, f"canary release of {status.model} paused: {reason}",
                                           _gate_facts(status.last_analysis)))


def _measure(spec: CanarySpec, status: CanaryStatus, m: Measurement, now: float) -> Outcome:
    if status.phase is Phase.PAUSED and status.reason.startswith(_INCIDENT):
        return _incident_cleared(spec, status, m, now)
    if status.phase is Phase.SHADOW:
        return _measure_shadow(spec, status, m, now)
    if status.phase not in ANALYSING or status.approval_for == "shadow":  # a person decides on the shadow now
        return status, ()
    if status.last_window_end is not None and m.window_end <= status.last_window_end:
        return status, ()
    analysis = evaluate(spec, m, status.baseline, status.error_evidence)
    evidence = status.error_evidence if (analysis.incident or m.unreachable) else status.error_evidence.plus(m)
    status = dataclasses.replace(status, last_analysis=analysis, analyses=status.analyses + 1,
                                 last_window_end=m.window_end, updated_at=now, error_evidence=evidence,
                                 baseline=status.baseline or baseline_of(spec, m))
    if analysis.incident:
        return _pause(dataclasses.replace(status, inconclusive_count=0), now,
                      f"{_INCIDENT}{analysis.incident}", "incident")
    if analysis.verdict is Verdict.INCONCLUSIVE:
        status = dataclasses.replace(status, inconclusive_count=status.inconclusive_count + 1)
        if status.inconclusive_count >= spec.inconclusive_limit:
            details = "; ".join(sorted({g.detail for g in analysis.gates if g.verdict is Verdict.INCONCLUSIVE
                                        and g.required}))
            what = f"{status.inconclusive_count} inconclusive analyses in a row ({details})"
            if m.unreachable:  # an outage of the serving layer (or its metrics): resumes once measured again
                return _pause(status, now, f"{_INCIDENT}{what}", "incident")
            return _pause(status, now, what, "paused")
        return status, ()
    if analysis.verdict is Verdict.PENDING:  # enough traffic, not yet enough evidence: the step waits
        clock = m.window_start if status.first_failing_window_start is None else status.first_failing_window_start
        return dataclasses.replace(status, inconclusive_count=0, first_failing_window_start=clock), ()
    if analysis.verdict is Verdict.FAILED:
        status = dataclasses.replace(
            status, inconclusive_count=0, failed_checks=status.failed_checks + 1,
            first_failing_window_start=(m.window_start if status.first_failing_window_start is None
                                        else status.first_failing_window_start))
        error = analysis.gate("error_rate")
        decisive = error is not None and error.verdict is Verdict.FAILED  # the sequential test has decided
        if decisive or status.failed_checks >= spec.failure_limit:
            failed = ", ".join(f"{g.name} {_fmt(g.value)} > {_fmt(g.threshold)}" if g.name != "score_std"
                               else f"{g.name} {_fmt(g.value)} < {_fmt(g.threshold)}"
                               for g in analysis.gates if g.verdict is Verdict.FAILED)
            reason = f"failed gates: {failed} ({status.failed_checks} failed analyses)"
            rolling = _to(status, Phase.ROLLING_BACK, now, reason, weight=0.0, rollback_requested_at=now)
            return rolling, (Rollback(reason),)
        return status, ()
    status = dataclasses.replace(status, inconclusive_count=0, first_failing_window_start=None,
                                 passed_at_step=status.passed_at_step + 1)
    if status.phase is Phase.WAITING_APPROVAL or status.passed_at_step < spec.analyses_per_step:
        return status, ()
    next_index = status.step_index + 1
    if next_index < len(spec.steps) - 1:
        weight = spec.steps[next_index]
        return dataclasses.replace(status, step_index=next_index, weight=weight, passed_at_step=0,
                                   error_evidence=ErrorEvidence()), (SetWeight(weight),)
    if spec.require_approval and not status.approved:
        waiting = _to(status, Phase.WAITING_APPROVAL, now, f"waiting for approval at {status.weight:.0%}",
                      approval_for="promotion")
        return waiting, (RequestApproval(status.weight),
                         _notify(waiting, "approval_needed",
                                 f"{status.model} v{status.canary_version} passed every step: approve to promote",
                                 _gate_facts(analysis)))
    return _promote(spec, status, now, "every step passed")


def _promote(spec: CanarySpec, status: CanaryStatus, now: float, reason: str) -> Outcome:
    promoting = _to(status, Phase.PROMOTING, now, reason, step_index=len(spec.steps) - 1, weight=1.0)
    return promoting, (Promote(status.canary_version, status.stable_version),)


def _approve(spec: CanarySpec, status: CanaryStatus, event: ApproveCommand, now: float) -> Outcome:
    if status.phase is Phase.WAITING_APPROVAL and status.approval_for == "shadow":
        return _leave_shadow(spec, status, now, f"shadow divergence approved by {event.by}")
    if status.phase is Phase.SHADOW or (status.phase is Phase.PAUSED and status.paused_from is Phase.SHADOW):
        return status, ()  # an approval of the promotion is asked once users see the candidate
    if status.phase is Phase.WAITING_APPROVAL:
        return _promote(spec, dataclasses.replace(status, approved=True), now, f"approved by {event.by}")
    if status.phase in {Phase.PROGRESSING, Phase.PAUSED} and not status.approved:
        return dataclasses.replace(status, approved=True, updated_at=now), ()
    return status, ()


def _abort(status: CanaryStatus, event: AbortCommand, now: float) -> Outcome:
    if status.phase not in {Phase.SHADOW, Phase.PROGRESSING, Phase.WAITING_APPROVAL, Phase.PAUSED}:
        return status, ()
    reason = f"aborted by {event.by}" + (f": {event.reason}" if event.reason else "")
    clock = now if status.first_failing_window_start is None else status.first_failing_window_start
    rolling = _to(status, Phase.ROLLING_BACK, now, reason, weight=0.0, aborted=True, rollback_requested_at=now,
                  first_failing_window_start=clock)
    return rolling, (Rollback(reason),)


def _rolled_back(status: CanaryStatus, event: RollbackApplied, now: float) -> Outcome:
    if status.phase is not Phase.ROLLING_BACK:
        return status, ()
    clock = status.first_failing_window_start
    mttr = None if clock is None else max(0.0, event.at - clock)
    target = Phase.ABORTED if status.aborted else Phase.ROLLED_BACK
    done = _to(status, target, now, status.reason, rollback_applied_at=event.at, mttr_s=mttr)
    facts: Facts = (("reason", status.reason), ("mttr_s", "n/a" if mttr is None else f"{mttr:.1f}"),
                    *_gate_facts(status.last_analysis))
    kind = "aborted" if status.aborted else "rolled_back"
    return done, (FinishRollback(status.canary_version, status.reason, mttr, facts),
                  _notify(done, kind, f"{status.model} v{status.canary_version} rolled back: {status.reason}", facts))


# ------------------------------------------------------------------ the shadow phase
def _measure_shadow(spec: CanarySpec, status: CanaryStatus, m: Measurement, now: float) -> Outcome:
    """One window of the shadow phase: the paired gates (:mod:`modelops.canary.shadow`); the weight stays 0."""
    if status.last_window_end is not None and m.window_end <= status.last_window_end:
        return status, ()
    analysis = evaluate_shadow(spec, m, status.error_evidence, status.shadow_evidence)
    counted = not m.unreachable and m.shadow is not None and analysis.verdict is not Verdict.INCONCLUSIVE
    status = dataclasses.replace(
        status, last_analysis=analysis, analyses=status.analyses + 1, last_window_end=m.window_end, updated_at=now,
        error_evidence=status.error_evidence.plus_counts(shadow_errors(m, m.shadow)) if counted and m.shadow
        else status.error_evidence,
        shadow_evidence=status.shadow_evidence.plus(spec, m.shadow) if counted else status.shadow_evidence)
    if analysis.verdict is Verdict.INCONCLUSIVE:
        status = dataclasses.replace(status, inconclusive_count=status.inconclusive_count + 1)
        if status.inconclusive_count >= spec.inconclusive_limit:
            details = "; ".join(sorted({g.detail for g in analysis.gates if g.verdict is Verdict.INCONCLUSIVE}))
            what = f"{status.inconclusive_count} inconclusive shadow analyses in a row ({details})"
            if m.unreachable:
                return _pause(status, now, f"{_INCIDENT}{what}", "incident")
            return _pause(status, now, what, "paused")
        return status, ()
    clock = m.window_start if status.first_failing_window_start is None else status.first_failing_window_start
    if analysis.verdict is Verdict.PENDING:
        return dataclasses.replace(status, inconclusive_count=0, first_failing_window_start=clock), ()
    if analysis.verdict is Verdict.FAILED:
        status = dataclasses.replace(status, inconclusive_count=0, failed_checks=status.failed_checks + 1,
                                     first_failing_window_start=clock)
        if not decisive(analysis) and status.failed_checks < spec.failure_limit:
            return status, ()
        failed = ", ".join(f"{g.name} {_fmt(g.value)} > {_fmt(g.threshold)}" for g in analysis.gates
                           if g.verdict is Verdict.FAILED)
        if spec.shadow_approval and approvable(analysis):  # an intended change? a person decides
            waiting = _to(status, Phase.WAITING_APPROVAL, now, f"shadow: the candidate's answers differ ({failed}): "
                          "waiting for approval", approval_for="shadow")
            return waiting, (RequestApproval(0.0), _notify(
                waiting, "approval_needed", f"{status.model} v{status.canary_version} answers differently from "
                "the stable version in shadow: approve to go on to the canary steps, reject to roll back",
                _gate_facts(analysis)))
        reason = f"failed in shadow, no user exposed: {failed} ({status.failed_checks} failed analyses)"
        rolling = _to(status, Phase.ROLLING_BACK, now, reason, weight=0.0, rollback_requested_at=now)
        return rolling, (Rollback(reason),)
    status = dataclasses.replace(status, inconclusive_count=0, first_failing_window_start=None,
                                 passed_at_step=status.passed_at_step + 1)
    if status.passed_at_step < spec.analyses_per_step:
        return status, ()
    return _leave_shadow(spec, status, now, "shadow passed")


def _leave_shadow(spec: CanarySpec, status: CanaryStatus, now: float, reason: str) -> Outcome:
    """On to the first canary step: users see the candidate from now on."""
    weight = spec.steps[0]
    moved = _to(status, Phase.PROGRESSING, now, reason, weight=weight, step_index=0, passed_at_step=0,
                error_evidence=ErrorEvidence(), first_failing_window_start=None, failed_checks=0,
                approval_for="", exposed_at=now)
    return moved, (SetWeight(weight), _notify(moved, "shadow_passed", f"{status.model} v{status.canary_version} "
                                              f"{reason}: on to {weight:.0%}", _gate_facts(status.last_analysis)))


def abort(spec: CanarySpec, status: CanaryStatus, now: float, by: str = "operator", reason: str = "") -> Outcome:
    """Roll back now (a person's decision)."""
    return advance(spec, status, AbortCommand(by, reason), now)


def pause(spec: CanarySpec, status: CanaryStatus, now: float, by: str = "operator", reason: str = "") -> Outcome:
    return advance(spec, status, PauseCommand(by, reason), now)


def resume(spec: CanarySpec, status: CanaryStatus, now: float, by: str = "operator") -> Outcome:
    return advance(spec, status, ResumeCommand(by), now)


def approve(spec: CanarySpec, status: CanaryStatus, now: float, by: str = "operator") -> Outcome:
    return advance(spec, status, ApproveCommand(by), now)
