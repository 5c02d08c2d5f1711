"""ModelSpec: JSON round trip and refusals that name the field, the rule and an example."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelops.errors import ContractError
from modelops.modelspec.spec import (
    DEFAULT_DRIFT_SENSITIVITY,
    Feature,
    Label,
    ModelSpec,
    Outcomes,
    Tensor,
    spec_problems,
)


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "churn", "flavor": "sklearn",
        "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 2]}],
        "outputs": [{"name": "probabilities", "dtype": "FP32", "shape": [-1, 2]}],
        "features": [{"name": "tenure days", "dtype": "FP32", "min": 0, "max": 3650},
                     {"name": "plan", "dtype": "FP32"}],
    }
    doc.update(changes)
    return doc


def test_defaults_and_round_trip() -> None:
    spec = ModelSpec.from_dict(_doc(outcomes={"label": {"kind": "binary", "delay_s": 86400}}))
    assert spec.schema_version == 1
    assert spec.request.form == "tabular" and spec.request.max_items == 50
    assert spec.features[1].drift_sensitivity == DEFAULT_DRIFT_SENSITIVITY == 0.5
    assert spec.tuning.max_batch_size == 64 and spec.tuning.instance_group.kind == "cpu"
    assert spec.outcomes == Outcomes(label=Label(kind="binary", delay_s=86400))
    assert ModelSpec.from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json()) == spec.to_dict()
    assert spec_problems(spec) == []


@pytest.mark.parametrize(("changes", "message"), [
    ({"flavor": "keras"}, r"flavor='keras': must be one of \['triton', 'onnx', .*\] \(example: triton\)"),
    ({"name": "Churn Model"}, r"name='Churn Model': a model name must match"),
    ({"schema_version": 2}, r"schema_version=2: this code reads 1"),
    ({"inputs": [{"name": "input", "dtype": "FP16", "shape": [-1, 2]}]}, r"inputs\[0\] \(input\).dtype='FP16'"),
    ({"inputs": [{"name": "input", "dtype": "FP32", "shape": [2]}]},
     r"inputs\[0\] \(input\).shape=\[2\]: with max_batch_size > 0 the first dimension is the batch"),
    ({"inputs": [{"name": "in put", "dtype": "FP32", "shape": [-1, 2]}]}, r"inputs\[0\] \(in put\).name: must match"),
    ({"outputs": []}, r"outputs: at least one tensor is needed \(example: outputs: \["),
    ({"features": [{"name": "a", "dtype": "FP32", "min": 2, "max": 1}]}, r"min=2.0 > max=1.0"),
    ({"features": [{"name": "a", "dtype": "FP32", "drift_sensitivity": 1.5}]},
     r"features\[0\] \(a\).drift_sensitivity=1.5: must be in \[0, 1\] \(example: 0.5\)"),
    ({"features": [{"name": "a", "dtype": "FP32"}, {"name": "a", "dtype": "FP32"}]}, r"appears twice"),
    ({"request": {"form": "rpc"}}, r"request.form='rpc': must be one of \['tabular', 'feature-lookup'\]"),
    ({"request": {"form": "feature-lookup"}}, r"routing_key: the feature-lookup form needs the entity field"),
    ({"routing_key": "customer"}, r"routing_key='customer': must be an input column or tensor"),
    ({"tuning": {"instance_group": {"kind": "cpu", "gpus": [0]}}}, r"gpus=\[0\]: only with kind gpu"),
    ({"tuning": {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [16]}}},
     r"preferred_batch_size \[16\]: must lie in \[1, max_batch_size=8\]"),
    ({"outcomes": {"label": {"kind": "ordinal"}}}, r"outcomes.label.kind='ordinal': must be one of"),
    ({"outcomes": {"label": {"kind": "multiclass", "classes": ["a", "b"]}}}, r"at least 3 classes"),
    ({"flavor": "triton"}, r"backend: a triton-flavor model must name its Triton backend"),
])
def test_rules_name_the_field_and_an_example(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        ModelSpec.from_dict(_doc(**changes))


@pytest.mark.parametrize(("document", "message"), [
    (_doc(tuning={"max_batch_size": "64"}),
     r"tuning.max_batch_size: Expected `int`, got `str`.*\(example: max_batch_size: 64\)"),
    (_doc(tuning={"max_batch": 64}),
     r"tuning: Object contains unknown field `max_batch`.*allowed: max_batch_size, dynamic_batching, instance_group"),
    ({k: v for k, v in _doc().items() if k != "flavor"}, r"missing required field `flavor` \(example: flavor: "),
    (_doc(features=[{"name": "a"}]), r"features\[0\]: Object missing required field `dtype`"),
])
def test_malformed_documents_name_the_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        ModelSpec.from_dict(document)
    with pytest.raises(ContractError, match=message):
        ModelSpec.from_json(json.dumps(document))


def test_not_json() -> None:
    with pytest.raises(ContractError, match="not valid JSON"):
        ModelSpec.from_json("{name: churn")


def test_constructed_specs_are_checked_too() -> None:
    with pytest.raises(ContractError, match=r"dtype='float'"):
        ModelSpec(name="m", flavor="onnx", inputs=(Tensor(name="x", dtype="float", shape=(-1, 1)),),
                  outputs=(Tensor(name="y", dtype="FP32", shape=(-1, 1)),))
    spec = ModelSpec(name="m", flavor="onnx", inputs=(Tensor(name="x", dtype="FP32", shape=(-1, 1)),),
                     outputs=(Tensor(name="y", dtype="FP32", shape=(-1, 1)),),
                     features=(Feature(name="x", dtype="FP32"),))
    assert spec.triton_backend == "onnxruntime"
