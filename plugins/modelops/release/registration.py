"""Registration as an Airflow run: train the reference model, or take any MLflow run, and register it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelops.errors import GateFailed, RegistryError


def train_reference(params: Mapping[str, Any]) -> str:
    """Train the reference recommender (seeded) and log it; returns its ``runs:/…/model`` URI."""
    from dataclasses import replace

    from modelops.config import settings
    from modelops.example.synthetic import WorldSpec
    from modelops.example.tracking import log_trained_model
    from modelops.example.train import TrainSpec, train

    hidden = tuple(int(h) for h in str(params.get("hidden", "32")).replace(" ", "").split(",") if h)
    spec = TrainSpec(
        world=replace(WorldSpec(), seed=int(params.get("seed", 7)), n_requests=int(params.get("n_requests", 4000))),
        hidden=hidden,
        max_iter=int(params.get("max_iter", 60)),
        variant=str(params.get("variant", "good")),
        error_rate=float(params.get("error_rate", 0.05)),
    )
    logged = log_trained_model(train(spec), settings().mlflow_uri, owner=str(params.get("owner", "recsys-team")))
    return f"runs:/{logged.run_id}/model"


def register(run_uri: str, model: str, *, registered_by: str) -> dict[str, str]:
    """Register ``run_uri`` under ``model`` with lineage tags copied from the run.

    Works for any run that logged the platform's artifacts (``onnx/``, ``eval/``): models
    trained elsewhere enter through the same checks and tags.
    """
    from modelops.registry.lifecycle import parse_run_uri
    from modelops.registry.mlflow_registry import MlflowRegistry

    if not model:
        raise GateFailed("model_name: required (example: recommender)")
    try:
        parsed = parse_run_uri(run_uri)
    except RegistryError as exc:  # a malformed form value fails the same way on every retry
        raise GateFailed(f"run_uri: {exc}") from exc
    registry = MlflowRegistry.from_settings()
    run_tags = registry.run_tags(parsed.run_id)
    tags = {"modelops.registered_by": registered_by, "modelops.source_run_uri": str(parsed)}
    for key in ("data_start", "data_end", "owner", "variant", "features_sha256"):
        if key in run_tags:
            tags[f"modelops.{key}"] = run_tags[key]
    info = registry.register(str(parsed), model, tags=tags)
    return {"model": model, "version": info.version, "run_id": info.run_id or parsed.run_id}
