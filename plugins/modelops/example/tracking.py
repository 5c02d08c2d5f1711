"""Log a :class:`~modelops.example.train.TrainedModel` to MLflow and register it.

Run layout (artifacts)::

    onnx/preprocess.onnx   features [-1,128] -> scaled [-1,128]
    onnx/model.onnx        scaled [-1,128]   -> score [-1,1]
    onnx/variant.json      {"variant": ...} applied by the served python model
    eval/features.parquet  the 128 feature columns + score (holdout sample; drift baseline)

plus the sklearn pipeline as an MLflow model named ``model`` (signature + input example,
``predict_proba`` as pyfunc). MLflow errors become :class:`~modelops.errors.RegistryError`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelops.errors import RegistryError
from modelops.example.train import TrainedModel

DEFAULT_EXPERIMENT = "modelops-example"
DEFAULT_OWNER = "recsys-team"
ONNX_ARTIFACT_DIR = "onnx"
EVAL_ARTIFACT = "eval/features.parquet"


@dataclass(frozen=True)
class LoggedModel:
    """Where the trained model went."""

    run_id: str
    model_uri: str
    registered_name: str | None
    registered_version: int | None
    onnx_sha256: dict[str, str]
    onnx_artifact_uri: str
    variant: str


def _pip_requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{dist}=={version(dist)}" for dist in ("scikit-learn", "skops", "numpy", "pandas", "mlflow")]


def _params(model: TrainedModel) -> dict[str, Any]:
    spec = model.spec
    return {
        "seed": spec.world.seed,
        "n_users": spec.world.n_users,
        "n_items": spec.world.n_items,
        "n_requests": spec.world.n_requests,
        "hidden": ",".join(map(str, spec.hidden)) or "logreg",
        "max_iter": spec.max_iter,
        "holdout_share": spec.holdout_share,
        "variant": spec.variant,
        "n_features": len(model.feature_names),
        **{f"variant_{k}": v for k, v in spec.variant_document().items() if k != "variant"},
    }


def _tags(model: TrainedModel, owner: str) -> dict[str, str]:
    return {
        "data_start": model.data_start.isoformat(),
        "data_end": model.data_end.isoformat(),
        "seed": str(model.spec.world.seed),
        "variant": model.spec.variant,
        "features_sha256": model.features_sha256,
        "owner": owner,
        "onnx_preprocess_sha256": model.onnx_sha256["preprocess"],
        "onnx_model_sha256": model.onnx_sha256["model"],
        "modelops.example": "true",
    }


def log_trained_model(
    model: TrainedModel,
    tracking_uri: str,
    *,
    register_name: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    owner: str = DEFAULT_OWNER,
    run_name: str | None = None,
) -> LoggedModel:
    """Log params, tags, metrics, the sklearn model, the ONNX files and the eval sample; register.

    Args:
        model: the output of :func:`modelops.example.train.train`.
        tracking_uri: the MLflow tracking server.
        register_name: registered model name; no registration when None.
        experiment: the experiment (created when missing).
        owner: the ``owner`` tag (copied into model-info.json downstream).
        run_name: the run name; ``<variant>-seed<seed>`` when omitted.

    Raises:
        RegistryError: MLflow refused or failed a call (the message names the server).
    """
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.models import infer_signature

    try:
        import skops.io as sio

        trusted = sio.get_untrusted_types(data=sio.dumps(model.pipeline))
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        client = mlflow.MlflowClient(tracking_uri)
        name = run_name or f"{model.spec.variant}-seed{model.spec.world.seed}"
        with mlflow.start_run(run_name=name) as run, tempfile.TemporaryDirectory() as tmp:
            mlflow.log_params(_params(model))
            mlflow.set_tags(_tags(model, owner))
            mlflow.log_metrics(dict(model.metrics))
            signature = infer_signature(
                model.input_example, model.pipeline.predict_proba(model.input_example)
            )
            info = mlflow.sklearn.log_model(
                model.pipeline,
                name="model",
                signature=signature,
                input_example=model.input_example,
                pyfunc_predict_fn="predict_proba",
                skops_trusted_types=trusted,
                pip_requirements=_pip_requirements(),  # inferring them loads the model again (~15 s)
            )
            onnx_dir = Path(tmp) / ONNX_ARTIFACT_DIR
            onnx_dir.mkdir()
            (onnx_dir / "preprocess.onnx").write_bytes(model.preprocess_onnx)
            (onnx_dir / "model.onnx").write_bytes(model.model_onnx)
            (onnx_dir / "variant.json").write_bytes(model.variant_json)
            mlflow.log_artifacts(str(onnx_dir), artifact_path=ONNX_ARTIFACT_DIR)
            eval_path = Path(tmp) / Path(EVAL_ARTIFACT).name
            model.eval_sample.to_parquet(eval_path, index=False)
            mlflow.log_artifact(str(eval_path), artifact_path=str(Path(EVAL_ARTIFACT).parent))
            run_id = run.info.run_id
        version: int | None = None
        if register_name:
            mv = mlflow.register_model(info.model_uri, register_name, tags=_tags(model, owner))
            version = int(mv.version)
            client.set_model_version_tag(register_name, mv.version, "run_id", run_id)
    except MlflowException as exc:
        raise RegistryError(f"MLflow at {tracking_uri}: {exc.message}") from exc
    except OSError as exc:  # connection refused surfaces as requests/urllib3 OSErrors
        raise RegistryError(f"MLflow at {tracking_uri} unreachable: {exc}") from exc
    return LoggedModel(
        run_id=run_id,
        model_uri=str(info.model_uri),
        registered_name=register_name,
        registered_version=version,
        onnx_sha256=model.onnx_sha256,
        onnx_artifact_uri=f"runs:/{run_id}/{ONNX_ARTIFACT_DIR}",
        variant=model.spec.variant,
    )
