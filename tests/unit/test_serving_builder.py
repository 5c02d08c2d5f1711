"""model-info.json, the _COMPLETE manifest and the files of one Triton version (pure)."""

from __future__ import annotations

import json

import pytest

from modelops.errors import ServingError
from modelops.serving.builder import Artifacts, release_files
from modelops.serving.modelinfo import Manifest, ModelInfo, bundle_sha256, sha256_bytes, verify_files
from modelops.serving.pbtxt import pipeline_specs

ARTS = Artifacts(b"prep-bytes", b"model-bytes", b'{"variant": "slow", "slowdown": 3.0}')


def info(version: int = 3, created_at: str = "2026-11-29T21:00:00+00:00") -> ModelInfo:
    return ModelInfo(
        model="ranker", triton_version=version, sha256=bundle_sha256(ARTS.as_files()),
        files_sha256={k: sha256_bytes(v) for k, v in ARTS.as_files().items()},
        mlflow_model_uri="models:/ranker/7", mlflow_version="7", run_id="abc123",
        data_start="2026-11-01", data_end="2026-11-28", features=("f_000", "f_001"), owner="ml-team",
        created_at=created_at, code_revision="deadbeef",
    )


def test_model_info_round_trips_with_schema_version_1() -> None:
    record = info()
    doc = json.loads(record.to_json())
    assert doc["schema_version"] == 1
    assert {"model", "triton_version", "sha256", "mlflow_model_uri", "mlflow_version", "run_id", "data_start",
            "data_end", "features", "owner", "created_at", "code_revision"} <= set(doc)
    assert ModelInfo.from_json(record.to_json()) == record


@pytest.mark.parametrize(("change", "named"), [
    ({"triton_version": "3"}, "$.triton_version"),  # a string where an integer belongs: refused, not kept
    ({"features": "f_000"}, "$.features"),
    ({"surprise": 1}, "surprise"),
])
def test_model_info_refuses_a_wrong_type_or_an_unknown_field_naming_it(change: dict[str, object], named: str) -> None:
    doc = {**json.loads(info().to_json()), **change}
    with pytest.raises(ServingError, match=r"model-info\.json: unreadable") as caught:
        ModelInfo.from_json(json.dumps(doc))
    assert named in str(caught.value)


def test_manifest_bytes_are_stable_and_files_sorted() -> None:
    manifest = Manifest("ranker", 3, "s", {"b/1/x": "2", "a/1/y": "1"})
    assert list(manifest.files) == ["a/1/y", "b/1/x"]
    assert manifest.to_json() == (json.dumps({"files": {"a/1/y": "1", "b/1/x": "2"}, "model": "ranker",
                                              "schema_version": 1, "sha256": "s", "triton_version": 3},
                                             indent=2, sort_keys=True) + "\n").encode()
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_bundle_sha_changes_with_any_artifact_and_not_with_order() -> None:
    base = {"model.onnx": b"m", "preprocess.onnx": b"p"}
    assert bundle_sha256(base) == bundle_sha256(dict(reversed(list(base.items()))))
    assert bundle_sha256(base) != bundle_sha256({**base, "variant.json": b'{"variant": "faulty-errors"}'})
    assert bundle_sha256(base) != bundle_sha256({**base, "preprocess.onnx": b"q"})


def test_release_layout_python_backend() -> None:
    files = release_files(pipeline_specs("ranker", backend="python"), 3, ARTS, info())
    assert sorted(files) == [
        "ranker/3/model-info.json", "ranker/3/model.py", "ranker/config.pbtxt",
        "ranker_model/3/model.onnx", "ranker_model/3/model.py", "ranker_model/3/variant.json",
        "ranker_model/config.pbtxt",
        "ranker_preprocess/3/model.onnx", "ranker_preprocess/3/model.py", "ranker_preprocess/config.pbtxt",
    ]
    assert files["ranker_model/3/model.onnx"] == b"model-bytes"
    assert files["ranker_preprocess/3/model.onnx"] == b"prep-bytes"
    # a slow variant: no step copies in the pipeline (they would not be slow); explanations use the steps


@pytest.mark.parametrize(("variant", "copies"), [
    (None, True), (b'{"variant": "good"}', True), (b'{"variant": "collapsed"}', True),
    (b'{"variant": "faulty-errors", "error_rate": 0.05}', False), (b'{"variant": "slow", "slowdown": 3.0}', False),
    (b"not json", False),
])
def test_the_pipeline_carries_its_steps_bytes_unless_a_variant_acts_at_run_time(variant: bytes | None,
                                                                                 copies: bool) -> None:
    arts = Artifacts(b"prep-bytes", b"model-bytes", variant)
    files = release_files(pipeline_specs("ranker", backend="python"), 3, arts, info())
    if copies:  # the steps' very bytes, for explanations computed inside the pipeline
        assert files["ranker/3/model.onnx"] == b"model-bytes"
        assert files["ranker/3/preprocess.onnx"] == b"prep-bytes"
    else:
        assert "ranker/3/model.onnx" not in files and "ranker/3/preprocess.onnx" not in files
    assert b"model_version=self.version" in files["ranker/3/model.py"]


def test_release_layout_onnxruntime_backend_has_no_step_model_py() -> None:
    files = release_files(pipeline_specs("ranker", backend="onnxruntime"), 3, ARTS, info())
    assert "ranker_model/3/model.py" not in files
    assert "ranker/3/model.py" in files  # the pipeline is python in both modes
    assert b'backend: "onnxruntime"' in files["ranker_model/config.pbtxt"]


def test_configs_do_not_depend_on_the_version() -> None:
    specs = pipeline_specs("ranker", backend="python")
    v3 = release_files(specs, 3, ARTS, info(3))
    v4 = release_files(specs, 4, ARTS, info(4))
    assert all(v3[p] == v4[p] for p in v3 if p.endswith("config.pbtxt"))


def test_model_info_version_must_match() -> None:
    with pytest.raises(ServingError, match="model-info says version 3"):
        release_files(pipeline_specs("ranker", backend="python"), 4, ARTS, info(3))


def test_manifest_ignores_created_at_when_comparing_builds() -> None:
    specs = pipeline_specs("ranker", backend="python")
    first = release_files(specs, 3, ARTS, info(created_at="2026-11-29T21:00:00+00:00"))
    second = release_files(specs, 3, ARTS, info(created_at="2026-11-30T08:00:00+00:00"))
    m1, m2 = (Manifest.of("ranker", 3, info().sha256, f) for f in (first, second))
    assert m1 != m2 and m1.content_equal(m2)
    changed = Manifest.of("ranker", 3, info().sha256, {**second, "ranker_model/3/model.onnx": b"other"})
    assert not m1.content_equal(changed)
    assert Manifest.from_json(m1.to_json()) == m1


def test_verify_files_names_tampered_missing_and_extra_files() -> None:
    manifest = Manifest("ranker", 1, "a" * 64, {"a/1/x": "1" * 64, "a/1/y": "2" * 64})
    assert verify_files(manifest, {"a/1/x": "1" * 64, "a/1/y": "2" * 64}) == []
    problems = verify_files(manifest, {"a/1/x": "f" * 64, "a/1/z": "3" * 64})
    assert [p.split(":")[0] for p in problems] == ["a/1/x", "a/1/y", "a/1/z"]
