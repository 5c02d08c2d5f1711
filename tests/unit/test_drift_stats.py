"""The drift maths (modelops.drift.stats) against scipy.stats.ks_2samp: grid, bracket, refinement."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import ks_2samp

from modelops.drift import stats
from modelops.drift.stats import ColumnDrift, DriftSummary, Moments, Partial, SideSummary

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


def _partials(values: np.ndarray, edges: np.ndarray, batches: int) -> Partial:
    parts = [stats.batch_partial(chunk, edges) for chunk in np.array_split(values, batches)]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    return merged


def _job_like(a: np.ndarray, b: np.ndarray, *, edges: int, sample: int, tolerance: float,
              threshold: float = 0.05, seed: int = 0) -> tuple[float, float, stats.GridKS]:
    """What the Spark job does, in-process: sample grid, batch partials, bracket, refinement."""
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([rng.choice(a, min(sample, a.size), replace=False),
                             rng.choice(b, min(sample, b.size), replace=False)])
    grid_edges = stats.grid_edges(pooled, edges)
    base, cur = _partials(a, grid_edges, 3), _partials(b, grid_edges, 2)
    grid = stats.ks_on_grid(base, cur)
    plan = stats.plan_refinement({0: grid}, [(base, cur)], [threshold], tolerance, 10**9)
    resolved = {}
    for j, vb, vc in zip(plan.get(0, []), *(stats.interior_values(x, grid_edges, plan.get(0, np.empty(0, np.int64)))
                                           for x in (a, b)), strict=True):
        resolved[int(j)] = ([vb], [vc])
    d, upper = stats.refine_ks(grid, base, cur, resolved)
    return d, upper, grid


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_ks_matches_scipy(case: str) -> None:
    a, b = CASES[case](np.random.default_rng(1))
    assert stats.exact_ks(a, b) == pytest.approx(_scipy(a, b), abs=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_grid_brackets_the_exact_statistic(case: str) -> None:
    a, b = CASES[case](np.random.default_rng(2))
    exact = _scipy(a, b)
    edges = stats.grid_edges(np.concatenate([a[::7], b[::7]]), 64)
    base, cur = _partials(a, edges, 4), _partials(b, edges, 3)
    grid = stats.ks_on_grid(base, cur)
    assert grid.lower <= exact + 1e-12
    assert exact <= grid.upper + 1e-12
    # the bracket is never wider than the largest share of one side strictly inside one bin
    widest = max(
        max((p.left[j] if j < edges.size else p.moments.count) - (p.right[j - 1] if j else 0) for j in
            range(edges.size + 1)) / p.moments.count
        for p in (base, cur)
    )
    assert grid.upper - grid.lower <= widest + 1e-12


@pytest.mark.parametrize("case", sorted(CASES))
def test_full_refinement_is_exact(case: str) -> None:
    a, b = CASES[case](np.random.default_rng(3))
    d, upper, _ = _job_like(a, b, edges=32, sample=300, tolerance=0.0)
    assert d == pytest.approx(_scipy(a, b), abs=1e-12)
    assert upper == pytest.approx(d, abs=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tolerance", [5e-4, 1e-3])
def test_tolerance_bounds_the_error(case: str, tolerance: float) -> None:
    a, b = CASES[case](np.random.default_rng(4))
    d, upper, _ = _job_like(a, b, edges=256, sample=1000, tolerance=tolerance)
    exact = _scipy(a, b)
    assert d <= exact + 1e-12 <= upper + 2e-12
    assert exact - d <= tolerance + 1e-12


def test_quantile_grid_alone_is_within_1e3_on_large_heavy_tailed_samples() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.standard_t(1.1, 200_000), rng.standard_t(1.1, 150_000) * 1.02
    d, _, grid = _job_like(a, b, edges=4096, sample=32_768, tolerance=1.0)  # no refinement
    assert grid.upper - grid.lower < 1e-3
    assert abs(d - _scipy(a, b)) < 1e-3


def test_identical_inputs_give_zero() -> None:
    a = np.random.default_rng(6).lognormal(0, 2, 2000)
    d, upper, grid = _job_like(a, a.copy(), edges=64, sample=500, tolerance=0.0)
    assert grid.lower == 0.0
    assert d == 0.0 and upper == 0.0


def test_few_distinct_values_make_every_value_an_edge_and_ties_exact() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 5, 5000).astype(float), rng.integers(0, 6, 4000).astype(float)
    edges = stats.grid_edges(np.concatenate([a[:100], b[:100], [np.nan]]), 4096)
    assert edges.tolist() == sorted(set(a[:100]) | set(b[:100]))
    grid = stats.ks_on_grid(stats.batch_partial(a, edges), stats.batch_partial(b, edges))
    assert grid.lower == pytest.approx(_scipy(a, b), abs=1e-12)
    assert grid.upper == pytest.approx(grid.lower, abs=1e-12)  # no value between edges


def test_grid_edges_are_sorted_unique_sample_values() -> None:
    sample = np.random.default_rng(8).normal(size=10_000)
    edges = stats.grid_edges(sample, 100)
    assert 90 <= edges.size <= 100
    assert np.all(np.diff(edges) > 0)
    assert np.isin(edges, sample).all()
    with pytest.raises(ValueError):
        stats.grid_edges(sample, 0)


def test_refinement_cutoff() -> None:
    tight = stats.GridKS(0.2, 0.2003, np.array([0.2003]))
    assert stats.refinement_cutoff(tight, 0.05, 5e-4) is None
    wide = stats.GridKS(0.2, 0.21, np.array([0.21]))
    assert stats.refinement_cutoff(wide, 0.05, 5e-4) == pytest.approx(0.2005)
    straddling = stats.GridKS(0.0499, 0.0502, np.array([0.0502]))  # verdict depends on the exact D
    assert stats.refinement_cutoff(straddling, 0.05, 5e-4) == pytest.approx(0.05)


def test_refinement_budget_limits_the_fetched_values() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=2000), rng.normal(0.05, size=2000)
    edges = stats.grid_edges(np.concatenate([a[:50], b[:50]]), 16)
    base, cur = stats.batch_partial(a, edges), stats.batch_partial(b, edges)
    grid = stats.ks_on_grid(base, cur)
    everything = stats.plan_refinement({0: grid}, [(base, cur)], [0.5], 0.0, 10**9)
    assert everything[0].size >= 1
    first = int(everything[0][0])
    cost = stats.interior_count(base, cur, first)
    limited = stats.plan_refinement({0: grid}, [(base, cur)], [0.5], 0.0, cost)
    assert limited[0].tolist() == [first]
    assert stats.plan_refinement({0: grid}, [(base, cur)], [0.5], 0.0, cost - 1) == {}


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


def test_batch_partial_treats_nan_as_missing() -> None:
    values = np.array([1.0, np.nan, 3.0, 3.0, np.nan])
    part = stats.batch_partial(values, np.array([2.0, 3.0]))
    assert part.moments == Moments(5, 3, pytest.approx(7 / 3), pytest.approx(8 / 3))  # type: ignore[arg-type]
    assert part.right.tolist() == [1, 3] and part.left.tolist() == [1, 1]
    assert Moments.of(np.empty(0), 4).std is None and SideSummary.of(Moments.of(np.empty(0), 4)).mean is None


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
