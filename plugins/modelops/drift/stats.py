"""Two-sample Kolmogorov–Smirnov maths for the drift job: pure numpy, no I/O.

- :class:`Moments`: row count, non-missing count, mean and spread of a column, mergeable;
- :func:`sorted_ks` / :func:`exact_ks`: the exact statistic D from each side sorted once,
  each side searched into the other (no sort of the concatenation);
- :func:`ks_pvalue`: the asymptotic two-sided p-value that
  ``scipy.stats.ks_2samp(method="asymp")`` reports; it is reported, never used for the verdict;
- :func:`column_drift`, :func:`top_causes`, :class:`DriftSummary`: verdicts and ranking;
- :class:`Curve`, :class:`DriftComputation`: the job's numbers as the report reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SCORE_COLUMN = "score"
TOP_CAUSES = 3


# --------------------------------------------------------------------------------------------
# moments (mean, std, missing rate), mergeable across batches
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Moments:
    """Row count, non-missing count, mean and sum of squared deviations of one column."""

    rows: int
    count: int
    mean: float
    m2: float

    @staticmethod
    def empty() -> Moments:
        return Moments(0, 0, 0.0, 0.0)

    @staticmethod
    def of(values: FloatArray, rows: int) -> Moments:
        """Moments of the non-missing ``values`` among ``rows`` rows."""
        count = int(values.size)
        if count == 0:
            return Moments(rows, 0, 0.0, 0.0)
        mean = float(values.mean())
        centred = values - mean
        return Moments(rows, count, mean, float(np.dot(centred, centred)))

    def merge(self, other: Moments) -> Moments:
        """Chan's parallel update: exact and stable for any split of the rows."""
        count = self.count + other.count
        if count == 0:
            return Moments(self.rows + other.rows, 0, 0.0, 0.0)
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / count
        m2 = self.m2 + other.m2 + delta * delta * self.count * other.count / count
        return Moments(self.rows + other.rows, count, mean, m2)

    @property
    def std(self) -> float | None:
        """Population standard deviation (ddof=0) of the non-missing values."""
        return float(np.sqrt(max(self.m2, 0.0) / self.count)) if self.count else None

    @property
    def missing_rate(self) -> float:
        return (self.rows - self.count) / self.rows if self.rows else 0.0


# --------------------------------------------------------------------------------------------
# the exact KS statistic and its p-value
# --------------------------------------------------------------------------------------------


def exact_ks(a: FloatArray, b: FloatArray) -> float:
    """The exact two-sample KS statistic of the non-missing values (for tests and benchmarks).

    Each side is sorted once and searched into the other, nothing more: ``Fa - Fb`` only
    rises where ``Fa`` jumps, so ``sup(Fa - Fb)`` is ``max((i + 1) / n - Fb(a_i))`` over the
    sorted ``a`` (a tie's earlier copies under-count, its last copy is exact), and
    ``sup(Fb - Fa)`` the same with the sides swapped.
    """
    return sorted_ks(np.sort(a[~np.isnan(a)]), np.sort(b[~np.isnan(b)]))


def sorted_ks(a: FloatArray, b: FloatArray) -> float:
    """The exact two-sample KS statistic of two sorted samples without missing values."""
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples need at least one non-missing value")
    n, m = a.size, b.size
    above = np.arange(1, n + 1) / n - np.searchsorted(b, a, side="right") / m
    below = np.arange(1, m + 1) / m - np.searchsorted(a, b, side="right") / n
    return float(max(above.max(), below.max(), 0.0))


def ks_pvalue(d: float, n: int, m: int) -> float:
    """Asymptotic two-sided p-value, as ``scipy.stats.ks_2samp(..., method="asymp")``."""
    from scipy.stats import distributions

    big, small = sorted((float(n), float(m)), reverse=True)
    en = big * small / (big + small)
    return float(np.clip(distributions.kstwo.sf(d, np.round(en)), 0.0, 1.0))


# --------------------------------------------------------------------------------------------
# verdict and ranking
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SideSummary:
    """Mean, std and missing rate of a column on one side."""

    mean: float | None
    std: float | None
    missing_rate: float

    @staticmethod
    def of(moments: Moments) -> SideSummary:
        return SideSummary(moments.mean if moments.count else None, moments.std, moments.missing_rate)


@dataclass(frozen=True)
class ColumnDrift:
    """The drift verdict of one column (a feature, or the score when ``sensitivity`` is None)."""

    name: str
    ks: float | None
    p_value: float | None
    threshold: float
    drifted: bool
    sensitivity: float | None
    baseline: SideSummary
    current: SideSummary
    ks_error_bound: float = 0.0

    @property
    def weighted_score(self) -> float:
        """``D x drift_sensitivity`` (0 when D is undefined); the score column has weight 1."""
        if self.ks is None:
            return 0.0
        return self.ks * (1.0 if self.sensitivity is None else self.sensitivity)


def column_drift(
    name: str, ks: float | None, base: Moments, cur: Moments, *, threshold: float,
    sensitivity: float | None, error_bound: float = 0.0,
) -> ColumnDrift:
    """The verdict of one column: drifted when D exceeds its threshold.

    ``ks`` is None when a side has no non-missing value (no statistic, not drifted).
    """
    p_value = None if ks is None else ks_pvalue(ks, base.count, cur.count)
    drifted = ks is not None and ks > threshold
    return ColumnDrift(name, ks, p_value, threshold, drifted, sensitivity, SideSummary.of(base),
                       SideSummary.of(cur), error_bound)


def top_causes(features: Iterable[ColumnDrift], limit: int = TOP_CAUSES) -> tuple[str, ...]:
    """Up to ``limit`` drifted features with the highest weighted score (ties: by name)."""
    drifted = [f for f in features if f.drifted]
    drifted.sort(key=lambda f: (-f.weighted_score, f.name))
    return tuple(f.name for f in drifted[:limit])


def by_weighted_score(features: Iterable[ColumnDrift]) -> list[ColumnDrift]:
    """Features sorted by weighted score, highest first (ties: by name)."""
    return sorted(features, key=lambda f: (-f.weighted_score, f.name))


@dataclass(frozen=True)
class DriftSummary:
    """Everything ``drift.json`` holds."""

    rows_baseline: int
    rows_current: int
    sampled: bool
    threshold: float
    score: ColumnDrift
    features: tuple[ColumnDrift, ...]

    @property
    def drifted(self) -> bool:
        return self.score.drifted or any(f.drifted for f in self.features)

    @property
    def top_causes(self) -> tuple[str, ...]:
        return top_causes(self.features)


@dataclass(frozen=True)
class Curve:
    """Both ECDFs of one column on its grid (for the report's overlays)."""

    x: FloatArray
    baseline: FloatArray
    current: FloatArray


@dataclass(frozen=True)
class DriftComputation:
    """The job's numbers: the summary for drift.json plus ECDF curves for the report."""

    summary: DriftSummary
    curves: Mapping[str, Curve] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)
    """Seconds per phase (count, sample, statistics, finish)."""
