"""Where a prediction's time went: the gateway, the feature lookup, Triton's queue or Triton's compute.

Triton (2.51) returns no per-request timing with an answer (tracing writes to files or
OpenTelemetry), so the gateway reads Triton's statistics extension
(``GET /v2/models/{m}/versions/{v}/stats``: cumulative queue and compute nanoseconds and
their request counts) for each version it calls, differences two readings and keeps the
per-request means of the newest interval that had requests (:class:`TritonDelays`).

A request's Triton call, as the gateway times it (``triton_wall_s``), is then split
(:func:`split`): Triton's queue mean and compute mean, each capped by what is left of the
wall time. What the means leave unexplained is shared between the gateway and Triton's
queue in proportion to the gateway's event loop lag (:class:`LoopLag`: an overloaded
gateway picks Triton's answer up late, and is not blamed on Triton) and the evidence of a
queue at Triton: its queue mean, or the calls to the same version this gateway had in
flight ahead of this one times the compute mean, whichever is larger (the means are those
of an earlier interval: a burst queues before Triton's statistics say so). Everything
outside the feature
lookup and the call is the gateway's. The origin is the part with the most time
(:func:`origin`). Pure code; the poller and the lag probe are tasks of the app.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ORIGINS: tuple[str, ...] = ("gateway", "feature_lookup", "triton_queue", "triton_compute")
"""Every value of ``X-Delay-Origin``, in the order of a request's path."""

_COMPUTE_PARTS = ("compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class TritonCumulative:
    """One reading of a version's cumulative statistics (Triton's statistics extension)."""

    queue_count: int
    queue_ns: int
    compute_count: int
    compute_ns: int


@dataclass(frozen=True)
class TritonShare:
    """Per-request means of Triton's queue and compute time over one interval, in seconds."""

    queue_s: float
    compute_s: float


def parse_stats(document: Mapping[str, Any], version: int) -> TritonCumulative | None:
    """The cumulative queue and compute totals of ``version`` in a ``/stats`` answer (None: absent).

    Raises:
        ValueError: the document is not of the statistics extension's shape.
    """
    try:
        for entry in document["model_stats"]:
            if str(entry.get("version", "")) != str(version):
                continue
            stats = entry["inference_stats"]
            return TritonCumulative(
                queue_count=int(stats["queue"]["count"]), queue_ns=int(stats["queue"]["ns"]),
                compute_count=int(stats["compute_infer"]["count"]),
                compute_ns=sum(int(stats[part]["ns"]) for part in _COMPUTE_PARTS))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a Triton statistics document ({exc!r} missing or malformed)") from exc
    return None


def share_between(before: TritonCumulative, after: TritonCumulative) -> TritonShare | None:
    """The per-request means of the requests Triton finished between two readings (None: none did).

    A reading with smaller counters than the one before (the version was reloaded) yields
    None; the next interval starts from it.
    """
    queued = after.queue_count - before.queue_count
    computed = after.compute_count - before.compute_count
    if queued <= 0 or computed <= 0 or after.queue_ns < before.queue_ns or after.compute_ns < before.compute_ns:
        return None
    return TritonShare(queue_s=(after.queue_ns - before.queue_ns) / queued / 1e9,
                       compute_s=(after.compute_ns - before.compute_ns) / computed / 1e9)


class TritonDelays:
    """The newest per-request queue and compute means per (model, version), from successive readings."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], TritonCumulative] = {}
        self._share: dict[tuple[str, int], TritonShare] = {}

    def observe(self, model: str, version: int, reading: TritonCumulative) -> TritonShare | None:
        """Record a reading; returns the interval's share when Triton finished requests in it."""
        key = (model, version)
        before = self._last.get(key)
        self._last[key] = reading
        share = None if before is None else share_between(before, reading)
        if share is not None:
            self._share[key] = share
        return share

    def share(self, model: str, version: int) -> TritonShare | None:
        """The newest known means of a version (None until two readings saw requests finish)."""
        return self._share.get((model, version))

    def forget(self, model: str, version: int) -> None:
        self._last.pop((model, version), None)
        self._share.pop((model, version), None)


class LoopLag:
    """The event loop's recent lag: how late a probe that sleeps a fixed interval wakes up.

    :meth:`current` is the largest lag seen in the last ``window_s`` seconds.
    """

    def __init__(self, window_s: float = 1.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()
        self._max: float | None = 0.0  # the samples' largest lag; None: to be recomputed

    def add(self, now: float, lag_s: float) -> None:
        lag = max(0.0, lag_s)
        self._samples.append((now, lag))
        if self._max is not None:
            self._max = max(self._max, lag)
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
            self._max = None

    def current(self, now: float) -> float:
        """Called for every request: the maximum is kept, recomputed only after samples expired."""
        self._expire(now)
        if self._max is None:
            self._max = max((lag for _at, lag in self._samples), default=0.0)
        return self._max


def split(total_s: float, features_s: float, triton_wall_s: float, share: TritonShare | None,
          loop_lag_s: float = 0.0, calls_ahead: int = 0) -> dict[str, float]:
    """Seconds per origin of one request; the parts add up to ``total_s``.

    Args:
        total_s: the request's time in the gateway so far.
        features_s: the feature lookup's time.
        triton_wall_s: the Triton call as the gateway timed it (0 when not called).
        share: Triton's recent per-request queue and compute means of the called version (None:
            no statistics yet: Triton's part of the call counts as compute).
        loop_lag_s: the gateway's event loop lag. Without statistics the call counts as the
            gateway's up to the lag and as compute beyond it; with them, the rest of the call
            the means leave is shared by the gateway and the queue as lag : queue evidence
            (all the gateway's when both are 0: connection and HTTP).
        calls_ahead: calls to the same version this gateway had in flight when this one started.
    """
    wall = max(0.0, triton_wall_s)
    lag = max(0.0, loop_lag_s)
    if share is None:
        queue, compute = 0.0, wall - min(wall, lag)
    else:
        queue = min(wall, share.queue_s)
        compute = min(wall - queue, share.compute_s)
        rest = wall - queue - compute
        queued = max(share.queue_s, max(0, calls_ahead) * share.compute_s)
        weight = lag + queued
        queue += 0.0 if weight <= 0.0 else rest * queued / weight
    return {"gateway": max(0.0, total_s - features_s - queue - compute), "feature_lookup": features_s,
            "triton_queue": queue, "triton_compute": compute}


def origin(parts: Mapping[str, float]) -> str:
    """The origin with the most time (the earlier one in :data:`ORIGINS` on a tie)."""
    return max(ORIGINS, key=lambda name: parts.get(name, 0.0))


def server_timing(parts: Mapping[str, float]) -> str:
    """A ``Server-Timing`` header value (W3C): each part's duration in milliseconds."""
    return ", ".join(f"{name};dur={parts.get(name, 0.0) * 1000.0:.3f}" for name in ORIGINS)


@dataclass
class RequestTiming:
    """Where one request's time went so far (the parts :func:`split` names)."""

    started: float = field(default_factory=time.perf_counter)
    features_s: float = 0.0
    inference_s: float = 0.0
    share: TritonShare | None = None  # Triton's recent per-request queue/compute means of the called version
    loop_lag_s: float = 0.0  # the event loop's lag when the Triton call ended
    calls_ahead: int = 0  # calls to the same version in flight when this one started

    def total_s(self) -> float:
        return time.perf_counter() - self.started

    def parts(self) -> dict[str, float]:
        """Seconds per delay origin so far (modelops.gateway.delay.split)."""
        return split(self.total_s(), self.features_s, self.inference_s, self.share, self.loop_lag_s,
                     self.calls_ahead)

    def headers(self, parts: dict[str, float]) -> list[tuple[bytes, bytes]]:
        return [(b"x-delay-origin", origin(parts).encode()), (b"server-timing", server_timing(parts).encode())]
