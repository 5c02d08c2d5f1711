"""Deciding inside the window: the sequential error test looks at the traffic every ``check_s``.

Wald's SPRT is a test for continuous monitoring: its bounds hold when the evidence is
examined after every request, so looking at a window's traffic so far, every second, and
rolling back as soon as the evidence says *bad* keeps the spec's false-rollback rate.
Without it a bad canary is only caught at the end of the window in which the evidence
crossed the bound: with 5 s windows and 10 canary requests a second, a canary failing 5 %
of its requests needs ~60 canary requests (the median), so the decision waited for the
second window's end, and the time to recover grew by up to a whole window.

A look inside a window sees the stable version's error rate over fewer requests than the
window's end does, and looking 60 times a window at a noisy ``p0 = max(stable rate,
floor)`` inflates the false rollbacks of a canary as good as a stable failing now and then
(simulated with the default spec, canary and stable both failing 1 %: 2.3 % rolled back,
above the spec's 1 %). An early look therefore also takes the stable rate as the
Agresti–Coull centre ``(errors + 2) / (requests + 4)`` and stops only when both tests say
*bad* (the same simulation: 0.3 %); an error-free stable's shrunk rate falls below the
floor after ~400 stable requests, so a bad canary is caught about a second later.

Only the *bad* direction stops a window early. Passing a step still waits for the window's
end (judging the latency, collapse and CTR gates needs the whole window; looking at a
window's p99 every second and acting on the first bad look would raise their false-failure
rate). An early window is measured and analysed like any other: the closing marker is the
moment the evidence crossed, the next window opens there (windows stay contiguous).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from modelops.canary.gates import Baseline, Verdict, evaluate
from modelops.canary.measurement import Measurement
from modelops.canary.sequential import ErrorEvidence, sprt
from modelops.canary.shadow import ShadowEvidence, shadow_fails_early
from modelops.canary.spec import CanarySpec

#: The stable rate of an early look is the Agresti–Coull centre (errors + 2) / (requests + 4).
AGRESTI_COULL_ERRORS = 2.0
AGRESTI_COULL_REQUESTS = 4.0


class WindowSource(Protocol):
    def open_window(self, model: str, now: float) -> dict[str, Any]: ...

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                        closed: Mapping[str, Any]) -> Measurement: ...


def fails_early(spec: CanarySpec, evidence: ErrorEvidence, partial: Measurement,
                baseline: Baseline | None = None) -> bool:
    """True when the step's evidence plus the window so far already says the canary is bad.

    The analysis the window's end runs (:func:`modelops.canary.gates.evaluate`) must find the
    error gate failed — a partial window below ``min_requests`` for either version, or with a
    target that could not be measured, is inconclusive, never early — and no incident (the
    stable version degrading too: that pauses the release, it is not the canary's fault);
    then the sequential test again with the stable rate shrunk to its Agresti–Coull centre.
    """
    if partial.unreachable:
        return False
    analysis = evaluate(spec, partial, baseline, evidence)
    error = analysis.gate("error_rate")
    if analysis.incident or error is None or error.verdict is not Verdict.FAILED:
        return False
    total = evidence.plus(partial)
    shrunk = dataclasses.replace(total, stable_requests=total.stable_requests + AGRESTI_COULL_REQUESTS,
                                 stable_errors=total.stable_errors + AGRESTI_COULL_ERRORS)
    return sprt(spec, shrunk).decision == "bad"


def check_partial(source: WindowSource, model: str, stable_version: int, canary_version: int,
                  opened: Mapping[str, Any], spec: CanarySpec, evidence: ErrorEvidence,
                  now: float, baseline: Baseline | None = None,
                  shadow: ShadowEvidence | None = None) -> dict[str, Any] | None:
    """The marker that closes the window now if the traffic so far already fails the error test, else None.

    ``shadow``: the release is in its shadow phase (the divergence evidence so far): the shadow's
    sequential tests look instead (:func:`modelops.canary.shadow.shadow_fails_early`).
    """
    marker = source.open_window(model, now)
    partial = source.measure_between(model, stable_version, canary_version, opened, marker)
    if shadow is not None:
        from modelops.canary.shadow_source import measure_shadow

        partial = dataclasses.replace(partial, shadow=measure_shadow(source, model, canary_version, opened, marker))
        return marker if shadow_fails_early(spec, evidence, shadow, partial) else None
    return marker if fails_early(spec, evidence, partial, baseline) else None


def wait_window(source: WindowSource, model: str, stable_version: int, canary_version: int,
                opened: Mapping[str, Any], spec: CanarySpec, evidence: ErrorEvidence, *,
                baseline: Baseline | None = None, clock: Callable[[], float] = time.time,
                sleep: Callable[[float], None] = time.sleep,
                shadow: ShadowEvidence | None = None) -> tuple[dict[str, Any], bool]:
    """Wait out the window opened by ``opened``, looking every ``spec.check_s``; return (closing marker, early).

    The synchronous form of what :class:`modelops.canary.trigger.CanaryIntervalTrigger`
    does in the triggerer (used by ``bench/canary.py`` and the tests).
    """
    due = float(opened["at"]) + spec.interval_s
    while (remaining := due - clock()) > 0:
        sleep(min(remaining, spec.check_s) if spec.check_s > 0 else remaining)
        if spec.check_s > 0 and clock() < due:
            marker = check_partial(source, model, stable_version, canary_version, opened, spec, evidence, clock(),
                                   baseline, shadow)
            if marker is not None:
                return marker, True
    return source.open_window(model, clock()), False
