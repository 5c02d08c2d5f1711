"""The files of a spec-published Triton version (pure)."""

from __future__ import annotations

import json

import pytest

from modelops.errors import ContractError, ServingError
from modelops.modelspec.spec import ModelSpec
from modelops.serving.modelinfo import ModelInfo
from modelops.serving.spec_files import (
    require_placement,
    served_spec,
    spec_bytes,
    spec_release_files,
    version_sha256,
)

SPEC = ModelSpec.from_dict({
    "name": "cancer", "flavor": "sklearn",
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 30]}],
    "outputs": [{"name": "probabilities", "dtype": "FP32", "shape": [-1, 2]}],
    "features": [{"name": f"f {i}", "dtype": "FP64"} for i in range(30)],
    "source": {"model_uri": "models:/cancer/1", "run_id": "abc"},
})


def _info(version: int) -> ModelInfo:
    return ModelInfo(model="cancer", triton_version=version, sha256="s", files_sha256={}, mlflow_model_uri="",
                     mlflow_version="1", run_id="", data_start=None, data_end=None, features=(), owner="",
                     created_at="2026-12-03T00:00:00+00:00", code_revision=None)


def test_the_files_of_a_version_on_a_python_only_server() -> None:
    files = spec_release_files(SPEC, 3, b"graph", _info(3), server_backend="python")
    assert sorted(files) == ["cancer/3/model-info.json", "cancer/3/model-spec.json", "cancer/3/model.onnx",
                             "cancer/3/model.py", "cancer/config.pbtxt"]
    config = files["cancer/config.pbtxt"].decode()
    assert 'backend: "python"' in config and "dims: [ 30 ]" in config and "max_batch_size: 64" in config
    assert json.loads(files["cancer/3/model-spec.json"])["backend"] is None  # the user's declaration is kept
    assert b"ort.InferenceSession" in files["cancer/3/model.py"]


def test_an_onnxruntime_server_gets_no_runner() -> None:
    files = spec_release_files(SPEC, 1, b"graph", _info(1), server_backend="onnxruntime")
    assert "cancer/1/model.py" not in files and b'backend: "onnxruntime"' in files["cancer/config.pbtxt"]
    assert served_spec(SPEC, "onnxruntime") is SPEC


def test_the_identity_covers_graph_and_spec_but_not_where_it_came_from() -> None:
    import msgspec

    moved = msgspec.structs.replace(SPEC, source=type(SPEC.source)(model_uri="models:/cancer/2", run_id="def"))
    retuned = ModelSpec.from_dict({**SPEC.to_dict(), "tuning": {"max_batch_size": 32}})
    assert version_sha256(b"graph", SPEC) == version_sha256(b"graph", moved)
    assert version_sha256(b"graph", SPEC) != version_sha256(b"other", SPEC)
    assert version_sha256(b"graph", SPEC) != version_sha256(b"graph", retuned)
    assert ModelSpec.from_json(spec_bytes(SPEC)) == SPEC


def test_model_info_of_another_version_is_refused() -> None:
    with pytest.raises(ServingError, match="model-info says version 2, building 3"):
        spec_release_files(SPEC, 3, b"graph", _info(2), server_backend="python")


def test_a_model_without_batching_is_not_compared_with_a_batcher_it_does_not_have() -> None:
    from modelops.modelspec.render import config_json
    from modelops.serving.pbtxt import config_mismatches

    unbatched = ModelSpec.from_dict({**SPEC.to_dict(), "inputs": [{"name": "input", "dtype": "FP32", "shape": [4, 30]}],
                                     "outputs": [{"name": "probabilities", "dtype": "FP32", "shape": [4, 2]}],
                                     "tuning": {"max_batch_size": 0, "dynamic_batching": None}})
    expected = config_json(unbatched)
    reported = {**expected, "dynamic_batching": None}
    assert "dynamic_batching" not in expected and config_mismatches(expected, reported) == []
    batched = config_json(SPEC)
    assert config_mismatches(batched, {**batched, "dynamic_batching": None}) != []  # a missing batcher is caught


def _placed(group: dict[str, object]) -> ModelSpec:
    return ModelSpec.from_dict({**SPEC.to_dict(), "tuning": {"instance_group": group}})


def test_kind_auto_is_served_on_the_gpu_where_there_is_one_and_on_the_cpu_elsewhere() -> None:
    auto = _placed({"kind": "auto", "count": 2})
    on_cpu = spec_release_files(auto, 1, b"graph", _info(1), server_backend="onnxruntime")["cancer/config.pbtxt"]
    on_gpu = spec_release_files(auto, 1, b"graph", _info(1), server_backend="onnxruntime",
                                server_gpus=1)["cancer/config.pbtxt"]
    assert b"kind: KIND_CPU, count: 2" in on_cpu and b"kind: KIND_GPU, count: 2" in on_gpu
    assert served_spec(auto, "onnxruntime").tuning.instance_group.kind == "cpu"
    assert auto.tuning.instance_group.kind == "auto"  # the stored declaration is the user's
    require_placement(auto, 0)  # auto fits everywhere


def test_a_gpu_spec_is_rendered_where_declared_and_refused_on_cpu_only_servers() -> None:
    gpu = _placed({"kind": "gpu", "count": 1, "gpus": [0, 1]})
    config = spec_release_files(gpu, 1, b"graph", _info(1), server_backend="onnxruntime",
                                server_gpus=2)["cancer/config.pbtxt"]
    assert b"kind: KIND_GPU, count: 1, gpus: [ 0, 1 ]" in config
    require_placement(gpu, 2)
    with pytest.raises(ContractError, match=r"tuning.instance_group.kind=gpu, but the Triton servers have no GPU "
                                            r"\(MODELOPS_TRITON_GPUS=0\); declare kind: auto"):
        require_placement(gpu, 0)
    with pytest.raises(ContractError, match=r"tuning.instance_group.gpus=\[0, 1\]: the Triton servers have 1 GPU"):
        require_placement(gpu, 1)


PYFUNC = ModelSpec.from_dict({**SPEC.to_dict(), "flavor": "pyfunc", "parameters": {"predict_fn": "predict_proba"}})
TRITON = ModelSpec.from_dict({**SPEC.to_dict(), "flavor": "triton", "backend": "python",
                              "parameters": {"scale": "2"}})


def test_a_pyfunc_version_carries_the_mlflow_model_directory_and_the_pyfunc_runner() -> None:
    model_dir = {"MLmodel": b"flavors: {}", "code/tempered.py": b"x = 1", "requirements.txt": b"mlflow"}
    files = spec_release_files(PYFUNC, 2, model_dir, _info(2), server_backend="onnxruntime")
    assert sorted(files) == ["cancer/2/mlflow_model/MLmodel", "cancer/2/mlflow_model/code/tempered.py",
                             "cancer/2/mlflow_model/requirements.txt", "cancer/2/model-info.json",
                             "cancer/2/model-spec.json", "cancer/2/model.py", "cancer/config.pbtxt"]
    assert b"mlflow.pyfunc.load_model" in files["cancer/2/model.py"]
    config = files["cancer/config.pbtxt"].decode()
    assert 'backend: "python"' in config  # on an onnxruntime server too: it is MLflow's model, not a graph
    assert 'parameters { key: "predict_fn" value: { string_value: "predict_proba" } }' in config
    assert json.loads(files["cancer/2/model-spec.json"])["parameters"] == {"predict_fn": "predict_proba"}
    with pytest.raises(ContractError, match="a pyfunc version takes the files of its folder; none given"):
        spec_release_files(PYFUNC, 2, b"graph", _info(2), server_backend="python")


def test_a_triton_version_carries_the_users_folder_as_logged_and_no_runner() -> None:
    files = spec_release_files(TRITON, 1, {"model.py": b"user", "weights/w.bin": b"\x00"}, _info(1),
                               server_backend="python")
    assert sorted(files) == ["cancer/1/model-info.json", "cancer/1/model-spec.json", "cancer/1/model.py",
                             "cancer/1/weights/w.bin", "cancer/config.pbtxt"]
    assert files["cancer/1/model.py"] == b"user" and b'string_value: "2"' in files["cancer/config.pbtxt"]
    with pytest.raises(ContractError, match=r"holds \['model-info.json'\], names the platform writes"):
        spec_release_files(TRITON, 1, {"model-info.json": b"{}"}, _info(1), server_backend="python")


def test_the_identity_covers_every_payload_file_and_empty_parameters_are_not_stored() -> None:
    one = version_sha256({"model.py": b"a", "w.bin": b"b"}, TRITON)
    assert one == version_sha256({"w.bin": b"b", "model.py": b"a"}, TRITON)
    assert one != version_sha256({"model.py": b"a", "w.bin": b"c"}, TRITON)
    assert one != version_sha256({"model.py": b"a", "w.bin": b"b"}, ModelSpec.from_dict(
        {**TRITON.to_dict(), "parameters": {"scale": "3"}}))
    assert b'"parameters"' not in spec_bytes(SPEC) and ModelSpec.from_json(spec_bytes(PYFUNC)) == PYFUNC
    # a null token validity is not stored either; a declared one is, and reads back
    assert b'"token_ttl_s"' not in spec_bytes(SPEC) and ModelSpec.from_json(spec_bytes(SPEC)) == SPEC
    timed = ModelSpec.from_dict({**SPEC.to_dict(), "outcomes": {"actions": ["click"], "token_ttl_s": 600}})
    assert ModelSpec.from_json(spec_bytes(timed)) == timed and b'"token_ttl_s": 600' in spec_bytes(timed)
    # an ONNX version's identity is what it was before payloads of several files existed
    assert version_sha256(b"graph", SPEC) == "7f0ba2dfe91f0c7dd84dbd3fe7bb8e0bcce0e8c3a845174d7d65d8325d7a3730"
