"""Bring your own model: MLflow models of other flavors released by ``model_release`` and served by Triton.

Each model is logged the ordinary MLflow way (``mlflow.sklearn.log_model`` with a signature and an
input example; ``mlflow.onnx.log_model`` of a graph with two inputs of different dtypes and two
outputs; ``mlflow.lightgbm.log_model`` of a 30-tree regressor on the diabetes set, converted with
onnxmltools; a Triton model directory with a python-backend model, logged with the triton flavor as
the mlflow-triton-plugin writes it), registered, and released through the real ``model_release`` DAG
— all at the same time,
so they show that they do not interfere (routes, index, locks, Triton configs). For each: the run
succeeds (contract gate with the suite rendered from the model's own spec, publish, verify, first
release routed 100 % and promoted), Triton's answers on the evaluation sample equal the framework's
own within the tolerance (probabilities 1e-5 absolute, the regressor's predictions 1e-4 relative), the
config Triton reports equals the one rendered from the spec, and the gateway answers the model's rows
as Triton does. Refusals before Triton fail the release at its gate with their message on the version.
The canary of such a model (a collapsed second version rolled back) is in ``test_zoo_canary.py``.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.modelspec.convert import REGRESSION_TOLERANCE
from modelops.modelspec.render import config_json
from modelops.objectstore import ObjectStore
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_files import SPEC_FILE, served_spec
from modelops.serving.spec_publish import publish_model
from modelops.serving.triton import TritonClient
from tests.support.releases import ended
from tests.unit.test_flavor_triton import TritonFlavor, affine_sample, write_affine_folder
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


#: A first release has no canary; the options keep any later one short (as the other release tests).
RELEASE = {"canary_steps": "50,100", "analysis_interval_s": 5, "min_requests": 20, "stable_grace_s": 4}


def release(airflow: AirflowClient, model: str, version: str, **conf: Any) -> str:
    """Trigger ``model_release`` for ``model``/``version``; returns the run id."""
    return airflow.trigger("model_release", {"model": model, "version": version, **RELEASE, **conf},
                           run_id=f"zoo-{model}-{version}-{uuid.uuid4().hex[:6]}")


def _log_triton(folder: Path, sample: Path) -> Any:
    """A Triton model directory (python backend, ``y = 2x + 1``), triton flavor, its sample under eval/."""
    import mlflow
    from mlflow.models import Model

    mlflow.log_artifact(str(sample), "eval")
    return Model.log(None, name="model", flavor=TritonFlavor, triton_model_path=str(folder))


@pytest.fixture(scope="module")
def zoo(stack_settings: Any, mlflow_uri: str, airflow: AirflowClient,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The zoo's models registered and released by ``model_release`` at the same time (one run each)."""
    suffix = uuid.uuid4().hex[:6]
    names = {"cancer": f"zoo_cancer_{suffix}", "onnx": f"zoo_two_inputs_{suffix}",
             "diabetes": f"zoo_diabetes_lgbm_{suffix}", "affine": f"zoo_affine_{suffix}"}
    work = tmp_path_factory.mktemp("zoo")
    folder = write_affine_folder(work / "src")
    np.savez(work / "sample.npz", **affine_sample(20))
    logs = {"cancer": _log_sklearn, "onnx": _log_onnx, "diabetes": _log_lightgbm,
            "affine": lambda: _log_triton(folder, work / "sample.npz")}
    versions = {key: _register(mlflow_uri, names[key], logs[key]) for key in names}
    runs = {key: release(airflow, names[key], versions[key]) for key in names}
    states = {key: ended(airflow, names[key], runs[key], 600) for key in names}
    yield {"names": names, "versions": versions, "runs": runs, "states": states}
    client = TritonClient(stack_settings.triton_http_url)
    for name in names.values():
        if client.ready_versions(name):
            client.unload(name)


def _gateway_rows(cfg: Any, model: str, body: dict[str, Any]) -> Any:
    response = requests.post(f"{cfg.gateway_url}/v1/models/{model}/predict", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model_version"] == 1 and answer["feedback_token"]
    return answer["predictions"]


def test_the_zoo_is_released_at_once_by_model_release_and_answers_as_its_frameworks(
    zoo: dict[str, Any], stack_settings: Any, airflow: AirflowClient, triton_url: str, object_store: ObjectStore,
) -> None:
    from modelops.documents.routes import load_routes, routes_key
    from modelops.modelspec.spec import ModelSpec
    from modelops.registry.mlflow_registry import MlflowRegistry

    names, versions = zoo["names"], zoo["versions"]
    for key in names:
        assert zoo["states"][key] == "success", airflow.failed_tasks_logs("model_release", zoo["runs"][key])
    client, registry = TritonClient(triton_url), MlflowRegistry.from_settings()
    for key, name in names.items():
        published = airflow.xcom("model_release", zoo["runs"][key], "publish")
        assert published["kind"] == "spec" and published["triton_version"] == 1
        assert set(published["timings_s"]) == {"prepare_s", "upload_s", "load_s", "verify_s"}
        assert client.ready_versions(name) == [1]
        routes = load_routes(object_store.get_bytes(routes_key(name)))
        assert routes.stable.version == 1 and routes.canary is None
        info = registry.get(name, versions[key])
        assert info.stage == "Production" and "champion" in info.aliases
        assert info.tags["modelops.contract_passed"] == "true" and info.tags["modelops.triton_version"] == "1"
        spec_doc = json.loads(object_store.get_bytes(f"{REPOSITORY_PREFIX}{name}/1/{SPEC_FILE}"))
        assert spec_doc["name"] == name and spec_doc["schema_version"] == 1
        assert spec_doc["source"]["model_uri"] == f"models:/{name}/{versions[key]}"
        assert info.tags["modelops.spec_uri"].endswith(f"{name}/1/{SPEC_FILE}")
        spec = ModelSpec.from_dict(spec_doc)
        expected = config_json(served_spec(spec, stack_settings.triton_backend), versions=[1])
        assert config_mismatches(expected, {**client.model_config(name, 1),
                                            "version_policy": expected["version_policy"]}) == []
    # The classifier's probabilities: the publish compared them with predict_proba within 1e-5.
    cancer = airflow.xcom("model_release", zoo["runs"]["cancer"], "publish")
    assert cancer["max_abs_diff"] <= 1e-5
    # The regressor: max_abs_diff is absolute; the publish verified 1e-4 relative to max(|prediction|, 1).
    x, _ = _diabetes()
    predictions = _lightgbm_regressor().predict(x.iloc[:20])
    diabetes = airflow.xcom("model_release", zoo["runs"]["diabetes"], "publish")
    assert diabetes["max_abs_diff"] <= REGRESSION_TOLERANCE * float(np.abs(predictions).max())
    got = client.infer(names["diabetes"], 1, {"input": x.iloc[:20].to_numpy(np.float32)}, ("variable",))
    np.testing.assert_allclose(got["variable"].ravel(), predictions, rtol=REGRESSION_TOLERANCE)
    # Through the gateway, in MLflow's scoring form, the routed version answers as Triton does.
    served = _gateway_rows(stack_settings, names["diabetes"], {"dataframe_split": json.loads(
        x.iloc[:5].to_json(orient="split", index=False))})
    np.testing.assert_allclose(np.asarray(served, dtype=np.float64).ravel(), predictions[:5],
                               rtol=REGRESSION_TOLERANCE)
    # The two-input model's answers: total = sum(x) * ids, shifted = ids + 1, from Triton and the gateway.
    rows = np.random.default_rng(3).normal(size=(4, 8)).astype(np.float32)
    ids = np.arange(4, dtype=np.int64).reshape(4, 1)
    got = client.infer(names["onnx"], 1, {"x": rows, "ids": ids}, ("total", "shifted"))
    np.testing.assert_allclose(got["total"], rows.sum(axis=1, keepdims=True) * ids, rtol=1e-5)
    np.testing.assert_array_equal(got["shifted"], ids + 1)
    served = _gateway_rows(stack_settings, names["onnx"], {"inputs": {"x": rows.tolist(), "ids": ids.tolist()}})
    np.testing.assert_allclose(np.asarray(served["total"], dtype=np.float64).ravel(), got["total"].ravel(),
                               rtol=1e-6)
    # The triton-flavor directory: published as logged (its model.py, its parameter), verified by the
    # outputs logged beside it; Triton and the gateway answer 2x + 1.
    affine = airflow.xcom("model_release", zoo["runs"]["affine"], "publish")
    assert (affine["served_as"], affine["verified_by"]) == ("triton", "logged_outputs"), affine
    x4 = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(client.infer(names["affine"], 1, {"INPUT0": x4}, ("OUTPUT0",))["OUTPUT0"],
                               2 * x4 + 1, rtol=1e-6)
    served = _gateway_rows(stack_settings, names["affine"], {"inputs": {"INPUT0": x4.tolist()}})
    np.testing.assert_allclose(np.asarray(served, dtype=np.float64), 2 * x4 + 1, rtol=1e-6)
    # Publishing the same MLflow version again gives the same integer and uploads nothing.
    again = publish_model(names["cancer"], versions["cancer"], cfg=stack_settings)
    assert (again.triton_version, again.sha256, again.uploaded) == (1, cancer["sha256"], False)


def _log_without_evaluation_data() -> Any:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    data = load_breast_cancer(as_frame=True)
    model = LogisticRegression(max_iter=2000).fit(data.data, data.target)
    return mlflow.sklearn.log_model(model, name="model", signature=infer_signature(
        data.data, model.predict_proba(data.data)))


def _log_without_signature() -> Any:
    import mlflow.sklearn
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    data = load_breast_cancer(as_frame=True)
    return mlflow.sklearn.log_model(LogisticRegression(max_iter=2000).fit(data.data, data.target), name="model")


def test_models_the_platform_cannot_check_are_refused_at_the_gate_before_triton(
    stack_settings: Any, mlflow_uri: str, triton_url: str, airflow: AirflowClient, object_store: ObjectStore,
) -> None:
    """No evaluation data, no signature, a sample breaking the model's own contract: refused, nothing uploaded."""
    from mlflow import MlflowClient

    from modelops.registry.mlflow_registry import MlflowRegistry

    suffix = uuid.uuid4().hex[:6]
    cases = {f"zoo_noeval_{suffix}": (_log_without_evaluation_data, "no evaluation data to check it with"),
             f"zoo_nosig_{suffix}": (_log_without_signature, "signature"),
             f"zoo_badsample_{suffix}": (_log_sklearn, "mean radius")}
    versions = {name: _register(mlflow_uri, name, log) for name, (log, _) in cases.items()}
    # The model's own contract (a registered-model tag, as a user declares it): no radius above 10.
    bad = f"zoo_badsample_{suffix}"
    MlflowClient(mlflow_uri).set_registered_model_tag(
        bad, "modelops.spec.features", json.dumps({"mean radius": {"max": 10.0}}))
    runs = {name: release(airflow, name, versions[name]) for name in cases}
    registry = MlflowRegistry.from_settings()
    for name, (_, message) in cases.items():
        assert airflow.wait("model_release", runs[name], timeout_s=300) == "failed"
        states = {t["task_id"]: t["state"] for t in airflow.task_instances("model_release", runs[name])}
        assert states["contract_gate"] == "failed" and states["publish"] in ("upstream_failed", None), states
        info = registry.get(name, versions[name])
        assert info.tags["modelops.contract_passed"] == "false"
        assert message in info.tags["modelops.contract_result"], info.tags["modelops.contract_result"]
        assert message in airflow.failed_tasks_logs("model_release", runs[name])
        assert TritonClient(triton_url).ready_versions(name) == []
        assert list(object_store.list_keys(f"{REPOSITORY_PREFIX}{name}/")) == []
