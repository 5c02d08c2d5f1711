"""Gateway metrics in the Prometheus text format, the rolling score window and the collapse watch.

A tiny registry (counters, gauges, one histogram family) keeps the hot path to a dict
update; ``/metrics`` renders it. :class:`ScoreWindow` keeps per-second sums of the
scores of one model version so the rolling std and max cost O(window) to read.
:class:`CollapseWatch` is a pure state machine: it says when a version's std has stayed
below the threshold long enough, once per episode.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelops.documents.routes import Routes

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: Labels = ()) -> str:
    pairs = labels + extra
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass
class Family:
    """One metric family: a name, a type, a help line, and values per label set."""

    name: str
    kind: str
    help: str
    values: dict[Labels, float] = field(default_factory=dict)

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"
        for labels, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(labels)} {_number(value)}"


@dataclass
class HistogramFamily:
    """A Prometheus histogram per label set (cumulative buckets, sum, count)."""

    name: str
    help: str
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: dict[Labels, list[int]] = field(default_factory=dict)
    sums: dict[Labels, float] = field(default_factory=dict)

    def observe(self, labels: Labels, value: float) -> None:
        counts = self.counts.get(labels)
        if counts is None:
            counts = self.counts[labels] = [0] * (len(self.buckets) + 1)
            self.sums[labels] = 0.0
        # the first bucket with value <= bound; +Inf (the last) above every bound, and for NaN
        counts[bisect_left(self.buckets, value) if value == value else len(self.buckets)] += 1
        self.sums[labels] += value

    def observe_many(self, labels: Labels, values: Sequence[float]) -> None:
        """Observe several values at once (one pass, for the per-item |Δ| of a mirrored answer)."""
        if not len(values):
            return
        if len(values) <= 64:  # a request's few scores: one bisect each beats numpy's call overhead
            for value in (values.tolist() if hasattr(values, "tolist") else values):
                self.observe(labels, value)
            return
        import numpy as np

        array = np.asarray(values, dtype=np.float64)
        slots = np.searchsorted(np.asarray(self.buckets), array, side="left")  # bisect_left, vectorised
        slots[np.isnan(array)] = len(self.buckets)
        counts = self.counts.get(labels)
        if counts is None:
            counts = self.counts[labels] = [0] * (len(self.buckets) + 1)
            self.sums[labels] = 0.0
        for slot, n in enumerate(np.bincount(slots, minlength=len(self.buckets) + 1).tolist()):
            counts[slot] += n
        self.sums[labels] += float(np.nansum(array))

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for labels, counts in sorted(self.counts.items()):
            running = 0
            for bound, count in zip(self.buckets, counts, strict=False):
                running += count
                yield f"{self.name}_bucket{_labels(labels, (('le', _number(bound)),))} {running}"
            running += counts[-1]
            yield f"{self.name}_bucket{_labels(labels, (('le', '+Inf'),))} {running}"
            yield f"{self.name}_sum{_labels(labels)} {_number(self.sums[labels])}"
            yield f"{self.name}_count{_labels(labels)} {running}"


class Registry:
    """The gateway's metric families, rendered in declaration order."""

    def __init__(self) -> None:
        self._families: list[Family | HistogramFamily] = []

    def counter(self, name: str, help_: str) -> Family:
        family = Family(name, "counter", help_)
        self._families.append(family)
        return family

    def gauge(self, name: str, help_: str) -> Family:
        family = Family(name, "gauge", help_)
        self._families.append(family)
        return family

    def histogram(self, name: str, help_: str, buckets: tuple[float, ...] = LATENCY_BUCKETS_S) -> HistogramFamily:
        family = HistogramFamily(name, help_, buckets)
        self._families.append(family)
        return family

    def render(self) -> str:
        return "\n".join(line for family in self._families for line in family.render()) + "\n"


def route_weights(table: Iterable[Routes]) -> dict[Labels, float]:
    """``modelops_gateway_route_weight`` values: the traffic share of each routed version.

    The stable version gets ``1 - canary_weight`` (all of it without a canary), the canary
    ``canary_weight``. Only routed versions have a series, so a version the routes dropped
    disappears from ``/metrics``.
    """
    weights: dict[Labels, float] = {}
    for routes in table:
        shares = [("stable", routes.stable.version, 1.0 - (routes.canary_weight if routes.canary else 0.0))]
        if routes.canary is not None:
            shares.append(("canary", routes.canary.version, routes.canary_weight))
        for variant, version, share in shares:
            labels = (("model", routes.model), ("version", str(version)), ("variant", variant))
            weights[labels] = weights.get(labels, 0.0) + share
    return weights


@dataclass
class _Second:
    second: int
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    peak: float = -math.inf


@dataclass
class ScoreWindow:
    """Rolling statistics of the scores of one model version over the last ``seconds``."""

    seconds: int = 60
    _buckets: deque[_Second] = field(default_factory=deque)

    def add(self, now: float, n: int, total: float, squares: float, peak: float) -> None:
        """Add one request's scores (their count, sum, sum of squares and max)."""
        second = int(now)
        if not self._buckets or self._buckets[-1].second != second:
            self._buckets.append(_Second(second))
        bucket = self._buckets[-1]
        bucket.n += n
        bucket.total += total
        bucket.squares += squares
        bucket.peak = max(bucket.peak, peak)
        self._expire(second)

    def _expire(self, second: int) -> None:
        while self._buckets and self._buckets[0].second <= second - self.seconds:
            self._buckets.popleft()

    def stats(self, now: float) -> tuple[int, float, float]:
        """(count, std, max) of the scores in the window; std and max are NaN when empty."""
        self._expire(int(now))
        n = sum(b.n for b in self._buckets)
        if n == 0:
            return 0, math.nan, math.nan
        mean = sum(b.total for b in self._buckets) / n
        variance = max(0.0, sum(b.squares for b in self._buckets) / n - mean * mean)
        return n, math.sqrt(variance), max(b.peak for b in self._buckets)


@dataclass
class CollapseWatch:
    """Flags a version whose score std stays below ``threshold`` for ``hold_s`` seconds.

    :meth:`observe` returns True exactly once per collapse episode (when it starts to
    count as a collapse); the episode ends when the std recovers.
    """

    threshold: float = 0.005
    hold_s: float = 300.0
    min_scores: int = 50
    _below_since: dict[str, float] = field(default_factory=dict)
    _flagged: set[str] = field(default_factory=set)

    def observe(self, key: str, n: int, std: float, now: float) -> bool:
        if n < self.min_scores or math.isnan(std):
            return False  # too little traffic to judge
        if std >= self.threshold:
            self._below_since.pop(key, None)
            self._flagged.discard(key)
            return False
        since = self._below_since.setdefault(key, now)
        if now - since >= self.hold_s and key not in self._flagged:
            self._flagged.add(key)
            return True
        return False

    def flagged(self, key: str) -> bool:
        return key in self._flagged

    @property
    def keys(self) -> Mapping[str, float]:
        return dict(self._below_since)
