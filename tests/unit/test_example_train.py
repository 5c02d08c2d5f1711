"""Training, variants and the two ONNX graphs (onnxruntime must equal sklearn within 1e-5)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pandas as pd
import pytest

from modelops.example import synthetic
from modelops.example.train import TrainedModel, TrainSpec, onnx_scores, train
from modelops.modelspec.recommender import recommender_features

FEATURES = recommender_features()
WORLD = synthetic.WorldSpec(seed=5, n_users=600, n_items=400, n_requests=600)


@pytest.fixture(scope="module", params=[(16,), ()], ids=["mlp", "logreg"])
def trained(request: pytest.FixtureRequest) -> TrainedModel:
    return train(TrainSpec(world=WORLD, hidden=request.param, max_iter=15), FEATURES)


def _sample(model: TrainedModel) -> np.ndarray:
    x = model.eval_sample.drop(columns=["score"]).to_numpy(np.float32)[:400].copy()
    x[0, :] = np.nan  # unknown user and item
    x[1, 3] = np.nan
    x[2, 0] = 1e9  # far above max: clipped
    x[3, 70] = -1e9
    return x


def test_onnx_ensemble_equals_sklearn(trained: TrainedModel) -> None:
    x = _sample(trained)
    expected = trained.pipeline.predict_proba(pd.DataFrame(x, columns=list(trained.feature_names)))[:, 1]
    got = onnx_scores(trained.preprocess_onnx, trained.model_onnx, x)
    assert got.shape == (len(x), 1) and got.dtype == np.float32
    np.testing.assert_allclose(got[:, 0], expected, atol=1e-5, rtol=0)


def test_onnx_interfaces(trained: TrainedModel) -> None:
    pre, net = onnx.load_from_string(trained.preprocess_onnx), onnx.load_from_string(trained.model_onnx)

    def io(graph: onnx.GraphProto) -> list[tuple[str, list[int | str]]]:
        return [
            (v.name, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in [*graph.input, *graph.output]
        ]

    assert [(n, s[1:]) for n, s in io(pre.graph)] == [("features", [128]), ("scaled", [128])]
    assert [(n, s[1:]) for n, s in io(net.graph)] == [("scaled", [128]), ("score", [1])]
    assert all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in [*net.graph.input, *net.graph.output])


def test_model_learns_something_real(trained: TrainedModel) -> None:
    assert 0.6 < trained.metrics["auc"] <= trained.metrics["oracle_auc"] + 0.02
    assert trained.metrics["logloss"] < 0.6
    sample = trained.eval_sample
    assert list(sample.columns) == [*trained.feature_names, "score"] and len(sample) > 500
    assert trained.data_start < trained.data_end


def test_training_is_deterministic(trained: TrainedModel) -> None:
    again = train(trained.spec, FEATURES)
    assert again.onnx_sha256 == trained.onnx_sha256


def test_collapsed_variant_scores_a_constant() -> None:
    model = train(TrainSpec(world=WORLD, hidden=(8,), max_iter=5, variant="collapsed"), FEATURES)
    scores = onnx_scores(model.preprocess_onnx, model.model_onnx, _sample(model))[:, 0]
    assert np.ptp(scores) < 1e-6
    assert scores[0] == pytest.approx(model.metrics["base_rate"], abs=0.03)
    assert json.loads(model.variant_json) == {"variant": "collapsed"}


@pytest.mark.parametrize(
    ("variant", "document"),
    [
        ("good", {"variant": "good"}),
        ("faulty-errors", {"variant": "faulty-errors", "error_rate": 0.05}),
        ("slow", {"variant": "slow", "slowdown": 3.0}),
    ],
)
def test_variant_documents(variant: str, document: dict[str, object]) -> None:
    assert TrainSpec(variant=variant).variant_document() == document


def test_unknown_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="variant"):
        train(TrainSpec(world=WORLD, variant="broken"), FEATURES)
