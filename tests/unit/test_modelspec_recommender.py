"""The recommender's spec reproduces today's request schema, Triton config, feature suite and drift list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelops.contracts import suites
from modelops.modelspec import render
from modelops.modelspec.recommender import NOT_NULL_MOSTLY, recommender_contract, recommender_features, recommender_spec
from modelops.modelspec.spec import ModelSpec
from modelops.serving.pbtxt import config_json, config_mismatches, pipeline_specs, render_pbtxt


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return recommender_spec()


def _body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_spec_round_trips(spec: ModelSpec) -> None:
    assert ModelSpec.from_json(spec.to_json()) == spec
    assert len(spec.features) == 128 and spec.inputs[0].shape == (-1, 128)
    assert spec.routing_key == "user_id" and spec.outcomes.actions == ("click", "purchase", "skip")


GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "recommender.request.schema.json"
"""The recommender's request contract as it was declared by hand before the spec rendered it."""


def test_edge_contract_is_the_pinned_request_schema(spec: ModelSpec) -> None:
    today = suites.load_request_schema(GOLDEN)
    rendered = render.edge_contract(spec)
    assert recommender_contract() == render.edge_contract(spec)  # what the gateway and the gate use
    assert rendered.pop("$id") == "https://modelops.dev/schemas/recommender/predict-request.json"
    today.pop("$id")
    assert rendered == today
    # and the GX request suite generated from it is the same suite
    ours = suites.request_suite_from_schema(render.edge_contract(spec)).to_json_dict()["expectations"]
    theirs = suites.request_suite(GOLDEN).to_json_dict()["expectations"]
    assert [(e["type"], e["kwargs"]) for e in ours] == [(e["type"], e["kwargs"]) for e in theirs]


def test_triton_config_is_todays_model_step(spec: ModelSpec) -> None:
    # The pipeline's model step reads "scaled" (the preprocess step's output); the spec is the
    # pipeline's outer contract, whose input is "features". Everything else is the same text.
    today = pipeline_specs("recommender", backend="onnxruntime")["model"]
    ours = render.config_pbtxt(spec, name="recommender_model")
    assert _body(ours) == _body(render_pbtxt(today).replace('"scaled"', '"features"'))
    rendered = render.config_json(spec, name="recommender_model", versions=(3, 4))
    expected = config_json(today.with_versions((3, 4)))
    expected["input"][0]["name"] = "features"
    assert config_mismatches(expected, rendered) == []
    assert config_mismatches(rendered, expected) == []


def test_gate_expectations_are_todays_feature_suite(spec: ModelSpec) -> None:
    assert NOT_NULL_MOSTLY == suites.FEATURE_NOT_NULL_MOSTLY
    today = suites.feature_suite_from_metadata(recommender_features()).to_json_dict()["expectations"]
    ours = render.gate_expectations(spec)
    assert len(ours) == len(today) == 4 * 128

    def key(e: dict[str, object]) -> tuple[object, ...]:
        meta = dict(e["meta"])  # type: ignore[call-overload]
        meta.pop("source")
        return e["type"], json.dumps(e["kwargs"], sort_keys=True), json.dumps(meta, sort_keys=True)

    assert [key(e) for e in ours] == [key(e) for e in today]


def test_gx_type_lists_are_the_gates(spec: ModelSpec) -> None:
    assert render.STRING_TYPES == suites.STRING_TYPES
    assert render.INTEGER_TYPES == suites.INTEGER_TYPES
    assert render.FLOAT_TYPES == suites.FLOAT_TYPES
    # every rendered expectation is one GX can build
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    for config in render.gate_expectations(spec)[:8]:
        ExpectationConfiguration(**config).to_domain_obj()


def test_drift_features_are_the_feature_metadata(spec: ModelSpec) -> None:
    features = recommender_features()
    drift = render.drift_features(spec)
    assert [(d.name, d.sensitivity, d.threshold) for d in drift] == [
        (f.name, f.drift_sensitivity, f.drift_threshold) for f in features]
    assert any(d.threshold is not None for d in drift)
