"""Bring your own model, item 2: the triton and pyfunc flavors, the parity fallback, the dependency refusal.

Against the embedded stack (MLflow, SeaweedFS, Triton 2.51 with the python backend only). Each model is
logged the ordinary MLflow way, registered, and published with
:func:`modelops.serving.spec_publish.publish_model`:

(a) a Triton model directory with a python-backend model (``y = scale * x + 1`` over FP32 ``[N, 4]``,
    ``scale`` a config parameter), logged with the triton flavor as the mlflow-triton-plugin writes it
    (``mlflow.models.Model.log`` with its ``save_model``) and an ``eval/sample.npz`` holding inputs and
    expected outputs: Triton's reported config equals the spec's (parameters included), its answers
    the logged ones; the same model logged with inputs only is the same Triton version, verified by
    consistency;
(b) a ``PythonModel`` logged from code with a column signature (a column name with a space, two
    outputs): served by the python backend, answering as ``mlflow.pyfunc.load_model(...).predict``;
(c) a scikit-learn classifier skl2onnx cannot convert (a ``LogisticRegression`` subclass with tempered
    probabilities, its module shipped as an MLflow code path): served by the pyfunc path with
    ``predict_proba``, never by a graph;
(d) a pyfunc model declaring ``definitely-not-installed-pkg==1.0``: refused before Triton, the package
    named, nothing uploaded and no version number taken.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modelops.errors import ContractError
from modelops.modelspec.render import config_json
from modelops.modelspec.spec import ModelSpec
from modelops.objectstore import ObjectStore
from modelops.serving.index_store import index_key
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_files import SPEC_FILE, served_spec
from modelops.serving.spec_publish import SpecPublishResult, publish_model
from modelops.serving.triton import TritonClient
from tests.unit.test_flavor_pyfunc import TEMPERED_SOURCE, log_scorer, scorer_frame, tempered_module
from tests.unit.test_flavor_triton import TritonFlavor, affine_sample, write_affine_folder

pytestmark = pytest.mark.integration


@pytest.fixture()
def names(triton_url: str) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    client = TritonClient(triton_url)
    for name in made:
        if client.ready_versions(name):
            client.unload(name)


def _register(mlflow_uri: str, name: str, log: Any) -> str:
    import mlflow

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("model-zoo-flavors")
    with mlflow.start_run():
        logged = log()
    return str(mlflow.register_model(logged.model_uri, name).version)


def _config_matches(client: TritonClient, name: str, version: int, spec_doc: dict[str, Any],
                    backend: str) -> None:
    spec = ModelSpec.from_dict(spec_doc)
    expected = config_json(served_spec(spec, backend), versions=[version])
    reported = client.model_config(name, version)
    assert config_mismatches(expected, {**reported, "version_policy": expected["version_policy"]}) == []


def _spec_doc(store: ObjectStore, result: SpecPublishResult) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(store.get_bytes(f"{REPOSITORY_PREFIX}{result.model}/{result.triton_version}/"
                                                     f"{SPEC_FILE}"))
    return doc


def test_a_triton_model_directory_is_published_from_its_config_and_verified_by_its_logged_outputs(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore, names: list[str],
    tmp_path: Path,
) -> None:
    import mlflow
    from mlflow.models import Model

    name = f"zoo_affine_{uuid.uuid4().hex[:6]}"
    names.append(name)
    folder = write_affine_folder(tmp_path / "src")
    np.savez(tmp_path / "sample.npz", **affine_sample(20))  # 20 rows: asked in batches of max_batch_size 8
    np.savez(tmp_path / "inputs.npz", INPUT0=affine_sample(20)["INPUT0"])

    def log(sample: Path) -> Any:
        mlflow.log_artifact(str(sample), "eval")
        return Model.log(None, name="model", flavor=TritonFlavor, triton_model_path=str(folder))  # None: artifact_path

    first = _register(mlflow_uri, name, lambda: log(tmp_path / "sample.npz"))
    result = publish_model(name, first, cfg=stack_settings)
    assert (result.triton_version, result.served_as, result.verified_by) == (1, "triton", "logged_outputs")
    client = TritonClient(triton_url)
    assert client.ready_versions(name) == [1]
    spec_doc = _spec_doc(object_store, result)
    assert spec_doc["flavor"] == "triton" and spec_doc["backend"] == "python" and spec_doc["parameters"] == {
        "scale": "2"}
    _config_matches(client, name, 1, spec_doc, stack_settings.triton_backend)
    assert client.model_config(name, 1)["parameters"]["scale"]["string_value"] == "2"
    keys = set(object_store.list_keys(f"{REPOSITORY_PREFIX}{name}/1/"))
    assert f"{REPOSITORY_PREFIX}{name}/1/model.py" in keys  # the user's model.py, as logged
    assert object_store.get_bytes(f"{REPOSITORY_PREFIX}{name}/1/model.py") == (folder / "1" / "model.py").read_bytes()
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(client.infer(name, 1, {"INPUT0": x}, ("OUTPUT0",))["OUTPUT0"], 2 * x + 1, rtol=1e-6)
    # the same directory logged with inputs only (another MLflow version: its spec's source is rewritten):
    # the same Triton version, verified by its own consistency
    second = _register(mlflow_uri, name, lambda: log(tmp_path / "inputs.npz"))
    again = publish_model(name, second, cfg=stack_settings)
    assert (again.triton_version, again.sha256, again.verified_by) == (1, result.sha256, "consistency")
    assert "consistency" in again.notes[0]


def test_a_python_model_is_served_by_the_python_backend_answering_as_mlflow_loads_it(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore, names: list[str],
    tmp_path: Path,
) -> None:
    import mlflow.pyfunc

    name = f"zoo_scorer_{uuid.uuid4().hex[:6]}"
    names.append(name)
    version = _register(mlflow_uri, name, lambda: log_scorer(tmp_path))
    result = publish_model(name, version, cfg=stack_settings)
    assert (result.served_as, result.verified_by, result.triton_version) == ("pyfunc", "model", 1)
    client = TritonClient(triton_url)
    spec_doc = _spec_doc(object_store, result)
    _config_matches(client, name, 1, spec_doc, stack_settings.triton_backend)
    assert f"{REPOSITORY_PREFIX}{name}/1/mlflow_model/MLmodel" in set(object_store.list_keys(
        f"{REPOSITORY_PREFIX}{name}/1/"))
    frame = scorer_frame(7).iloc[::-1].reset_index(drop=True)  # other rows than the evaluation sample
    got = client.infer(name, 1, {"input": frame.to_numpy()}, ("score", "flag"))
    want = mlflow.pyfunc.load_model(f"models:/{name}/{version}").predict(frame)
    np.testing.assert_allclose(got["score"].ravel(), want["score"].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(got["flag"].ravel(), want["flag"].to_numpy())
    assert got["flag"].dtype == np.int64


def test_a_classifier_skl2onnx_cannot_convert_is_served_by_pyfunc_never_by_a_graph(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore, names: list[str],
    tmp_path: Path,
) -> None:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer

    name = f"zoo_tempered_{uuid.uuid4().hex[:6]}"
    names.append(name)
    module = tempered_module(tmp_path, "tempered_zoo")
    assert (tmp_path / "tempered_zoo.py").read_text() == TEMPERED_SOURCE
    data = load_breast_cancer(as_frame=True)
    x = data.data.iloc[:, :6]
    model = module.TemperedLogistic(max_iter=2000).fit(x, data.target)
    version = _register(mlflow_uri, name, lambda: mlflow.sklearn.log_model(
        model, name="model", serialization_format="cloudpickle", code_paths=[str(tmp_path / "tempered_zoo.py")],
        signature=infer_signature(x, model.predict_proba(x)), input_example=x.iloc[:20],
        pip_requirements=["scikit-learn", "cloudpickle"]))
    result = publish_model(name, version, cfg=stack_settings)
    assert result.served_as == "pyfunc" and "the ONNX conversion failed: skl2onnx cannot convert" in result.notes[0]
    assert result.max_abs_diff <= 1e-5
    keys = set(object_store.list_keys(f"{REPOSITORY_PREFIX}{name}/1/"))
    assert not any(k.endswith(".onnx") for k in keys)  # no graph anywhere in the version
    spec_doc = _spec_doc(object_store, result)
    assert spec_doc["flavor"] == "pyfunc" and spec_doc["parameters"] == {"predict_fn": "predict_proba"}
    client = TritonClient(triton_url)
    _config_matches(client, name, 1, spec_doc, stack_settings.triton_backend)
    rows = x.iloc[100:110]
    got = client.infer(name, 1, {"input": rows.to_numpy()}, ("probabilities",))["probabilities"]
    np.testing.assert_allclose(got, model.predict_proba(rows), atol=1e-12)
    plain = np.exp(model.decision_function(rows))
    assert np.abs(got[:, 1] - plain / (1 + plain)).max() > 1e-2  # not what a plain logistic graph would say


def test_a_pyfunc_model_needing_a_missing_package_is_refused_before_triton_and_nothing_is_uploaded(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore, names: list[str],
    tmp_path: Path,
) -> None:
    name = f"zoo_missing_{uuid.uuid4().hex[:6]}"
    names.append(name)
    version = _register(mlflow_uri, name, lambda: log_scorer(
        tmp_path, requirements=["mlflow", "definitely-not-installed-pkg==1.0"]))
    with pytest.raises(ContractError, match=r"(?s)model \S+ \(pyfunc\): the serving environment .*"
                                            r"definitely-not-installed-pkg==1.0: not installed"):
        publish_model(name, version, cfg=stack_settings)
    assert list(object_store.list_keys(f"{REPOSITORY_PREFIX}{name}/")) == []
    assert not object_store.exists(index_key(name))  # no version number was taken
    assert TritonClient(triton_url).ready_versions(name) == []
