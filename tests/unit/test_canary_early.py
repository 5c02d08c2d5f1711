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
    # 1 canary request per second, every one failing: after 10 s that is bad evidence by any rate, but 10
    # requests are below min_requests=20, so the look is inconclusive (after 20 s it is not).
    source = ScriptedSource(canary_rps=1.0, canary_error=1.0)
    assert check_partial(source, "m", 1, 2, {"at": 0.0}, SPEC, ErrorEvidence(), 10.0) is None
    assert check_partial(source, "m", 1, 2, {"at": 0.0}, SPEC, ErrorEvidence(), 20.0) == {"at": 20.0}


def test_a_look_with_an_unmeasured_target_or_an_incident_is_never_early() -> None:
    bad = Measurement(0.0, 3.0, _window(60.0, 12.0), _window(180.0, 0.0))
    assert fails_early(SPEC, ErrorEvidence(), bad)
    unreachable = Measurement(0.0, 3.0, bad.canary, bad.stable, unreachable=("http://gw2/metrics",))
    assert not fails_early(SPEC, ErrorEvidence(), unreachable)
    # The stable failing too, far beyond its baseline: an incident, which pauses instead of rolling back.
    from modelops.canary.gates import Baseline

    both = Measurement(0.0, 3.0, _window(60.0, 12.0), _window(180.0, 9.0))
    assert fails_early(SPEC, ErrorEvidence(), both)
    assert not fails_early(SPEC, ErrorEvidence(), both, Baseline(error_rate=0.001, p99_ms=20.0))


def test_the_steps_earlier_windows_count() -> None:
    # 3 errors in 30 requests alone is not yet enough, with the step's earlier 2 in 40 it is.
    partial = Measurement(0.0, 3.0, _window(30.0, 3.0), _window(90.0, 0.0))
    assert not fails_early(SPEC, ErrorEvidence(), partial)
    assert fails_early(SPEC, ErrorEvidence(40.0, 2.0, 120.0, 0.0), partial)


def test_an_early_look_shrinks_the_stable_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 of 20 canary requests fail, the stable's 60 none. At p0 = the 0.5 % floor that is bad at once; with the
    # stable rate shrunk to (0 + 2) / (60 + 4) = 3.1 % (p0 3.1 %, p1 6.3 %) an early look waits for more.
    import modelops.canary.early as early

    partial = Measurement(0.0, 2.0, _window(20.0, 4.0), _window(60.0, 0.0))
    assert not fails_early(SPEC, ErrorEvidence(), partial)
    monkeypatch.setattr(early, "AGRESTI_COULL_ERRORS", 0.0)
    monkeypatch.setattr(early, "AGRESTI_COULL_REQUESTS", 0.0)
    assert fails_early(SPEC, ErrorEvidence(), partial)


def test_check_s_is_0_or_at_least_half_a_second() -> None:
    from modelops.errors import ConfigError

    assert CanarySpec(check_s=0.0).check_s == 0.0 and CanarySpec(check_s=0.5).check_s == 0.5
    for bad in (-1.0, 0.001, 0.2, math.inf, math.nan):
        with pytest.raises(ConfigError, match="check_s"):
            CanarySpec(check_s=bad)
