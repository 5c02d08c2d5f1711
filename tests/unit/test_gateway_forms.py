"""The edge's request forms (pure): MLflow's scoring bodies and the Open Inference Protocol against a spec."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from modelops.gateway.protocol.forms import BadInput, edge_model, predictions, summary, tabular_inputs
from modelops.gateway.protocol.oip import infer_answer, model_metadata, parse_infer
from modelops.modelspec.spec import Feature, ModelSpec, Request, Tensor

COLUMNS = ("age", "income", "visits")


def _columns_spec(**changes: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "churn", "flavor": "sklearn",
        "inputs": (Tensor(name="input", dtype="FP32", shape=(-1, 3)),),
        "outputs": (Tensor(name="probabilities", dtype="FP32", shape=(-1, 2)),),
        "features": (Feature(name="age", dtype="FP64", min=0, max=130),
                     Feature(name="income", dtype="FP64", required=False, not_null_mostly=None),
                     Feature(name="visits", dtype="FP64")),
        "request": Request(form="tabular", max_items=4), "routing_key": "age"}
    fields.update(changes)
    return ModelSpec(**fields)


def _tensor_spec() -> ModelSpec:
    return ModelSpec(name="two", flavor="onnx",
                     inputs=(Tensor(name="x", dtype="FP32", shape=(-1, 2)), Tensor(name="ids", dtype="INT64",
                                                                                   shape=(-1, 1))),
                     outputs=(Tensor(name="total", dtype="FP32", shape=(-1, 1)),))


ROWS = [[30.0, 1000.0, 3.0], [40.0, None, 5.0]]


@pytest.mark.parametrize("body", [
    {"dataframe_split": {"columns": list(COLUMNS), "data": ROWS}},
    {"dataframe_records": [dict(zip(COLUMNS, r, strict=True)) for r in ROWS]},
    {"instances": [dict(zip(COLUMNS, r, strict=True)) for r in ROWS]},
    {"inputs": [dict(zip(COLUMNS, r, strict=True)) for r in ROWS]},
    {"inputs": {c: [r[i] for r in ROWS] for i, c in enumerate(COLUMNS)}},
], ids=["split", "records", "instances", "inputs-records", "inputs-columns"])
def test_every_mlflow_body_gives_the_same_matrix(body: dict[str, Any]) -> None:
    model = edge_model(_columns_spec())
    assert model.check(body, "$") is None
    inputs, rows, key = tabular_inputs(model, body)
    ((name, matrix),) = inputs
    assert name == "input" and matrix.dtype == np.float32 and rows == 2 and key == "30.0"
    np.testing.assert_array_equal(matrix, np.array([[30, 1000, 3], [40, np.nan, 5]], dtype=np.float32))


@pytest.mark.parametrize(("body", "field", "rule"), [
    ({"dataframe_records": [{"age": 30, "visits": 1}, {"age": 31}]}, "visits", "required"),
    ({"dataframe_records": [{"age": 30, "income": 1, "visits": 1, "zip": 1}]}, "zip", "additionalProperties"),
    ({"dataframe_records": [{"age": "old", "income": 1, "visits": 1}]}, "age", "type"),
    ({"dataframe_records": [{"age": None, "income": 1, "visits": 1}]}, "age", "type"),
    ({"dataframe_records": [{"age": 200, "income": 1, "visits": 1}]}, "age", "maximum"),
    ({"dataframe_records": [{"age": 1, "income": 1, "visits": 1}] * 5}, "dataframe_records", "maxItems"),
])
def test_the_contract_names_the_column_and_the_rule(body: dict[str, Any], field: str, rule: str) -> None:
    violation = edge_model(_columns_spec()).check(body, "$")
    assert violation is not None
    assert field in violation.field or field in violation.message, violation
    assert rule in violation.rule, violation


def test_columns_of_different_lengths_and_tensor_bodies() -> None:
    model = edge_model(_columns_spec())
    with pytest.raises(BadInput, match="different lengths"):
        tabular_inputs(model, {"inputs": {"age": [1, 2], "income": [1], "visits": [1, 2]}})
    tensors = edge_model(_tensor_spec())
    inputs, rows, key = tabular_inputs(tensors, {"inputs": {"x": [[1, 2], [3, 4]], "ids": [[1], [2]]}})
    assert rows == 2 and key is None and dict(inputs)["ids"].dtype == np.int64
    inputs, rows, _ = tabular_inputs(tensors, {"instances": [{"x": [1, 2], "ids": [7]}]})
    assert rows == 1 and dict(inputs)["x"].shape == (1, 2)
    with pytest.raises(BadInput, match="different first dimensions"):
        tabular_inputs(tensors, {"inputs": {"x": [[1, 2], [3, 4]], "ids": [[1]]}})


def test_predictions_have_mlflow_shapes() -> None:
    assert predictions({"p": np.array([[0.2, 0.8]])}) == [[pytest.approx(0.2), pytest.approx(0.8)]]
    assert predictions({"y": np.array([[1.5], [2.5]])}) == [1.5, 2.5]
    assert predictions({"a": np.array([[1]]), "b": np.array([[2, 3]])}) == {"a": [1], "b": [[2, 3]]}
    # A binary classifier's score is its positive-class column: a constant answer has no spread.
    n, total, _squares, peak, std = summary({"p": np.array([[0.3, np.nan], [0.2, 0.8], [0.1, 0.9]])})
    assert (n, total, peak) == (2.0, pytest.approx(1.7), 0.9) and std == pytest.approx(np.std([0.8, 0.9]))
    assert summary({"p": np.array([[0.37, 0.63]] * 4)})[4] == 0.0
    # a regressor's values as they are; a multiclass classifier's largest probability per row
    assert summary({"y": np.array([[1.0], [3.0]])})[:2] == (2.0, 4.0)
    assert summary({"p": np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])})[3] == pytest.approx(0.6)


def _oip(**tensor: Any) -> dict[str, Any]:
    base = {"name": "input", "datatype": "FP32", "shape": [2, 3], "data": [30, 1, 3, 40, 2, 5]}
    return {"inputs": [{**base, **tensor}]}


@pytest.mark.parametrize(("document", "named"), [
    (_oip(datatype="FP64"), "datatype"),
    (_oip(shape=[2, 4]), "shape"),
    (_oip(data=[1, 2]), "values"),
    (_oip(data=[True] * 6), "kind"),
    (_oip(shape=[5, 3], data=[1] * 15), "more than"),
    (_oip(data=[300, 1, 3, 40, 2, 5]), "maximum"),
    ({"inputs": []}, "missing"),
    ({"inputs": [_oip()["inputs"][0], {"name": "extra"}]}, "'extra'"),
    ({**_oip(), "outputs": [{"name": "nope"}]}, "outputs"),
    ({"inputs": "x"}, "inputs"),
])
def test_oip_refusals_name_the_input_and_the_rule(document: dict[str, Any], named: str) -> None:
    with pytest.raises(BadInput, match=named):
        parse_infer(edge_model(_columns_spec()), document)


def test_oip_binary_tensors_and_answers() -> None:
    model = edge_model(_columns_spec())
    matrix = np.array([[30, 1, 3], [40, 2, 5]], dtype=np.float32)
    document = {"id": "r1", "inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 3],
                                        "parameters": {"binary_data_size": matrix.nbytes}}],
                "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}]}
    request = parse_infer(model, document, matrix.tobytes())
    np.testing.assert_array_equal(request.inputs[0][1], matrix)
    assert request.outputs == (("probabilities", True),) and request.key_value == "30.0" and request.rows == 2
    with pytest.raises(BadInput, match="binary_data_size"):
        parse_infer(model, document, matrix.tobytes()[:8])
    out = np.array([[0.1, 0.9], [0.7, 0.3]], dtype=np.float32)
    body, length = infer_answer("churn", 3, request, {"probabilities": out}, {"feedback_token": "t"})
    assert length is not None
    header = json.loads(body[:length])
    assert header["id"] == "r1" and header["model_version"] == "3" and header["parameters"] == {"feedback_token": "t"}
    np.testing.assert_array_equal(np.frombuffer(body[length:], dtype=np.float32).reshape(2, 2), out)
    plain = parse_infer(model, _oip())
    body, length = infer_answer("churn", 3, plain, {"probabilities": out}, {})
    assert length is None and json.loads(body)["outputs"][0]["data"] == pytest.approx(out.reshape(-1).tolist())
    assert model_metadata(model.spec, [3, 4])["versions"] == ["3", "4"]


def test_the_recommender_takes_its_feature_vectors_on_the_open_inference_protocol() -> None:
    from modelops.modelspec.recommender import recommender_spec

    model = edge_model(recommender_spec("rec"))
    assert not model.tabular and model.max_rows == 50
    features = np.zeros((2, 128), dtype=np.float32)
    request = parse_infer(model, {"inputs": [{"name": "features", "datatype": "FP32", "shape": [2, 128],
                                              "data": features.reshape(-1).tolist()}]})
    assert request.outputs == (("score", False),) and request.inputs[0][1].shape == (2, 128)


def test_a_number_the_tensor_cannot_hold_is_refused_not_wrapped() -> None:
    tensors = edge_model(_tensor_spec())
    with pytest.raises(BadInput, match="outside the range of int64"):
        tabular_inputs(tensors, {"inputs": {"x": [[1, 2]], "ids": [[2**70]]}})
    with pytest.raises(BadInput, match="outside the range of float32"):
        tabular_inputs(tensors, {"inputs": {"x": [[1e308, 2]], "ids": [[1]]}})
    with pytest.raises(BadInput, match="range of FP32"):
        parse_infer(edge_model(_columns_spec()), _oip(data=[1e308, 1, 3, 40, 2, 5]))
