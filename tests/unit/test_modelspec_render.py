"""Renderers on specs derived from real MLflow models: edge contract, config.pbtxt / JSON, gate, drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from modelops.errors import ContractError
from modelops.modelspec import render
from modelops.modelspec.derive import derive_spec
from modelops.modelspec.spec import ModelSpec
from modelops.serving.pbtxt import config_mismatches
from tests.unit.modelspec_models import breast_cancer_frame, save_onnx_two_inputs, save_sklearn_classifier


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    save_sklearn_classifier(root / "clf")
    save_onnx_two_inputs(root / "onnx")
    return root


@pytest.fixture(scope="module")
def cancer(models: Path) -> ModelSpec:
    return derive_spec(models / "clf", "cancer", {
        "features": {"mean radius": {"min": 0, "max": 50}, "mean texture": {"required": False}},
        "request": {"max_items": 10}})


def _validator(schema: dict[str, Any]) -> Any:
    return jsonschema_rs.Draft202012Validator(schema)


def test_tabular_contract_accepts_mlflows_scoring_bodies(cancer: ModelSpec) -> None:
    x, _ = breast_cancer_frame(rows=3)
    v = _validator(render.edge_contract(cancer))
    split = json.loads(x.to_json(orient="split"))
    records = json.loads(x.to_json(orient="records"))
    columns = {k: list(col.values()) for k, col in json.loads(x.to_json(orient="columns")).items()}
    for body in ({"dataframe_split": split}, {"dataframe_records": records}, {"instances": records},
                 {"inputs": records}, {"inputs": columns}):
        assert v.is_valid(body), (list(body), [e.message for e in v.iter_errors(body)][:3])


def test_tabular_contract_refuses_bad_bodies(cancer: ModelSpec) -> None:
    x, _ = breast_cancer_frame(rows=12)
    v = _validator(render.edge_contract(cancer))
    records = json.loads(x.to_json(orient="records"))
    assert v.is_valid({"dataframe_records": records[:10]})
    assert not v.is_valid({"dataframe_records": records})  # 12 rows > max_items 10
    assert not v.is_valid({"dataframe_records": records[:2], "instances": records[:2]})  # two bodies
    assert not v.is_valid({})
    assert not v.is_valid({"dataframe_records": [{**records[0], "mean radius": 51.0}]})  # out of range
    assert not v.is_valid({"dataframe_records": [{**records[0], "mean radius": "12"}]})  # wrong type
    assert not v.is_valid({"dataframe_records": [{**records[0], "extra": 1}]})
    missing = {k: val for k, val in records[0].items() if k != "mean area"}
    assert not v.is_valid({"dataframe_records": [missing]})
    assert v.is_valid({"dataframe_records": [{**records[0], "mean texture": None}]})  # not required: nullable
    split = json.loads(x.iloc[:2].to_json(orient="split"))
    swapped = {**split, "columns": [split["columns"][1], split["columns"][0], *split["columns"][2:]]}
    assert not v.is_valid({"dataframe_split": swapped})  # columns in the signature's order
    assert not v.is_valid({"dataframe_split": {**split, "data": [row[:-1] for row in split["data"]]}})


def test_tabular_contract_types_by_dtype(models: Path) -> None:
    spec = derive_spec(models / "clf", "cancer")
    props = render.edge_contract(spec)["properties"]
    assert set(props) == {"dataframe_split", "dataframe_records", "instances", "inputs"}
    row = props["dataframe_records"]["items"]
    assert row["properties"]["mean radius"] == {"type": "number"}
    assert len(row["required"]) == 30
    assert props["dataframe_split"]["properties"]["columns"]["const"][0] == "mean radius"


def test_tensor_contract_of_the_two_input_onnx_model(models: Path) -> None:
    spec = derive_spec(models / "onnx", "ranker")
    schema = render.edge_contract(spec)
    assert set(schema["properties"]) == {"inputs", "instances"}
    v = _validator(schema)
    assert v.is_valid({"inputs": {"dense": [[0.5] * 8, [1.0] * 8], "bucket": [[1], [2]]}})
    assert v.is_valid({"instances": [{"dense": [0.5] * 8, "bucket": [3]}]})
    assert not v.is_valid({"inputs": {"dense": [[0.5] * 7], "bucket": [[1]]}})  # 7 != 8
    assert not v.is_valid({"inputs": {"dense": [[0.5] * 8], "bucket": [[1.5]]}})  # INT64 takes integers
    assert not v.is_valid({"inputs": {"dense": [[0.5] * 8]}})


def test_config_of_the_two_input_onnx_model(models: Path) -> None:
    spec = derive_spec(models / "onnx", "ranker", {"tuning": {
        "max_batch_size": 32, "dynamic_batching": {"max_queue_delay_us": 500, "preferred_batch_size": [16]},
        "instance_group": {"kind": "gpu", "count": 2, "gpus": [0, 1]}}})
    text = render.config_pbtxt(spec, versions=(7,))
    assert text.splitlines()[1:] == [
        'name: "ranker"', 'backend: "onnxruntime"', "max_batch_size: 32",
        "input [", "  {", '    name: "dense"', "    data_type: TYPE_FP32", "    dims: [ 8 ]", "  },",
        "  {", '    name: "bucket"', "    data_type: TYPE_INT64", "    dims: [ 1 ]", "  }", "]",
        "output [", "  {", '    name: "score"', "    data_type: TYPE_FP32", "    dims: [ 1 ]", "  },",
        "  {", '    name: "bucket_out"', "    data_type: TYPE_INT64", "    dims: [ 1 ]", "  }", "]",
        "dynamic_batching {", "  preferred_batch_size: [ 16 ]", "  max_queue_delay_microseconds: 500", "}",
        "instance_group [ { kind: KIND_GPU, count: 2, gpus: [ 0, 1 ] } ]",
        "version_policy: { specific: { versions: [ 7 ] } }",
    ]
    doc = render.config_json(spec, versions=(7,))
    assert doc["instance_group"] == [{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}]
    # Triton reports int64 fields as strings; the existing comparison reads them as numbers
    reported = json.loads(json.dumps(doc).replace('"dims": [8]', '"dims": ["8"]'))
    assert config_mismatches(doc, reported) == []
    reported["input"][1]["data_type"] = "TYPE_INT32"
    assert config_mismatches(doc, reported) == [
        'input bucket.data_type: rendered "TYPE_INT64", Triton reports "TYPE_INT32"']


def test_config_without_batching_keeps_the_full_shape(models: Path) -> None:
    spec = derive_spec(models / "clf", "cancer", {"tuning": {"max_batch_size": 0, "dynamic_batching": None},
                                                  "flavor": "pyfunc"})
    text = render.config_pbtxt(spec)
    assert 'backend: "python"' in text and "max_batch_size: 0" in text
    assert "dims: [ -1, 30 ]" in text and "dims: [ -1, 2 ]" in text
    assert "dynamic_batching" not in text
    assert "dynamic_batching" not in render.config_json(spec)


def test_dynamic_batching_needs_batching(models: Path) -> None:
    with pytest.raises(ContractError, match=r"tuning.dynamic_batching: needs max_batch_size > 0"):
        derive_spec(models / "clf", "cancer", {"tuning": {"max_batch_size": 0}})


def test_gate_expectations_of_a_tabular_model(cancer: ModelSpec) -> None:
    out = render.gate_expectations(cancer)
    radius = [e for e in out if e["kwargs"]["column"] == "mean radius"]
    assert [e["type"] for e in radius] == ["expect_column_to_exist", "expect_column_values_to_be_in_type_list",
                                           "expect_column_values_to_be_between",
                                           "expect_column_values_to_not_be_null"]
    assert radius[2]["kwargs"] == {"column": "mean radius", "min_value": 0, "max_value": 50}
    assert radius[3]["kwargs"] == {"column": "mean radius", "mostly": 1.0}
    assert radius[1]["kwargs"]["type_list"] == list(render.FLOAT_TYPES)
    assert len(out) == 30 * 3 + 1  # ranges only where declared


def test_drift_features_of_a_tabular_model(cancer: ModelSpec) -> None:
    drift = render.drift_features(cancer)
    assert len(drift) == 30 and drift[0] == render.DriftFeature("mean radius", "FP64", 0.5, None)


def test_the_gateways_compiler_takes_the_contracts_and_names_the_field(cancer: ModelSpec, models: Path) -> None:
    from modelops.gateway.protocol.contract import compile_schema

    x, _ = breast_cancer_frame(rows=2)
    records = json.loads(x.to_json(orient="records"))
    check = compile_schema(render.edge_contract(cancer))
    assert check({"inputs": records}, "body") is None
    bad = check({"inputs": [{**records[0], "mean radius": 99.0}]}, "body")
    assert bad is not None and bad.field == "body.inputs[0].mean radius" and bad.rule == "maximum 50.0"
    missing = check({"inputs": {"mean radius": [1.0]}}, "body")
    assert missing is not None and missing.field == "body.inputs.mean perimeter" and missing.rule == "required"
    tensors = compile_schema(render.edge_contract(derive_spec(models / "onnx", "ranker")))
    short = tensors({"inputs": {"dense": [[0.5] * 7], "bucket": [[1]]}}, "body")
    assert short is not None and short.field == "body.inputs.dense[0]" and short.rule == "minItems 8"
