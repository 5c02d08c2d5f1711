"""The triton flavor: a Triton model directory logged with MLflow, its config.pbtxt read into the model spec.

The MLflow models are written the way the mlflow-triton-plugin writes them (its ``save_model``: the
Triton model folder copied in, ``flavors: {triton: {data: <folder>}}``), with ``mlflow.models.Model``'s
own API and no plugin dependency. The python-backend model answers ``y = scale * x + 1`` over FP32
``[N, 4]``, ``scale`` being a config parameter: a served config that lost the parameters answers
otherwise. No server here (tests/integration/test_model_zoo_flavors.py serves it).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modelops.errors import ContractError
from modelops.modelspec.render import config_json, config_pbtxt
from modelops.serving.flavor_triton import parse_config, spec_fields
from modelops.serving.mlflow_models import prepare_model
from modelops.serving.spec_files import require_backend, served_spec

AFFINE_CONFIG = """
name: "affine"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "scale" value: { string_value: "2" } }
"""
AFFINE_MODEL_PY = '''"""y = scale * x + 1, scale from the config's parameters."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.scale = float(config["parameters"]["scale"]["string_value"])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = (self.scale * x + 1).astype(np.float32)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", y)]))
        return out
'''


def write_affine_folder(root: Path, config: str = AFFINE_CONFIG) -> Path:
    """A Triton model folder ``affine/`` (config.pbtxt, 1/model.py) under ``root``."""
    folder = root / "affine"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(AFFINE_MODEL_PY)
    return folder


class TritonFlavor:
    """The mlflow-triton-plugin's ``triton`` flavor module, as ``mlflow.models.Model.log`` calls it."""

    __name__ = "triton"

    @staticmethod
    def save_model(path: str, mlflow_model: Any, triton_model_path: str) -> None:
        source = Path(triton_model_path)
        Path(path).mkdir(parents=True)
        shutil.copytree(source, Path(path) / source.name)
        mlflow_model.add_flavor("triton", data=source.name)
        mlflow_model.save(str(Path(path) / "MLmodel"))


def affine_sample(rows: int = 6) -> dict[str, np.ndarray]:
    """An evaluation sample of the affine model with its expected outputs (what to log as eval/*.npz)."""
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 7
    return {"INPUT0": x, "OUTPUT0": 2 * x + 1}


def _saved(tmp_path: Path, config: str = AFFINE_CONFIG) -> Path:
    from mlflow.models import Model

    path = tmp_path / "mlflow_model"
    TritonFlavor.save_model(str(path), Model(), str(write_affine_folder(tmp_path / "src", config)))
    return path


def test_the_config_is_read_with_tritons_own_schema_into_spec_fields() -> None:
    fields = spec_fields(parse_config(AFFINE_CONFIG))
    assert fields == {
        "backend": "python", "parameters": {"scale": "2"},
        "inputs": [{"name": "INPUT0", "dtype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "OUTPUT0", "dtype": "FP32", "shape": [-1, 4]}],
        "tuning": {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 100, "preferred_batch_size": [8]},
                   "instance_group": {"kind": "cpu", "count": 1, "gpus": []}},
    }
    unbatched = spec_fields(parse_config('platform: "onnxruntime_onnx"\ninput [{name: "x" data_type: TYPE_INT64 '
                                         'dims: [2, 3]}]\noutput [{name: "y" data_type: TYPE_STRING dims: [2]}]'))
    assert unbatched["backend"] == "onnxruntime" and unbatched["tuning"]["max_batch_size"] == 0
    assert unbatched["inputs"] == [{"name": "x", "dtype": "INT64", "shape": [2, 3]}]
    assert unbatched["outputs"][0]["dtype"] == "BYTES"
    assert unbatched["tuning"]["instance_group"]["kind"] == "auto" and unbatched["tuning"]["dynamic_batching"] is None


@pytest.mark.parametrize(("config", "message"), [
    ('backend: "python"\nmax_batch_size: 8\ninput [{name: "x" data_type: TYPE_FP32 dims: [4]}]\n'
     "sequence_batching { }", r"\['sequence_batching'\] not carried by the model spec"),
    ('backend: "python"\ninput [{name: "x" data_type: TYPE_FP32 dims: [4] reshape: { shape: [2, 2] }}]',
     r"\['input x: reshape'\] not carried"),
    ('backend: "python"\ninput [{name: "x" data_type: TYPE_FP16 dims: [4]}]',
     r"input x: data_type TYPE_FP16 is not carried by the model spec; supported: \['TYPE_FP32'"),
    ('backend: "python"\ninstance_group [{kind: KIND_CPU}, {kind: KIND_GPU}]',
     r"instance_group \(the spec carries one group; the config has 2\)"),
    ('max_batch_size: 8\ninput [{name: "x" data_type: TYPE_FP32 dims: [4]}]', r"no backend \(platform ''\)"),
    ('backend: "python"\nmax_batch_size: "eight"', r"config.pbtxt: not a Triton model config: 2:17 : "),
    ('backend: "python"\nno_such_field: 1', r"not a Triton model config: .*no field named \"no_such_field\""),
])
def test_what_the_spec_cannot_carry_is_refused_by_name(config: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        spec_fields(parse_config(config))


def test_a_triton_model_directory_is_prepared_with_its_logged_outputs(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    sample = tmp_path / "sample.npz"
    np.savez(sample, **affine_sample())
    prepared = prepare_model(path, "affine", eval_table=sample)
    spec = prepared.spec
    assert (spec.flavor, spec.backend, spec.parameters, prepared.served_as) == ("triton", "python", {"scale": "2"},
                                                                              "triton")
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("INPUT0", "FP32", (-1, 4))]
    assert spec.tuning.max_batch_size == 8 and spec.tuning.instance_group.kind == "cpu"
    assert dict(prepared.files) == {"model.py": AFFINE_MODEL_PY.encode()} and prepared.graph == b""
    assert prepared.verified_by == "logged_outputs" and prepared.sample_rows == 6
    np.testing.assert_array_equal(prepared.expected["OUTPUT0"], affine_sample()["OUTPUT0"])
    assert set(prepared.sample) == {"INPUT0"}  # the logged outputs are no input
    # the served config is rendered from the spec and keeps the user's backend and parameters
    text = config_pbtxt(served_spec(spec, "python"))
    assert 'backend: "python"' in text and 'parameters { key: "scale" value: { string_value: "2" } }' in text
    assert config_json(spec)["parameters"] == {"scale": {"string_value": "2"}}
    assert spec_fields(parse_config(text))["parameters"] == {"scale": "2"}  # and Triton's parser reads it back
    # without logged outputs it is verified by consistency; modelops.yaml overrides the config like any spec
    only_inputs = tmp_path / "inputs.npz"
    np.savez(only_inputs, INPUT0=affine_sample()["INPUT0"])
    (path / "modelops.yaml").write_text("tuning: {max_batch_size: 4, dynamic_batching: null}\n")
    again = prepare_model(path, "affine", eval_table=only_inputs)
    assert again.verified_by == "consistency" and again.expected == {} and "consistency" in again.notes[0]
    assert again.spec.tuning.max_batch_size == 4 and again.spec.tuning.dynamic_batching is None


def test_a_backend_the_servers_lack_is_refused_naming_theirs(tmp_path: Path) -> None:
    config = AFFINE_CONFIG.replace('backend: "python"', 'backend: "pytorch"')
    path = _saved(tmp_path, config)
    sample = tmp_path / "sample.npz"
    np.savez(sample, **affine_sample())
    spec = prepare_model(path, "affine", eval_table=sample).spec
    with pytest.raises(ContractError, match=r"backend 'pytorch' is not on the Triton servers; they have \['python'\] "
                                            r"\(MODELOPS_TRITON_BACKEND=python\)"):
        require_backend(spec, "python")
    with pytest.raises(ContractError, match=r"they have \['onnxruntime', 'python'\]"):
        require_backend(spec, "onnxruntime")
    assert served_spec(spec, "python").triton_backend == "pytorch"  # never swapped for the ONNX runner


def test_the_folder_must_be_one_config_and_one_version(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    np.savez(tmp_path / "s.npz", **affine_sample())
    (path / "affine" / "2").mkdir()
    (path / "affine" / "2" / "model.py").write_text("")
    with pytest.raises(ContractError, match=r"exactly one numbered version folder .* found versions \['1', '2'\]"):
        prepare_model(path, "affine", eval_table=tmp_path / "s.npz")
    shutil.rmtree(path / "affine" / "2")
    (path / "affine" / "labels.txt").write_text("a\n")
    with pytest.raises(ContractError, match=r"other entries \['labels.txt'\]"):
        prepare_model(path, "affine", eval_table=tmp_path / "s.npz")
    (path / "affine" / "labels.txt").unlink()
    (path / "affine" / "1" / "model-spec.json").write_text("{}")
    with pytest.raises(ContractError, match=r"holds \['model-spec.json'\], names the platform writes"):
        prepare_model(path, "affine", eval_table=tmp_path / "s.npz")
    (path / "affine" / "1" / "model-spec.json").unlink()
    (path / "affine" / "1" / "model.py").rename(path / "affine" / "1" / "other.py")
    with pytest.raises(ContractError, match=r"backend python needs model.py in the version folder 1/"):
        prepare_model(path, "affine", eval_table=tmp_path / "s.npz")
    with pytest.raises(ContractError, match="no evaluation data to check it with"):
        prepare_model(path, "affine")


class _Answers:
    """Stands in for TritonClient.infer: ``2x + 1``, plus ``drift`` after the first call, a NaN in each if ``nan``."""

    def __init__(self, drift: float = 0.0, nan: bool = False) -> None:
        self.calls: list[int] = []
        self.drift, self.nan = drift, nan

    def infer(self, model: str, version: int, inputs: dict[str, np.ndarray], outputs: tuple[str, ...]
              ) -> dict[str, np.ndarray]:
        x = inputs["INPUT0"]
        self.calls.append(len(x))
        y = 2 * x + 1 + self.drift * (len(self.calls) > 1)
        if self.nan:
            y[0, 0] = np.nan
        return {"OUTPUT0": y}


def test_without_logged_outputs_verified_means_well_formed_repeatable_and_the_same_everywhere(
    tmp_path: Path,
) -> None:
    from modelops.errors import ServingError
    from modelops.serving.spec_publish import verify_consistency

    path = _saved(tmp_path)
    np.savez(tmp_path / "in.npz", INPUT0=affine_sample(20)["INPUT0"])
    prepared = prepare_model(path, "affine", eval_table=tmp_path / "in.npz")
    first = _Answers()
    reference = verify_consistency(first, prepared.spec, 1, prepared, None)  # type: ignore[arg-type]
    assert first.calls == [8, 8, 4, 8, 8, 4]  # twice, in batches of max_batch_size 8
    verify_consistency(_Answers(), prepared.spec, 1, prepared, reference)  # type: ignore[arg-type]
    with pytest.raises(ServingError, match=r"Triton's OUTPUT0 differ from its own first answers \(a second call "
                                           r"answered differently\) by 0.05 \(relative"):
        verify_consistency(_Answers(drift=0.05), prepared.spec, 1, prepared, None)  # type: ignore[arg-type]
    with pytest.raises(ServingError, match=r"differ from the first server's answers"):
        shifted = {"OUTPUT0": reference["OUTPUT0"] + 1}
        verify_consistency(_Answers(), prepared.spec, 1, prepared, shifted)  # type: ignore[arg-type]
    with pytest.raises(ServingError, match=r"are not the spec's outputs:\n  output OUTPUT0: 3 values are NaN"):
        verify_consistency(_Answers(nan=True), prepared.spec, 1, prepared, None)  # type: ignore[arg-type]
