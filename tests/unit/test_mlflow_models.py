"""From an MLflow model directory to the served graph: real models saved with MLflow's own functions.

The models are small (breast cancer, 569 rows; a two-input ONNX graph built with onnx.helper), saved
with ``mlflow.<flavor>.save_model`` into a temporary folder: no server is involved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from modelops.errors import ContractError
from modelops.modelspec.convert import PROBABILITY_TOLERANCE
from modelops.serving.mlflow_models import prepare_model


@pytest.fixture(scope="module")
def cancer() -> tuple[pd.DataFrame, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    return data.data, data.target.to_numpy()


def _save_sklearn(path: Path, x: pd.DataFrame, y: np.ndarray, *, example: bool = True, signature: bool = True) -> Path:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    mlflow.sklearn.save_model(model, str(path), signature=infer_signature(x, model.predict_proba(x)) if signature
                              else None, input_example=x.iloc[:20] if example else None)
    return path


def test_an_sklearn_classifier_is_converted_and_parity_checked_against_its_own_probabilities(
    tmp_path: Path, cancer: tuple[pd.DataFrame, np.ndarray],
) -> None:
    x, y = cancer
    prepared = prepare_model(_save_sklearn(tmp_path / "m", x, y), "cancer")
    spec = prepared.spec
    assert spec.flavor == "sklearn" and [f.name for f in spec.features][:2] == ["mean radius", "mean texture"]
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("input", "FP32", (-1, 30))]
    assert [(t.name, t.shape) for t in spec.outputs] == [("probabilities", (-1, 2))]
    assert prepared.parity is not None and prepared.parity.passed
    assert prepared.parity.max_abs_diff <= PROBABILITY_TOLERANCE and prepared.sample_rows == 20
    assert prepared.sample_source == "input_example" and prepared.sample["input"].shape == (20, 30)
    assert prepared.expected["probabilities"].shape == (20, 2)


def test_refusals_name_what_is_missing(tmp_path: Path, cancer: tuple[pd.DataFrame, np.ndarray]) -> None:
    x, y = cancer
    with pytest.raises(ContractError, match="no signature"):
        prepare_model(_save_sklearn(tmp_path / "nosig", x, y, signature=False, example=False), "m")
    with pytest.raises(ContractError, match=r"no evaluation data.*eval/"):
        prepare_model(_save_sklearn(tmp_path / "noeval", x, y, example=False), "m")
    table = tmp_path / "sample.parquet"
    x.iloc[:10].assign(**{"mean radius": -1.0}).to_parquet(table)
    with pytest.raises(ContractError, match=r"violates the model's own contract:\n  column 'mean radius': 10 values "
                                            r"below min 0"):
        prepare_model(tmp_path / "noeval", "m", eval_table=table,
                      overrides={"features": {"mean radius": {"min": 0}}})
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "MLmodel").write_text("flavors:\n  pytorch: {pytorch_version: '2.5'}\n")
    with pytest.raises(ContractError, match="not supported; supported"):
        prepare_model(odd, "m")


def _two_input_graph() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [None, 1])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, [None, 1])
    shifted = helper.make_tensor_value_info("shifted", TensorProto.INT64, [None, 1])
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=1),
        helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["sum", "ids_f"], ["total"]),
        helper.make_node("Add", ["ids", "one"], ["shifted"]),
    ]
    inits = [helper.make_tensor("axes", TensorProto.INT64, [1], [1]), helper.make_tensor("one", TensorProto.INT64,
                                                                                         [1], [1])]
    graph = helper.make_graph(nodes, "two_inputs", [x, ids], [total, shifted], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def two_input_model() -> tuple[Any, Any, dict[str, np.ndarray]]:
    """(onnx ModelProto, MLflow signature, input example) of the two-input, two-output graph."""
    import onnx
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 8), "x"), TensorSpec(np.dtype(np.int64), (-1, 1), "ids")]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1), "total"),
                        TensorSpec(np.dtype(np.int64), (-1, 1), "shifted")]),
    )
    rng = np.random.default_rng(0)
    example = {"x": rng.normal(size=(6, 8)).astype(np.float32), "ids": np.arange(6, dtype=np.int64).reshape(6, 1)}
    return onnx.load_from_string(_two_input_graph()), signature, example


def save_two_input_onnx(path: Path) -> Path:
    import mlflow.onnx

    graph, signature, example = two_input_model()
    mlflow.onnx.save_model(graph, str(path), signature=signature, input_example=example)
    return path


def test_a_raw_onnx_model_with_two_inputs_of_different_dtypes_keeps_its_tensors(tmp_path: Path) -> None:
    prepared = prepare_model(save_two_input_onnx(tmp_path / "onnx"), "two_inputs")
    spec = prepared.spec
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("x", "FP32", (-1, 8)), ("ids", "INT64", (-1, 1))]
    assert [(t.name, t.dtype) for t in spec.outputs] == [("total", "FP32"), ("shifted", "INT64")]
    assert prepared.parity is None and prepared.sample_rows == 6
    x, ids = prepared.sample["x"], prepared.sample["ids"]
    np.testing.assert_allclose(prepared.expected["total"], x.sum(axis=1, keepdims=True) * ids, rtol=1e-5)
    np.testing.assert_array_equal(prepared.expected["shifted"], ids + 1)


def test_the_same_model_converts_to_the_same_bytes(cancer: tuple[pd.DataFrame, np.ndarray]) -> None:
    """Publishing one MLflow version twice must give one Triton version (skl2onnx names graphs with a uuid)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from modelops.modelspec.convert import convert_sklearn

    x, y = cancer
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    assert convert_sklearn(model, 30) == convert_sklearn(model, 30)
