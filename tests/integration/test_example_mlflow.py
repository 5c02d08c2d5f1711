"""The reference model against the real MLflow server and object store of the embedded stack."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from modelops.errors import ObjectStoreError, RegistryError
from modelops.example import synthetic
from modelops.example.tables import load_feature_tables, publish_feature_tables, read_pointer, users_key
from modelops.example.tracking import LoggedModel, log_trained_model
from modelops.example.train import TrainedModel, TrainSpec, onnx_scores, train
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore

pytestmark = pytest.mark.integration

FEATURES = recommender_features()
WORLD = synthetic.WorldSpec(seed=21, n_users=500, n_items=300, n_requests=500)


@pytest.fixture(scope="module")
def trained() -> TrainedModel:
    return train(TrainSpec(world=WORLD, hidden=(8,), max_iter=10, variant="faulty-errors"), FEATURES)


@pytest.fixture(scope="module")
def logged(trained: TrainedModel, mlflow_uri: str) -> LoggedModel:
    return log_trained_model(
        trained, mlflow_uri, register_name=f"example-{uuid.uuid4().hex[:8]}", experiment="modelops-example-tests"
    )


def test_run_holds_params_tags_metrics(logged: LoggedModel, trained: TrainedModel, mlflow_uri: str) -> None:
    run = mlflow.MlflowClient(mlflow_uri).get_run(logged.run_id)
    assert run.data.params["variant"] == "faulty-errors" and run.data.params["variant_error_rate"] == "0.05"
    assert run.data.params["seed"] == "21"
    tags = run.data.tags
    assert tags["features_sha256"] == trained.features_sha256 and tags["owner"] == "recsys-team"
    assert tags["data_start"] < tags["data_end"]
    assert run.data.metrics["auc"] == pytest.approx(trained.metrics["auc"])
    assert {"logloss", "oracle_auc"} <= set(run.data.metrics)


def test_onnx_artifacts_download_intact_and_score_like_the_logged_sklearn_model(
    logged: LoggedModel, trained: TrainedModel, mlflow_uri: str, tmp_path: Path
) -> None:
    mlflow.set_tracking_uri(mlflow_uri)
    folder = Path(mlflow.artifacts.download_artifacts(logged.onnx_artifact_uri, dst_path=str(tmp_path)))
    pre, net = (folder / "preprocess.onnx").read_bytes(), (folder / "model.onnx").read_bytes()
    assert hashlib.sha256(pre).hexdigest() == logged.onnx_sha256["preprocess"]
    assert hashlib.sha256(net).hexdigest() == logged.onnx_sha256["model"]
    assert json.loads((folder / "variant.json").read_text()) == {"variant": "faulty-errors", "error_rate": 0.05}
    sklearn_model = mlflow.sklearn.load_model(logged.model_uri)
    x = trained.eval_sample.drop(columns=["score"]).head(200)
    expected = sklearn_model.predict_proba(x)[:, 1]
    np.testing.assert_allclose(onnx_scores(pre, net, x.to_numpy(np.float32))[:, 0], expected, atol=1e-5)


def test_eval_sample_and_signature(logged: LoggedModel, mlflow_uri: str, tmp_path: Path) -> None:
    mlflow.set_tracking_uri(mlflow_uri)
    path = mlflow.artifacts.download_artifacts(f"runs:/{logged.run_id}/eval/features.parquet", dst_path=str(tmp_path))
    sample = pd.read_parquet(path)
    assert list(sample.columns) == [f.name for f in FEATURES] + ["score"] and len(sample) > 500
    info = mlflow.models.get_model_info(logged.model_uri)
    assert [c["name"] for c in info.signature.inputs.to_dict()][:2] == ["user_age_days", "user_sessions_7d"]


def test_model_version_is_registered_with_lineage(logged: LoggedModel, mlflow_uri: str) -> None:
    assert logged.registered_version == 1
    version = mlflow.MlflowClient(mlflow_uri).get_model_version(logged.registered_name, "1")
    assert version.tags["run_id"] == logged.run_id
    assert version.tags["onnx_model_sha256"] == logged.onnx_sha256["model"]


def test_unreachable_server_is_a_registry_error(trained: TrainedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with pytest.raises(RegistryError, match=r"127\.0\.0\.1:9"):
        log_trained_model(trained, "http://127.0.0.1:9")


def test_feature_tables_publish_load_and_move_the_pointer(object_store: ObjectStore) -> None:
    prefix = f"test-features-{uuid.uuid4().hex[:8]}"
    users, items = synthetic.generate_tables(FEATURES, WORLD)
    first = publish_feature_tables(object_store, "2026-11-28", users, items, prefix=prefix)
    loaded_users, loaded_items, snapshot = load_feature_tables(object_store, prefix)
    assert snapshot == "2026-11-28"
    pd.testing.assert_frame_equal(loaded_users, users)
    pd.testing.assert_frame_equal(loaded_items, items)
    again = publish_feature_tables(object_store, "2026-11-28", users, items, prefix=prefix)
    assert again == first  # idempotent: same bytes, same sha256
    newer_users = users.assign(user_ctr_30d=users["user_ctr_30d"] / 2)
    publish_feature_tables(object_store, "2026-11-29", newer_users, items, prefix=prefix)
    assert read_pointer(object_store, prefix)["snapshot"] == "2026-11-29"
    loaded_users, _, snapshot = load_feature_tables(object_store, prefix)
    assert snapshot == "2026-11-29" and loaded_users["user_ctr_30d"].equals(newer_users["user_ctr_30d"])
    assert object_store.exists(users_key("2026-11-28", prefix))  # old snapshots stay readable

    buffer = io.BytesIO()
    users.head(3).to_parquet(buffer, index=False)
    object_store.put_bytes(users_key("2026-11-29", prefix), buffer.getvalue())
    with pytest.raises(ObjectStoreError, match="sha256"):
        load_feature_tables(object_store, prefix)
