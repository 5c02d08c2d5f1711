"""Builders of measurements for tests and benchmarks (no I/O)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from modelops.canary.measurement import Measurement, ShadowWindow, VersionWindow

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


def histogram(latencies_s: Iterable[float], bounds: tuple[float, ...] = LATENCY_BUCKETS_S
              ) -> tuple[tuple[float, float], ...]:
    """Cumulative (bound, count) pairs of the given latencies, ending with ``+Inf``."""
    values = sorted(latencies_s)
    out = [(b, float(sum(1 for v in values if v <= b))) for b in bounds]
    return (*out, (math.inf, float(len(values))))


def window(requests: float = 1000, errors: float = 0, latency_s: float = 0.02, std: float = 0.1,
           feedback: Mapping[str, float] | None = None, slow_share: float = 0.0,
           slow_latency_s: float = 0.0) -> VersionWindow:
    """A version's window: ``requests`` at ``latency_s`` (a ``slow_share`` at ``slow_latency_s``)."""
    n = int(requests) if not math.isnan(requests) else 0
    slow = round(n * slow_share)
    buckets = histogram([latency_s] * (n - slow) + [slow_latency_s] * slow) if n else ()
    return VersionWindow(requests=requests, errors=errors, latency_buckets=buckets, score_std=std,
                         feedback=dict(feedback or {}))


def measurement(canary: VersionWindow | None = None, stable: VersionWindow | None = None, start: float = 0.0,
                length: float = 60.0, unreachable: tuple[str, ...] = ()) -> Measurement:
    return Measurement(window_start=start, window_end=start + length, canary=canary or window(),
                       stable=stable or window(), unreachable=unreachable)


DIVERGENCE_BOUNDS: tuple[float, ...] = (
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
)
"""The gateway's |Δ| histogram bounds (``modelops.gateway.shadow.divergence.DIVERGENCE_BUCKETS``)."""


def shadow_window(answered: float = 1000, errors: float = 0, latency_s: float = 0.005,
                  stable_latency_s: float = 0.005, diffs: Iterable[float] | None = None, changed: float = 0,
                  measure: str = "topk", rel_diffs: Iterable[float] | None = None, dropped: float = 0,
                  items: int = 5) -> ShadowWindow:
    """The candidate's mirrored answers in one window: ``answered`` + ``errors`` calls, ``changed`` of the
    compared requests (``topk``) or rows (``class``) disagreeing; ``diffs``: the |Δ| of every score
    (default: ``items`` zeros per answer); ``rel_diffs``: a regressor's relative |Δ| per row."""
    n = int(answered)
    values = list(diffs) if diffs is not None else [0.0] * (n * items)
    return ShadowWindow(
        mirrored=answered + errors, dropped=dropped, answered=answered, errors=errors,
        candidate_buckets=histogram([latency_s] * n) if n else (),
        stable_buckets=histogram([stable_latency_s] * n) if n else (),
        abs_buckets=histogram(values, DIVERGENCE_BOUNDS) if values else (),
        rel_buckets=histogram(list(rel_diffs), DIVERGENCE_BOUNDS) if rel_diffs is not None else (),
        topk_compared=answered if measure == "topk" else 0.0, topk_changed=changed if measure == "topk" else 0.0,
        class_compared=answered if measure == "class" else 0.0, class_changed=changed if measure == "class" else 0.0)
