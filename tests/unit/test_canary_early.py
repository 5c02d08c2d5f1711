"""Looking inside a window (modelops.canary.early): a bad canary ends its window at once, a good one never early."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from modelops.canary.early import check_partial, fails_early, wait_window
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.sequential import ErrorEvidence
from modelops.canary.spec import CanarySpec

SPEC = CanarySpec(steps=(0.25, 0.5, 1.0), interval_s=5.0, check_s=1.0, min_requests=20)


def _window(requests: float, errors: float) -> VersionWindow:
    buckets = ((0.025, requests), (math.inf, requests))
    return VersionWindow(requests=requests, errors=errors, latency_buckets=buckets, score_std=0.1)


class Clock:
    """A fake clock that sleeping advances (no real waiting in a unit test)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedSource:
    """Traffic at fixed rates from the window's opening: canary/stable requests per second, error shares."""

    def __init__(self, canary_rps: float, canary_error: float, stable_rps: float = 30.0) -> None:
        self.canary_rps, self.canary_error, self.stable_rps = canary_rps, canary_error, stable_rps
        self.markers: list[float] = []

    def open_window(self, model: str, now: float) -> dict[str, Any]:
        self.markers.append(now)
        return {"at": now}

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                        closed: Mapping[str, Any]) -> Measurement:
        seconds = float(closed["at"]) - float(opened["at"])
        canary = self.canary_rps * seconds
        return Measurement(float(opened["at"]), float(closed["at"]),
                           _window(canary, math.floor(canary * self.canary_error)),
                           _window(self.stable_rps * seconds, 0.0))


def test_a_canary_failing_a_fifth_of_its_requests_ends_the_window_early() -> None:
    clock, source = Clock(100.0), ScriptedSource(canary_rps=10.0, canary_error=0.2)
    closed, early = wait_window(source, "m", 1, 2, {"at": 100.0}, SPEC, ErrorEvidence(), clock=clock,
                                sleep=clock.sleep)
    assert early is True
    # 20 canary requests (min_requests) arrive after 2 s with 4 errors, but the stable's shrunk rate is still
    # 2 / 64 = 3.1 % then (p0 3.1 %, p1 6.3 %); after 4 s (2 / 124 = 1.6 %) 8 errors in 40 are bad.
    assert closed == {"at": 104.0}
    assert clock.sleeps == [1.0] * 4


def test_a_good_canary_waits_for_the_window_end_and_every_look_is_on_the_clock() -> None:
    clock, source = Clock(100.0), ScriptedSource(canary_rps=10.0, canary_error=0.0)
    closed, early = wait_window(source, "m", 1, 2, {"at": 100.0}, SPEC, ErrorEvidence(), clock=clock,
                                sleep=clock.sleep)
    assert early is False and closed == {"at": 105.0}
    assert clock.sleeps == [1.0] * 5
    assert source.markers == [101.0, 102.0, 103.0, 104.0, 105.0]  # four looks inside, the closing marker


def test_check_s_zero_looks_only_at_the_end() -> None:
    spec = CanarySpec(steps=(0.25, 0.5, 1.0), interval_s=5.0, check_s=0.0, min_requests=20)
    clock, source = Clock(100.0), ScriptedSource(canary_rps=10.0, canary_error=0.5)
    closed, early = wait_window(source, "m", 1, 2, {"at": 100.0}, spec, ErrorEvidence(), clock=clock,
                                sleep=clock.sleep)
    assert (closed, early, clock.sleeps) == ({"at": 105.0}, False, [5.0])


def test_thin_partial_windows_are_never_early() -> None:
    # 1 canary request per second: below min_requests=20 for the whole window, however many fail.
    source = ScriptedSource(canary_rps=1.0, canary_error=1.0)
    assert check_partial(source, "m", 1, 2, {"at": 0.0}, SPEC, ErrorEvidence(), 4.0) is None


def test_the_steps_earlier_windows_count() -> None:
    # 3 errors in 30 requests alone is not yet enough, with the step's earlier 2 in 40 it is.
    partial = Measurement(0.0, 3.0, _window(30.0, 3.0), _window(90.0, 0.0))
    assert not fails_early(SPEC, ErrorEvidence(), partial)
    assert fails_early(SPEC, ErrorEvidence(40.0, 2.0, 120.0, 0.0), partial)


@pytest.mark.parametrize(("stable_errors", "early"), [(0.0, True), (3.0, False)])
def test_an_early_look_shrinks_the_stable_rate(stable_errors: float, early: bool) -> None:
    # 6 of 60 canary requests fail. Against an error-free stable that is bad; against a stable with 3 errors
    # in 150 (2 %, Agresti-Coull centre 3.2 %: p0 = 3.2 %, p1 = 6.5 %) an early look does not decide.
    partial = Measurement(0.0, 5.0, _window(60.0, 6.0), _window(150.0, stable_errors))
    assert fails_early(SPEC, ErrorEvidence(), partial) is early


def test_check_s_must_be_finite_and_not_negative() -> None:
    from modelops.errors import ConfigError

    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ConfigError, match="check_s"):
            CanarySpec(check_s=bad)
