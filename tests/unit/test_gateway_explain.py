"""Shapley sampling's pure parts: the path inputs, the contributions, additivity, the top features and reason."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
import types

import numpy as np
import pytest

from modelops.gateway.explain.scoring import ExplainPlan, explain_items
from modelops.gateway.explain.shapley import (
    ADDITIVITY_TOLERANCE,
    Contribution,
    additivity_error,
    contributions,
    path_inputs,
    permutations,
    ranks_of,
    top_features,
    top_reason,
)
from modelops.gateway.triton.inference import TritonFailed
from modelops.serving.pbtxt import TEMPLATES_DIR


def score(rows: np.ndarray) -> np.ndarray:
    """A non-additive model: an interaction, a sigmoid, and a feature it ignores (index 3)."""
    z = 2.0 * rows[:, 0] - rows[:, 1] + 1.5 * rows[:, 0] * rows[:, 2]
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def test_permutations_are_antithetic_pairs_of_every_feature() -> None:
    perms = permutations(5, 4, seed=3)
    assert perms.shape == (4, 5)
    for perm in perms:
        assert sorted(perm.tolist()) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(perms[1], perms[0][::-1])
    np.testing.assert_array_equal(perms[3], perms[2][::-1])
    np.testing.assert_array_equal(permutations(5, 4, seed=3), perms)  # reproducible
    with pytest.raises(ValueError, match="at least one permutation"):
        permutations(5, 0, seed=1)


def test_path_inputs_switch_one_feature_per_step_in_permutation_order() -> None:
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    baseline = np.zeros(3, dtype=np.float32)
    rows = path_inputs(x, baseline, np.array([[2, 0, 1]]))
    np.testing.assert_array_equal(rows, [[0, 0, 0], [0, 0, 3], [1, 0, 3], [1, 2, 3]])


def test_the_pipeline_model_builds_the_same_path_rows_as_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    """templates/ensemble_model.py (explanations inside Triton) and path_inputs (the gateway) agree row for row."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    spec = importlib.util.spec_from_file_location("ensemble_model", TEMPLATES_DIR / "ensemble_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 9)).astype(np.float32)
    x[1, 3] = np.nan  # unknown values travel as they are scored
    baseline = rng.normal(size=9).astype(np.float32)
    perms = permutations(9, 4, seed=11)
    np.testing.assert_array_equal(module.path_rows(x, baseline, ranks_of(perms)), path_inputs(x, baseline, perms))
    assert ranks_of(np.array([[2, 0, 1]])).tolist() == [[1, 2, 0]]


def test_contributions_add_up_to_score_minus_baseline_for_any_model() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((6, 4)).astype(np.float32)
    x[2, 1] = np.nan  # an unknown feature travels as NaN, as scored
    x = np.nan_to_num(x, nan=0.0)  # the toy model has no imputation
    baseline = np.full(4, 0.5, dtype=np.float32)
    perms = permutations(4, 6, seed=1)
    c = contributions(score(path_inputs(x, baseline, perms)), 6, perms)
    assert additivity_error(c, score(x)) < ADDITIVITY_TOLERANCE
    np.testing.assert_allclose(c.baseline_scores, score(baseline[None, :])[0], atol=1e-7)
    np.testing.assert_allclose(c.values[:, 3], 0.0, atol=1e-12)  # a feature the model ignores gets nothing


def test_with_every_permutation_it_is_the_exact_shapley_value() -> None:
    from itertools import permutations as all_orders

    x = np.array([[0.9, 0.1, 0.8, 0.3]], dtype=np.float32)
    baseline = np.full(4, 0.5, dtype=np.float32)
    perms = np.array(list(all_orders(range(4))))
    exact = contributions(score(path_inputs(x, baseline, perms)), 1, perms).values[0]
    sampled = contributions(score(path_inputs(x, baseline, permutations(4, 8, seed=2))), 1,
                            permutations(4, 8, seed=2)).values[0]
    assert np.argmax(np.abs(exact)) == 0 == np.argmax(np.abs(sampled))
    np.testing.assert_allclose(sampled, exact, atol=0.02)
    # a linear model's Shapley value is w * (x - b), whatever the permutations
    def linear(rows: np.ndarray) -> np.ndarray:
        return (rows @ np.array([1.0, -2.0, 0.5, 0.0])).astype(np.float32)

    one = permutations(4, 1, seed=9)
    values = contributions(linear(path_inputs(x, baseline, one)), 1, one).values[0]
    np.testing.assert_allclose(values, [0.4, 0.8, 0.15, 0.0], atol=1e-6)


def test_contributions_refuse_a_wrong_number_of_scores() -> None:
    with pytest.raises(ValueError, match="7 scores for 1 items x 1 permutations x 4 steps"):
        contributions(np.zeros(7, dtype=np.float32), 1, permutations(3, 1, seed=0))


def test_top_features_and_reason() -> None:
    names = ["user_click_rate_7d", "item_price", "item_age"]
    top = top_features(np.array([0.31, -0.40, 0.31]), np.array([0.82, np.nan, 3.0], dtype=np.float32),
                       np.array([0.45, 12.5, 2.0], dtype=np.float32), names, 2)
    assert [t.feature for t in top] == ["item_price", "user_click_rate_7d"]  # |-0.40| first; ties: feature order
    assert math.isnan(top[0].value) and top[1].contribution == pytest.approx(0.31)
    assert top_reason(top) == "item_price=missing (baseline 12.5)"
    assert top_reason([Contribution("user_click_rate_7d", 0.82, 0.45, 0.2)]) == \
        "user_click_rate_7d=0.82 (baseline 0.45)"
    assert top_reason([]) == "no feature contributes"


def test_the_baseline_is_the_mean_of_the_snapshots_users_and_items_per_feature() -> None:
    from modelops.example.tables import FeatureLookup
    from modelops.gateway.lookup.onlinefeatures import LoadedSnapshot
    from modelops.gateway.testing import feature_tables

    users, items = feature_tables(n_users=20, n_items=30)  # user row 3 has one NaN
    snapshot = LoadedSnapshot.prepare("s1", FeatureLookup.from_frames(users, items), 0.0, 0.0)
    by_name = dict(zip(snapshot.lookup.names, snapshot.baseline, strict=True))
    for column in users.columns[1:]:
        assert by_name[column] == pytest.approx(float(users[column].mean(skipna=True)), rel=1e-6)
    for column in items.columns[1:]:
        assert by_name[column] == pytest.approx(float(items[column].mean()), rel=1e-6)
    assert snapshot.baseline.dtype == np.float32 and not np.isnan(snapshot.baseline).any()


class _Pipeline:
    """A Triton stand-in for the orchestration only: a pipeline whose config declares the explanation inputs.
    ``inside`` is what the call inside answers: an error message, or "skewed" path scores (another engine)."""

    def __init__(self, inside: str) -> None:
        self.inside = inside
        self.inside_calls = 0
        self.rows_scored = 0

    async def version_config(self, model: str, version: int) -> dict[str, object]:
        return {"max_batch_size": 64, "input": [{"name": "features"}, {"name": "explain_baseline"},
                                                {"name": "explain_ranks"}]}

    async def infer_output(self, model: str, version: int, inputs: tuple[tuple[str, np.ndarray], ...],
                           output: str) -> np.ndarray:
        self.inside_calls += 1
        if self.inside != "skewed":
            raise TritonFailed(self.inside)
        x, baseline, ranks = (array for _, array in inputs)
        return score(path_inputs(x, baseline[0], np.argsort(ranks[0].reshape(-1, x.shape[1]), axis=1))) + 0.01

    async def infer_scores(self, model: str, version: int, rows: np.ndarray) -> np.ndarray:
        assert len(rows) <= 64
        self.rows_scored += len(rows)
        return score(rows)


def explain_twice(triton: _Pipeline, plans: dict[tuple[str, int], ExplainPlan]) -> None:
    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    for request in ("r1", "r2"):
        found = asyncio.run(explain_items(triton, plans, np.zeros(4, np.float32), list("abcd"),  # type: ignore[arg-type]
                                          "p", 1, ["i1", "i2", "i3"], x, score(x), 2, request, n_permutations=2,
                                          concurrency=4))
        assert [f["score"] for f in found] == [float(s) for s in score(x)]
        assert all(abs(f["baseline_score"] + sum(c["contribution"] for c in f["feature_contributions"])
                       + f["other_features_contribution"] - f["score"]) <= ADDITIVITY_TOLERANCE for f in found)


PATHS_OF_TWO = 2 * 3 * 2 * 5  # requests x items x permutations x (d + 1)


@pytest.mark.parametrize("answer", ["Triton p v1: HTTP 500: version 1: no in-model explanation: no such file",
                                    "Triton p v1: HTTP 400: unexpected inference output 'path_score'",
                                    "Triton p v1: malformed answer ()"])
def test_a_version_that_cannot_explain_inside_is_explained_by_its_paths_from_then_on(answer: str) -> None:
    triton, plans = _Pipeline(answer), {}
    explain_twice(triton, plans)
    assert triton.inside_calls == 1 and plans[("p", 1)] == ExplainPlan(64, in_model=False)
    assert triton.rows_scored == PATHS_OF_TWO


@pytest.mark.parametrize("answer", ["Triton p v1: HTTP 500: onnxruntime ran out of memory", "skewed"])
def test_a_passing_failure_or_a_miss_inside_scores_that_requests_paths_only(answer: str) -> None:
    triton, plans = _Pipeline(answer), {}
    explain_twice(triton, plans)  # additive all the same: the steps' own scores decided
    assert triton.inside_calls == 2 and plans[("p", 1)] == ExplainPlan(64, in_model=True)
    assert triton.rows_scored == PATHS_OF_TWO
