"""Bring your own model: MLflow models of other flavors published from their spec and served by Triton.

Each model is logged the ordinary MLflow way (``mlflow.sklearn.log_model`` with a signature and an
input example; ``mlflow.onnx.log_model`` of a graph with two inputs of different dtypes and two
outputs; ``mlflow.lightgbm.log_model`` of a 30-tree regressor on the diabetes set, converted with
onnxmltools), registered, and published with :func:`modelops.serving.spec_publish.publish_model`. For
each: Triton's answers on the evaluation sample equal the framework's own within the tolerance
(probabilities 1e-5 absolute, the regressor's predictions 1e-4 relative), and the config Triton reports
equals the one rendered from the spec. The models are released at the same time (three threads) to
show they do not interfere. The canary release of such a model through the gateway
is not wired yet (the per-model edge).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from modelops.errors import ContractError
from modelops.modelspec.convert import REGRESSION_TOLERANCE
from modelops.modelspec.render import config_json
from modelops.objectstore import ObjectStore
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_files import SPEC_FILE, served_spec
from modelops.serving.spec_publish import publish_model
from modelops.serving.triton import TritonClient
from tests.unit.test_mlflow_models import two_input_model

pytestmark = pytest.mark.integration


def _register(mlflow_uri: str, name: str, log: Any) -> str:
    import mlflow

    mlflow.set_tracking_uri(mlflow_uri)
    mlflow.set_experiment("model-zoo")
    with mlflow.start_run():
        logged = log()
    version = mlflow.register_model(logged.model_uri, name)
    return str(version.version)


def _log_sklearn() -> Any:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer(as_frame=True)
    x, y = data.data, data.target
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(x, model.predict_proba(x)),
                                    input_example=x.iloc[:20])


def _diabetes() -> tuple[Any, Any]:
    from sklearn.datasets import load_diabetes

    data = load_diabetes(as_frame=True)
    return data.data, data.target


@functools.cache
def _lightgbm_regressor() -> Any:
    import lightgbm as lgb

    x, y = _diabetes()
    return lgb.LGBMRegressor(n_estimators=30, num_leaves=8, verbose=-1).fit(x, y)


def _log_lightgbm() -> Any:
    import mlflow.lightgbm
    from mlflow.models import infer_signature

    x, _ = _diabetes()
    model = _lightgbm_regressor()
    return mlflow.lightgbm.log_model(model, name="model", signature=infer_signature(x, model.predict(x)),
                                     input_example=x.iloc[:20])


def _log_onnx() -> Any:
    import mlflow.onnx

    graph, signature, example = two_input_model()
    return mlflow.onnx.log_model(graph, name="model", signature=signature, input_example=example)


@pytest.fixture()
def names(triton_url: str) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    client = TritonClient(triton_url)
    for name in made:
        if client.ready_versions(name):
            client.unload(name)


def test_three_models_of_other_flavors_are_published_at_once_and_answer_as_their_frameworks(
    stack_settings: Any, mlflow_uri: str, triton_url: str, object_store: ObjectStore, names: list[str],
) -> None:
    suffix = uuid.uuid4().hex[:6]
    cancer, onnx, diabetes = f"zoo_cancer_{suffix}", f"zoo_two_inputs_{suffix}", f"zoo_diabetes_lgbm_{suffix}"
    names.extend([cancer, onnx, diabetes])
    versions = {cancer: _register(mlflow_uri, cancer, _log_sklearn), onnx: _register(mlflow_uri, onnx, _log_onnx),
                diabetes: _register(mlflow_uri, diabetes, _log_lightgbm)}
    with ThreadPoolExecutor(3) as pool:
        results = dict(zip(versions, pool.map(lambda n: publish_model(n, versions[n], cfg=stack_settings), versions),
                           strict=True))
    client = TritonClient(triton_url)
    for name, result in results.items():
        assert result.triton_version == 1 and client.ready_versions(name) == [1]
        spec_doc = json.loads(object_store.get_bytes(f"{REPOSITORY_PREFIX}{name}/1/{SPEC_FILE}"))
        assert spec_doc["name"] == name and spec_doc["schema_version"] == 1
        assert spec_doc["source"]["model_uri"] == f"models:/{name}/{versions[name]}"
        from modelops.modelspec.spec import ModelSpec

        spec = ModelSpec.from_dict(spec_doc)
        expected = config_json(served_spec(spec, stack_settings.triton_backend), versions=[1])
        assert config_mismatches(expected, {**client.model_config(name, 1),
                                            "version_policy": expected["version_policy"]}) == []
        assert set(result.timings_s) == {"prepare_s", "upload_s", "load_s", "verify_s"}
    assert spec_doc is not None
    assert results[cancer].max_abs_diff <= 1e-5
    # The regressor: max_abs_diff is absolute; the publish verified 1e-4 relative to max(|prediction|, 1).
    x, _ = _diabetes()
    predictions = _lightgbm_regressor().predict(x.iloc[:20])
    assert results[diabetes].max_abs_diff <= REGRESSION_TOLERANCE * float(np.abs(predictions).max())
    got = client.infer(diabetes, 1, {"input": x.iloc[:20].to_numpy(np.float32)}, ("variable",))
    np.testing.assert_allclose(got["variable"].ravel(), predictions, rtol=REGRESSION_TOLERANCE)
    # The two-input model's answers, asked again here: total = sum(x) * ids, shifted = ids + 1.
    x = np.random.default_rng(3).normal(size=(4, 8)).astype(np.float32)
    ids = np.arange(4, dtype=np.int64).reshape(4, 1)
    got = client.infer(onnx, 1, {"x": x, "ids": ids}, ("total", "shifted"))
    np.testing.assert_allclose(got["total"], x.sum(axis=1, keepdims=True) * ids, rtol=1e-5)
    np.testing.assert_array_equal(got["shifted"], ids + 1)
    # Publishing the same MLflow version again gives the same integer and uploads nothing.
    again = publish_model(cancer, versions[cancer], cfg=stack_settings)
    assert (again.triton_version, again.sha256, again.uploaded) == (1, results[cancer].sha256, False)


def test_a_model_without_evaluation_data_is_refused_before_triton(
    stack_settings: Any, mlflow_uri: str, triton_url: str, names: list[str],
) -> None:
    def log() -> Any:
        import mlflow.sklearn
        from mlflow.models import infer_signature
        from sklearn.datasets import load_breast_cancer
        from sklearn.linear_model import LogisticRegression

        data = load_breast_cancer(as_frame=True)
        model = LogisticRegression(max_iter=2000).fit(data.data, data.target)
        return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(
            data.data, model.predict_proba(data.data)))

    name = f"zoo_noeval_{uuid.uuid4().hex[:6]}"
    names.append(name)
    version = _register(mlflow_uri, name, log)
    with pytest.raises(ContractError, match="no evaluation data to check it with"):
        publish_model(name, version, cfg=stack_settings)
    assert TritonClient(triton_url).ready_versions(name) == []
