"""explain=true for models served from their spec: baselines in the spec, the explained column, exact contributions."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from modelops.gateway.explain.spec import explain_problem, explain_rows, explained_columns
from modelops.gateway.protocol.forms import edge_model
from modelops.modelspec.baselines import baseline_row, feature_matrix, with_baselines
from modelops.modelspec.spec import ModelSpec


def _spec(outputs: int = 1, dtype: str = "FP32", **extra: Any) -> ModelSpec:
    return ModelSpec.from_dict({
        "name": "m", "flavor": "sklearn",
        "inputs": [{"name": "input", "dtype": dtype, "shape": [-1, 3]}],
        "outputs": [{"name": "out", "dtype": dtype, "shape": [-1, outputs]}],
        "features": [{"name": f"f {i}", "dtype": "FP64"} for i in range(3)], **extra,
    })


def test_baselines_are_the_sample_means_unless_declared() -> None:
    spec = _spec()
    declared = ModelSpec.from_dict({**spec.to_dict(), "features": [
        {"name": "f 0", "dtype": "FP64", "baseline": 10.0}, {"name": "f 1", "dtype": "FP64"},
        {"name": "f 2", "dtype": "FP64"}]})
    sample = {"input": np.array([[1.0, 2.0, np.nan], [3.0, 4.0, np.nan]])}
    assert baseline_row(spec) is None and feature_matrix(spec) is not None
    assert [f.baseline for f in with_baselines(spec, sample).features] == [2.0, 3.0, None]  # an empty column: none
    assert [f.baseline for f in with_baselines(declared, sample).features] == [10.0, 3.0, None]
    full = with_baselines(spec, {"input": np.array([[1.0, 2.0, 5.0]])})
    np.testing.assert_array_equal(baseline_row(full), [1.0, 2.0, 5.0])
    assert with_baselines(spec, {}) is spec
    assert ModelSpec.from_json(full.to_json()) == full  # stored and read back in model-spec.json


def test_what_can_be_explained_and_why_not() -> None:
    assert "no explain baseline" in (explain_problem(edge_model(_spec())) or "")
    ready = with_baselines(_spec(), {"input": np.ones((2, 3))})
    assert explain_problem(edge_model(ready)) is None
    tensors = ModelSpec.from_dict({"name": "t", "flavor": "onnx",
                                   "inputs": [{"name": "x", "dtype": "FP32", "shape": [-1, 8]},
                                              {"name": "ids", "dtype": "INT64", "shape": [-1, 1]}],
                                   "outputs": [{"name": "y", "dtype": "FP32", "shape": [-1, 1]}]})
    assert "one numeric input tensor" in (explain_problem(edge_model(tensors)) or "")
    np.testing.assert_array_equal(explained_columns(np.array([[0.2, 0.8], [0.9, 0.1]])), [1, 0])
    np.testing.assert_array_equal(explained_columns(np.array([[3.0], [4.0]])), [0, 0])


class _Linear:
    """Scores rows as Triton would a linear model (for the pure code's unit test), counting its calls."""

    def __init__(self, weights: np.ndarray, softmax: bool = False) -> None:
        self.weights, self.softmax, self.calls, self.largest = weights, softmax, 0, 0

    def score(self, x: np.ndarray) -> np.ndarray:
        z = x.astype(np.float64) @ self.weights
        if self.softmax:
            e = np.exp(z - z.max(axis=1, keepdims=True))
            z = e / e.sum(axis=1, keepdims=True)
        return z.astype(np.float32)

    async def infer_tensors(self, model: str, version: int, inputs: Any, outputs: Any) -> dict[str, np.ndarray]:
        ((_, x),) = inputs
        self.calls += 1
        self.largest = max(self.largest, len(x))
        return {outputs[0]: self.score(x)}


def test_a_linear_model_gets_its_exact_contributions_in_batches_of_its_max_batch_size() -> None:
    weights = np.array([[2.0], [-1.0], [0.5]])
    spec = with_baselines(_spec(tuning={"max_batch_size": 8, "dynamic_batching": None}), {"input": np.zeros((1, 3))})
    triton, x = _Linear(weights), np.array([[1.0, 2.0, 4.0], [0.5, 0.0, -2.0]], dtype=np.float32)
    found = asyncio.run(explain_rows(triton, edge_model(spec), 1, x, triton.score(x), 2, "r1", n_permutations=2,
                                     concurrency=4))
    assert triton.largest <= 8 and triton.calls == 2  # 2 rows x 2 permutations x 4 steps = 16 rows
    first = found[0]
    assert [c["feature"] for c in first["feature_contributions"]] == ["f 0", "f 1"]  # |2|, |-2| then |2|: order
    assert [c["contribution"] for c in first["feature_contributions"]] == pytest.approx([2.0, -2.0])
    assert first["other_features_contribution"] == pytest.approx(2.0) and first["baseline_score"] == 0.0
    assert first["score"] == pytest.approx(2.0) and "class" not in first
    assert found[1]["score"] == pytest.approx(0.0) and found[1]["row"] == 1


def test_a_classifier_is_explained_for_its_predicted_class_and_adds_up() -> None:
    weights = np.array([[1.0, -1.0], [0.5, 0.2], [-0.3, 0.4]])
    spec = with_baselines(_spec(outputs=2), {"input": np.array([[0.1, 0.2, 0.3]])})
    triton, x = _Linear(weights, softmax=True), np.array([[2.0, 0.0, 0.0], [-2.0, 1.0, 1.0]], dtype=np.float32)
    probabilities = triton.score(x)
    found = asyncio.run(explain_rows(triton, edge_model(spec), 1, x, probabilities, 3, "r2", n_permutations=4,
                                     concurrency=2))
    for i, item in enumerate(found):
        assert item["class"] == int(np.argmax(probabilities[i]))
        total = item["baseline_score"] + sum(c["contribution"] for c in item["feature_contributions"])
        assert total + item["other_features_contribution"] == pytest.approx(probabilities[i][item["class"]],
                                                                             abs=1e-5)
