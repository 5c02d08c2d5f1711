"""config.pbtxt rendering (golden files in tests/unit/golden/), JSON override and comparison.

Regenerate the golden files after a deliberate template change with
``UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_serving_pbtxt.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelops.errors import ServingError
from modelops.serving.pbtxt import (
    ModelConfigSpec,
    Tuning,
    config_json,
    config_mismatches,
    pipeline_specs,
    render_pbtxt,
)

GOLDEN = Path(__file__).parent / "golden"
TUNING = Tuning(max_batch_size=32, max_queue_delay_us=250, preferred_batch_sizes=(4, 16), instance_count=2)


def specs_for(backend: str) -> dict[str, ModelConfigSpec]:
    return dict(pipeline_specs("ranker", backend=backend, tuning=TUNING))


CASES = [
    ("python", "preprocess", ()),
    ("python", "model", ()),
    ("python", "ensemble", ()),
    ("onnxruntime", "model", ()),
    ("python", "ensemble", (3, 1)),
]


@pytest.mark.parametrize(("backend", "role", "versions"), CASES)
def test_rendered_config_matches_golden_file(backend: str, role: str, versions: tuple[int, ...]) -> None:
    spec = specs_for(backend)[role].with_versions(versions)
    rendered = render_pbtxt(spec)
    suffix = "_v" + "_".join(map(str, sorted(versions))) if versions else ""
    golden = GOLDEN / f"{backend}_{role}{suffix}.pbtxt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


def test_pipeline_calls_its_steps_by_name_and_tensor() -> None:
    params = dict(specs_for("python")["ensemble"].parameters)
    assert params == {
        "preprocess_model": "ranker_preprocess", "preprocess_input": "features",
        "preprocess_output": "scaled", "model_model": "ranker_model", "model_input": "scaled",
        "model_output": "score",
    }


def test_contract_tensors_of_the_pipeline() -> None:
    doc = config_json(specs_for("onnxruntime")["ensemble"])
    assert doc["backend"] == "python"
    assert doc["input"] == [
        {"name": "features", "data_type": "TYPE_FP32", "dims": [128]},
        # explain=true's optional inputs: the baseline and the permutations' ranks, repeated per item
        {"name": "explain_baseline", "data_type": "TYPE_FP32", "dims": [128], "optional": True},
        {"name": "explain_ranks", "data_type": "TYPE_INT64", "dims": [-1], "optional": True},
    ]
    assert doc["output"] == [{"name": "score", "data_type": "TYPE_FP32", "dims": [1]},
                             {"name": "path_score", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert doc["max_batch_size"] == 32


def test_an_optional_input_triton_reports_as_required_is_a_mismatch() -> None:
    expected = config_json(specs_for("python")["ensemble"])
    reported = {**expected, "input": [{**t, "optional": False} for t in expected["input"]]}
    assert config_mismatches(expected, reported) == [
        "input explain_baseline.optional: rendered true, Triton reports false",
        "input explain_ranks.optional: rendered true, Triton reports false",
    ]
    assert config_mismatches(expected, expected) == []


def test_triton_style_config_with_extra_defaults_matches() -> None:
    spec = specs_for("python")["model"].with_versions([2, 1])
    expected = config_json(spec)
    # Triton reports int64 fields as strings and adds defaults of its own.
    reported = {
        **expected,
        "input": [{"name": "scaled", "data_type": "TYPE_FP32", "dims": ["128"], "format": "FORMAT_NONE"}],
        "output": [{"name": "score", "data_type": "TYPE_FP32", "dims": ["1"], "label_filename": ""}],
        "version_policy": {"specific": {"versions": ["1", "2"]}},
        "dynamic_batching": {**expected["dynamic_batching"], "max_queue_delay_microseconds": "250",
                             "preserve_ordering": False},
        "instance_group": [{"name": "ranker_model_0", "kind": "KIND_CPU", "count": 2, "gpus": []}],
        "optimization": {"priority": "PRIORITY_DEFAULT"},
    }
    assert config_mismatches(expected, reported) == []


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("max_batch_size", 8, "max_batch_size"),
        ("version_policy", {"specific": {"versions": ["1"]}}, "version_policy"),
        ("instance_group", [{"kind": "KIND_CPU", "count": 1}], "instance_group"),
        ("input", [{"name": "scaled", "data_type": "TYPE_FP64", "dims": ["128"]}], "input scaled.data_type"),
        ("output", [], "output score: missing"),
    ],
)
def test_each_differing_field_is_named(field: str, value: object, named: str) -> None:
    expected = config_json(specs_for("python")["model"].with_versions([1, 2]))
    problems = config_mismatches(expected, {**expected, field: value})
    assert len(problems) == 1
    assert problems[0].startswith(named)


def test_bad_tuning_is_refused_with_the_rule() -> None:
    with pytest.raises(ServingError, match="preferred_batch_sizes"):
        Tuning(max_batch_size=8, preferred_batch_sizes=(16,))
    with pytest.raises(ServingError, match="python or onnxruntime"):
        pipeline_specs("ranker", backend="tensorrt")


@pytest.mark.parametrize(("backend", "role", "versions"), CASES)
def test_pbtxt_parses_with_tritons_proto_and_agrees_with_the_json_override(
    backend: str, role: str, versions: tuple[int, ...]
) -> None:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    spec = specs_for(backend)[role].with_versions(versions)
    parsed = text_format.Parse(render_pbtxt(spec), model_config_pb2.ModelConfig())
    as_dict = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    assert config_mismatches(config_json(spec), as_dict) == []
