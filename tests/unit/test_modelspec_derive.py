"""derive_spec on real MLflow models saved to local directories."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modelops.errors import ContractError
from modelops.modelspec.derive import derive_spec, expand_overrides, input_example_path
from modelops.modelspec.spec import ModelSpec, Tensor
from tests.unit.modelspec_models import save_onnx_two_inputs, save_sklearn_classifier, save_sklearn_regressor


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    save_sklearn_classifier(root / "clf")
    save_sklearn_regressor(root / "reg")
    save_onnx_two_inputs(root / "onnx")
    save_onnx_two_inputs(root / "nosig", signature=False)
    return root


def test_sklearn_classifier_tabular_with_probabilities(models: Path) -> None:
    spec = derive_spec(models / "clf", "cancer")
    assert spec.flavor == "sklearn"  # sklearn wins over python_function
    assert spec.triton_backend == "onnxruntime"
    assert spec.request.form == "tabular"
    assert spec.inputs == (Tensor(name="input", dtype="FP64", shape=(-1, 30)),)
    assert spec.outputs == (Tensor(name="probabilities", dtype="FP64", shape=(-1, 2)),)
    assert len(spec.features) == 30
    assert spec.features[0].name == "mean radius"
    assert spec.features[7].name == "mean concave points"
    assert {f.dtype for f in spec.features} == {"FP64"}
    assert all(f.drift_sensitivity == 0.5 and f.required for f in spec.features)
    assert spec.source.model_uri == (models / "clf").resolve().as_uri()
    assert input_example_path(models / "clf") == models / "clf" / "input_example.json"


def test_regressor_output_is_one_value_per_row(models: Path) -> None:
    spec = derive_spec(models / "reg", "ridge")
    assert spec.outputs == (Tensor(name="prediction", dtype="FP64", shape=(-1, 1)),)
    assert input_example_path(models / "reg") is None


def test_onnx_two_named_inputs_of_different_dtypes(models: Path) -> None:
    spec = derive_spec(models / "onnx", "ranker")
    assert spec.flavor == "onnx"
    assert spec.inputs == (Tensor(name="dense", dtype="FP32", shape=(-1, 8)),
                           Tensor(name="bucket", dtype="INT64", shape=(-1, 1)))
    assert spec.outputs == (Tensor(name="score", dtype="FP32", shape=(-1, 1)),
                            Tensor(name="bucket_out", dtype="INT64", shape=(-1, 1)))
    assert spec.features == ()


def test_json_round_trip_of_a_derived_spec(models: Path) -> None:
    spec = derive_spec(models / "clf", "cancer", {"routing_key": "mean radius"})
    assert ModelSpec.from_json(spec.to_json()) == spec
    assert ModelSpec.from_dict(spec.to_dict()) == spec


def test_no_signature_is_refused_with_the_way_out(models: Path) -> None:
    with pytest.raises(ContractError, match=r"no signature.*signature=infer_signature\(X, model.predict_proba\(X\)\)"):
        derive_spec(models / "nosig", "ranker")


def test_no_signature_but_declared_inputs_and_outputs(models: Path) -> None:
    declared = {"inputs": [{"name": "dense", "dtype": "FP32", "shape": [-1, 8]}],
                "outputs": [{"name": "score", "dtype": "FP32", "shape": [-1, 1]}]}
    spec = derive_spec(models / "nosig", "ranker", declared)
    assert spec.inputs == (Tensor(name="dense", dtype="FP32", shape=(-1, 8)),)


def test_spec_file_then_tags_override_the_derived_values(models: Path, tmp_path: Path) -> None:
    import shutil

    model = tmp_path / "clf"
    shutil.copytree(models / "clf", model)
    (model / "modelops.yaml").write_text(yaml.safe_dump({
        "tuning": {"max_batch_size": 32, "instance_group": {"kind": "gpu", "gpus": [0]}},
        "features": {"mean radius": {"min": 0, "max": 50, "owner": "oncology", "drift_sensitivity": 0.9}},
        "outcomes": {"label": {"kind": "binary", "delay_s": 604800}},
    }))
    tags = {"modelops.spec.tuning.max_batch_size": "16", "modelops.spec.routing_key": "mean texture",
            "modelops.spec.tuning.dynamic_batching.preferred_batch_size": "[4, 8]"}
    spec = derive_spec(model, "cancer", tags)
    assert spec.tuning.max_batch_size == 16  # the tag wins over the file
    assert spec.tuning.instance_group.kind == "gpu" and spec.tuning.instance_group.gpus == (0,)
    assert spec.tuning.dynamic_batching is not None
    assert spec.tuning.dynamic_batching.preferred_batch_size == (4, 8)
    assert spec.tuning.dynamic_batching.max_queue_delay_us == 100  # merged, not replaced
    radius = spec.features[0]
    assert (radius.min, radius.max, radius.owner, radius.drift_sensitivity) == (0, 50, "oncology", 0.9)
    assert spec.routing_key == "mean texture"
    assert spec.outcomes.label is not None and spec.outcomes.label.delay_s == 604800


@pytest.mark.parametrize(("overrides", "message"), [
    ({"tunning": {}}, r"override tunning: unknown key 'tunning'; allowed here: flavor, inputs, outputs, request"),
    ({"tuning": {"max_batch": 3}}, r"override tuning.max_batch: .*allowed here: max_batch_size, dynamic_batching"),
    ({"modelops.spec.tuning.instance_group.kind": "tpu"}, r"tuning.instance_group.kind='tpu': must be one of"),
    ({"features": {"no such column": {"min": 0}}}, r"\['no such column'\] are no features of the model"),
    ({"features": {"mean radius": {"minimum": 0}}}, r"features.mean radius.minimum: unknown key"),
    ({"name": "other"}, r"override name: unknown key"),
    ({"routing_key": "customer"}, r"routing_key='customer': must be an input column"),
])
def test_bad_overrides_are_refused(models: Path, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        derive_spec(models / "clf", "cancer", overrides)


def test_unsupported_flavor_is_refused(tmp_path: Path) -> None:
    (tmp_path / "MLmodel").write_text(yaml.safe_dump({"flavors": {"h2o": {"data": "model.h2o"}}}))
    with pytest.raises(ContractError, match=r"flavor\(s\) \['h2o'\] not supported; supported: \['triton', 'onnx'"):
        derive_spec(tmp_path, "h2o_model")


def test_malformed_mlmodel_is_refused(tmp_path: Path) -> None:
    (tmp_path / "MLmodel").write_text("flavors: [unclosed\n")
    with pytest.raises(ContractError, match=r"MLmodel: malformed"):
        derive_spec(tmp_path, "broken")
    with pytest.raises(ContractError, match=r"no MLmodel file"):
        derive_spec(tmp_path / "missing", "broken")


def test_triton_flavor_wins_and_needs_a_backend(tmp_path: Path, models: Path) -> None:
    import shutil

    model = tmp_path / "m"
    shutil.copytree(models / "onnx", model)
    text = yaml.safe_load((model / "MLmodel").read_text())
    text["flavors"]["triton"] = {"data": "triton"}
    (model / "MLmodel").write_text(yaml.safe_dump(text))
    with pytest.raises(ContractError, match=r"backend: a triton-flavor model must name its Triton backend"):
        derive_spec(model, "ranker")
    assert derive_spec(model, "ranker", {"backend": "onnxruntime"}).flavor == "triton"


def test_expand_overrides_nests_dotted_keys() -> None:
    assert expand_overrides({"modelops.spec.tuning.max_batch_size": "8", "request.form": "tabular"}) == {
        "tuning": {"max_batch_size": 8}, "request": {"form": "tabular"}}


@pytest.mark.filterwarnings("ignore::UserWarning")  # MLflow's hints on type hints and input examples
def test_mixed_columns_become_one_tensor_each(tmp_path: Path) -> None:
    import mlflow.pyfunc
    import pandas as pd
    from mlflow.models import infer_signature

    class Echo(mlflow.pyfunc.PythonModel):  # type: ignore[misc]
        def predict(self, context: object, model_input: pd.DataFrame, params: object = None) -> pd.DataFrame:
            return model_input[["amount"]]

    frame = pd.DataFrame({"amount": [1.5, 2.0], "plan type": ["a", "b"], "seats": [1, 2], "trial": [True, False]})
    mlflow.pyfunc.save_model(str(tmp_path / "m"), python_model=Echo(), pip_requirements=["pandas"],
                             signature=infer_signature(frame, frame[["amount"]]))
    spec = derive_spec(tmp_path / "m", "mixed")
    assert spec.flavor == "pyfunc" and spec.triton_backend == "python"
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [
        ("amount", "FP64", (-1, 1)), ("plan_type", "BYTES", (-1, 1)), ("seats", "INT64", (-1, 1)),
        ("trial", "BOOL", (-1, 1))]
    assert [f.name for f in spec.features] == ["amount", "plan type", "seats", "trial"]
    assert spec.outputs == (Tensor(name="amount", dtype="FP64", shape=(-1, 1)),)


@pytest.mark.filterwarnings("ignore::UserWarning")  # MLflow's hints on type hints and input examples
def test_an_unsupported_column_type_is_refused(tmp_path: Path) -> None:
    import mlflow.pyfunc
    import pandas as pd
    from mlflow.models import infer_signature

    class Echo(mlflow.pyfunc.PythonModel):  # type: ignore[misc]
        def predict(self, context: object, model_input: pd.DataFrame, params: object = None) -> pd.DataFrame:
            return model_input

    frame = pd.DataFrame({"at": pd.to_datetime(["2026-01-01", "2026-01-02"]), "x": [1.0, 2.0]})
    mlflow.pyfunc.save_model(str(tmp_path / "m"), python_model=Echo(), pip_requirements=["pandas"],
                             signature=infer_signature(frame, frame[["x"]]))
    with pytest.raises(ContractError, match=r"signature inputs\[0\] \(at\): column type 'datetime' not supported"):
        derive_spec(tmp_path / "m", "dated")
