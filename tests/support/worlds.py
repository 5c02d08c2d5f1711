"""Synthetic feature tables published for the job tests (embedded stack and compose topology alike)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore


def publish_tables(store: ObjectStore, snapshot: str, shift: bool) -> None:
    """Publish the seeded users/items tables as ``snapshot``; ``shift`` moves three known features.

    The shifted features (``user_ctr_30d``, ``user_sessions_7d``, ``item_price``) stay inside their
    contract ranges, so the drift job must find exactly these three as top causes.
    """
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables

    features = recommender_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=7, n_users=400, n_items=400))
    if shift:
        users["user_ctr_30d"] = np.clip(users["user_ctr_30d"] + 0.35, 0, 1)
        users["user_sessions_7d"] = np.clip(users["user_sessions_7d"] * 2.5 + 20, 0, 200)
        items["item_price"] = np.clip(items["item_price"] * 3.0 + 200, 0, 5000)
    publish_feature_tables(store, snapshot, users, items, features=features)


@dataclass(frozen=True)
class Champion:
    """A freshly trained model version, registered, published to Triton and in Production."""

    model: str
    version: str
    run_id: str
    triton_version: int
    sha256: str


def release_champion(prefix: str, mlflow_uri: str, experiment: str) -> Champion:
    """Train a small model, register it as ``<prefix>_<random>``, stage, publish and promote it.

    The test routes it (the routes document is the test's own concern).
    """
    import uuid

    from modelops.example.synthetic import WorldSpec
    from modelops.example.tracking import log_trained_model
    from modelops.example.train import TrainSpec, train
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.publisher import publish_version

    model = f"{prefix}_{uuid.uuid4().hex[:6]}"
    trained = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25))
    logged = log_trained_model(trained, mlflow_uri, register_name=model, experiment=experiment)
    version = str(logged.registered_version)
    registry = MlflowRegistry.from_settings()
    registry.to_staging(model, version, contract_passed=True, contract_result="passed")
    published = publish_version(model, version)
    registry.promote(model, version)
    return Champion(model, version, logged.run_id, published.triton_version, published.sha256)
