"""What one analysis window measured: canary and stable counters over the same window.

Counts are differences of counters over the window (see :mod:`modelops.canary.sources`);
``NaN`` means *not measured* (a target was unreachable, a series missing), which every
gate reads as inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NAN = math.nan


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _float(raw: Any) -> float:
    return NAN if raw is None else float(raw)


@dataclass(frozen=True)
class VersionWindow:
    """One model version's traffic in one window.

    Attributes:
        requests: prediction attempts routed to the version (answered + failed).
        errors: failed attempts (gateway upstream errors and timeouts, Triton failures).
        latency_buckets: cumulative latency histogram over the window as (upper bound in
            seconds, count) pairs sorted by bound, the last bound ``inf``.
        score_std: rolling std of the version's scores (gauge), NaN when unknown.
        feedback: feedback events in the window by action (click, purchase, skip).
    """

    requests: float = NAN
    errors: float = NAN
    latency_buckets: tuple[tuple[float, float], ...] = ()
    score_std: float = NAN
    feedback: Mapping[str, float] = field(default_factory=dict)

    @property
    def error_rate(self) -> float:
        if math.isnan(self.requests) or math.isnan(self.errors) or self.requests <= 0:
            return NAN
        return self.errors / self.requests

    def to_dict(self) -> dict[str, Any]:
        return {"requests": _num(self.requests), "errors": _num(self.errors),
                "latency_buckets": [[("+Inf" if math.isinf(le) else le), _num(c)] for le, c in self.latency_buckets],
                "score_std": _num(self.score_std), "feedback": dict(sorted(self.feedback.items()))}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> VersionWindow:
        buckets = tuple((math.inf if le == "+Inf" else float(le), _float(c))
                        for le, c in raw.get("latency_buckets", []))
        return cls(requests=_float(raw.get("requests")), errors=_float(raw.get("errors")), latency_buckets=buckets,
                   score_std=_float(raw.get("score_std")),
                   feedback={str(k): float(v) for k, v in raw.get("feedback", {}).items()})


Buckets = tuple[tuple[float, float], ...]


def _buckets_to(buckets: Buckets) -> list[list[Any]]:
    return [[("+Inf" if math.isinf(le) else le), _num(c)] for le, c in buckets]


def _buckets_from(raw: Any) -> Buckets:
    return tuple((math.inf if le == "+Inf" else float(le), _float(c)) for le, c in raw or [])


@dataclass(frozen=True)
class ShadowWindow:
    """The candidate's mirrored answers in one window of the shadow phase (the gateway's shadow series).

    Attributes:
        mirrored: mirrored calls started; dropped: calls not started (the in-flight budget was
            spent, or the candidate's signature differs).
        answered / errors: mirrored calls the candidate answered / failed (upstream and timeout).
        candidate_buckets / stable_buckets: cumulative histograms of the Triton call time (seconds)
            of the candidate and of the stable version on the same mirrored requests.
        abs_buckets: cumulative histogram of |candidate − stable| per score (item, or row).
        rel_buckets: cumulative histogram of a regressor's relative |Δ| per row.
        topk_compared / topk_changed: ranked requests compared / whose top-k order changed.
        class_compared / class_changed: classified rows compared / whose predicted class changed.
    """

    mirrored: float = NAN
    dropped: float = NAN
    answered: float = NAN
    errors: float = NAN
    candidate_buckets: Buckets = ()
    stable_buckets: Buckets = ()
    abs_buckets: Buckets = ()
    rel_buckets: Buckets = ()
    topk_compared: float = 0.0
    topk_changed: float = 0.0
    class_compared: float = 0.0
    class_changed: float = 0.0

    @property
    def requests(self) -> float:
        """Mirrored calls that ended (answered or failed)."""
        return self.answered + self.errors

    def to_dict(self) -> dict[str, Any]:
        return {"mirrored": _num(self.mirrored), "dropped": _num(self.dropped), "answered": _num(self.answered),
                "errors": _num(self.errors), "candidate_buckets": _buckets_to(self.candidate_buckets),
                "stable_buckets": _buckets_to(self.stable_buckets), "abs_buckets": _buckets_to(self.abs_buckets),
                "rel_buckets": _buckets_to(self.rel_buckets), "topk_compared": self.topk_compared,
                "topk_changed": self.topk_changed, "class_compared": self.class_compared,
                "class_changed": self.class_changed}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ShadowWindow:
        return cls(mirrored=_float(raw.get("mirrored")), dropped=_float(raw.get("dropped")),
                   answered=_float(raw.get("answered")), errors=_float(raw.get("errors")),
                   candidate_buckets=_buckets_from(raw.get("candidate_buckets")),
                   stable_buckets=_buckets_from(raw.get("stable_buckets")),
                   abs_buckets=_buckets_from(raw.get("abs_buckets")), rel_buckets=_buckets_from(raw.get("rel_buckets")),
                   **{k: float(raw.get(k, 0.0)) for k in ("topk_compared", "topk_changed", "class_compared",
                                                           "class_changed")})


@dataclass(frozen=True)
class Measurement:
    """Canary vs stable over the window ``[window_start, window_end)`` (epoch seconds).

    ``unreachable`` names the metric targets that could not be read (a gateway URL,
    Triton, Prometheus); any entry makes the whole analysis inconclusive, because a
    canary that cannot be measured must never be promoted.
    """

    window_start: float
    window_end: float
    canary: VersionWindow
    stable: VersionWindow
    unreachable: tuple[str, ...] = ()
    shadow: ShadowWindow | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"window_start": float(self.window_start), "window_end": float(self.window_end),
               "canary": self.canary.to_dict(), "stable": self.stable.to_dict(),
               "unreachable": list(self.unreachable)}
        if self.shadow is not None:
            out["shadow"] = self.shadow.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Measurement:
        return cls(window_start=float(raw["window_start"]), window_end=float(raw["window_end"]),
                   canary=VersionWindow.from_dict(raw["canary"]), stable=VersionWindow.from_dict(raw["stable"]),
                   unreachable=tuple(raw.get("unreachable", ())),
                   shadow=ShadowWindow.from_dict(raw["shadow"]) if raw.get("shadow") else None)
