"""The drift maths (modelops.drift.stats) against scipy.stats.ks_2samp: exact D, p-value, moments, verdicts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import ks_2samp

from modelops.drift import stats
from modelops.drift.stats import ColumnDrift, DriftSummary, Moments, SideSummary

Pair = tuple[np.ndarray, np.ndarray]


def _with_nulls(rng: np.random.Generator, values: np.ndarray, share: float) -> np.ndarray:
    values = values.astype(np.float64)
    values[rng.random(values.size) < share] = np.nan
    return values


CASES: dict[str, Callable[[np.random.Generator], Pair]] = {
    "normal shift": lambda r: (r.normal(0, 1, 3000), r.normal(0.1, 1, 2500)),
    "cauchy": lambda r: (r.standard_cauchy(4000), r.standard_cauchy(3000) * 1.2),
    "lognormal sigma 3": lambda r: (r.lognormal(0, 3, 3000), r.lognormal(0.2, 3, 3500)),
    "ties (poisson)": lambda r: (r.poisson(2, 3000).astype(float), r.poisson(2.3, 2000).astype(float)),
    "point mass + tail": lambda r: (np.where(r.random(3000) < 0.5, 0.0, r.exponential(1, 3000)),
                                    np.where(r.random(2000) < 0.3, 0.0, r.exponential(1.2, 2000))),
    "nulls": lambda r: (_with_nulls(r, r.normal(0, 1, 3000), 0.2), _with_nulls(r, r.normal(0, 1.1, 3000), 0.05)),
    "disjoint ranges": lambda r: (r.uniform(0, 1, 1000), r.uniform(5, 6, 800)),
    "current inside one baseline bin": lambda r: (r.normal(0, 1, 3000), r.normal(0.0, 1e-6, 2000)),
}


def _scipy(a: np.ndarray, b: np.ndarray) -> float:
    return float(ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)]).statistic)


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_ks_matches_scipy(case: str) -> None:
    a, b = CASES[case](np.random.default_rng(1))
    assert stats.exact_ks(a, b) == pytest.approx(_scipy(a, b), abs=1e-12)


def test_identical_inputs_give_zero() -> None:
    a = np.random.default_rng(6).lognormal(0, 2, 2000)
    assert stats.exact_ks(a, a.copy()) == 0.0


def test_sorted_ks_needs_values_on_both_sides() -> None:
    with pytest.raises(ValueError, match="at least one non-missing value"):
        stats.sorted_ks(np.empty(0), np.array([1.0]))
    with pytest.raises(ValueError, match="at least one non-missing value"):
        stats.exact_ks(np.array([np.nan]), np.array([1.0]))


@pytest.mark.parametrize("n,m,d", [(1000, 800, 0.04), (50_000, 70_000, 0.01), (300, 300, 0.2), (10, 12, 0.5)])
def test_p_value_is_scipys_asymptotic_one(n: int, m: int, d: float) -> None:
    rng = np.random.default_rng(10)
    a, b = rng.normal(size=n), rng.normal(size=m)
    result = ks_2samp(a, b, method="asymp")
    assert stats.ks_pvalue(float(result.statistic), n, m) == pytest.approx(result.pvalue, rel=1e-9, abs=1e-300)
    assert 0.0 <= stats.ks_pvalue(d, n, m) <= 1.0


def test_moments_merge_matches_numpy_on_any_split() -> None:
    rng = np.random.default_rng(11)
    values = rng.lognormal(5, 2, 10_001)
    merged = Moments.empty()
    for chunk in np.array_split(values, 7):
        merged = merged.merge(Moments.of(chunk, chunk.size + 3))
    assert merged.count == values.size and merged.rows == values.size + 21
    assert merged.mean == pytest.approx(values.mean(), rel=1e-12)
    assert merged.std == pytest.approx(values.std(), rel=1e-9)
    assert merged.missing_rate == pytest.approx(21 / (values.size + 21))


def test_moments_of_no_values_have_no_mean_or_std() -> None:
    assert Moments.of(np.empty(0), 4).std is None and SideSummary.of(Moments.of(np.empty(0), 4)).mean is None
    assert Moments.of(np.empty(0), 4).missing_rate == 1.0


def _column(name: str, ks: float | None, threshold: float = 0.05, sensitivity: float | None = 0.5) -> ColumnDrift:
    m = Moments(100, 100, 0.0, 1.0)
    return stats.column_drift(name, ks, m, m, threshold=threshold, sensitivity=sensitivity)


def test_verdict_uses_d_and_threshold_not_the_p_value() -> None:
    big = Moments(10**6, 10**6, 0.0, 1.0)
    small_d = stats.column_drift("x", 0.01, big, big, threshold=0.05, sensitivity=1.0)
    assert small_d.p_value is not None and small_d.p_value < 1e-6 and not small_d.drifted
    assert not _column("a", 0.05).drifted  # "exceeds": equal is not drift
    assert _column("a", 0.0501).drifted
    assert not _column("a", 0.07, threshold=0.08).drifted  # the feature's own threshold wins
    undefined = _column("a", None)
    assert undefined.p_value is None and not undefined.drifted and undefined.weighted_score == 0.0


def test_top_causes_rank_drifted_features_by_weighted_score() -> None:
    features = [
        _column("a", 0.30, sensitivity=0.1),   # weighted 0.03
        _column("b", 0.10, sensitivity=0.9),   # 0.09
        _column("c", 0.20, sensitivity=0.5),   # 0.10
        _column("d", 0.04, sensitivity=1.0),   # not drifted
        _column("e", 0.09, sensitivity=1.0),   # 0.09, ties with b: by name
        _column("f", 0.06, sensitivity=0.0),   # drifted, weighted 0
    ]
    assert stats.top_causes(features) == ("c", "b", "e")
    assert stats.top_causes(features, limit=10) == ("c", "b", "e", "a", "f")
    assert [f.name for f in stats.by_weighted_score(features)][:3] == ["c", "b", "e"]
    assert stats.top_causes([_column("d", 0.01)]) == ()


def test_summary_drifts_when_only_the_score_drifts() -> None:
    calm = (_column("a", 0.01), _column("b", 0.02))
    summary = DriftSummary(100, 100, False, 0.05, _column("score", 0.3, sensitivity=None), calm)
    assert summary.drifted and summary.top_causes == ()
    assert not DriftSummary(100, 100, False, 0.05, _column("score", 0.01, sensitivity=None), calm).drifted


def test_exact_ks_matches_scipy_on_heavy_ties_and_tiny_samples() -> None:
    # Each side searched into the other: ties inside and across the samples are where that could go wrong.
    rng = np.random.default_rng(7)
    for _ in range(300):
        n, m = (int(x) for x in rng.integers(1, 40, 2))
        a = rng.integers(0, 6, n).astype(np.float64)
        b = (rng.integers(0, 6, m) + rng.integers(0, 2)).astype(np.float64)
        assert stats.exact_ks(a, b) == pytest.approx(_scipy(a, b), abs=1e-12), (a, b)
