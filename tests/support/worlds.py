"""Synthetic feature tables published for the job tests (embedded stack and compose topology alike)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from modelops.objectstore import ObjectStore


def publish_tables(store: ObjectStore, snapshot: str, shift: bool) -> None:
    """Publish the seeded users/items tables as ``snapshot``; ``shift`` moves three known features.

    The shifted features (``user_ctr_30d``, ``user_sessions_7d``, ``item_price``) stay inside their
    contract ranges, so the drift job must find exactly these three as top causes.
    """
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables
    from modelops.features import load_features

    features = load_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=7, n_users=400, n_items=400))
    if shift:
        users["user_ctr_30d"] = np.clip(users["user_ctr_30d"] + 0.35, 0, 1)
        users["user_sessions_7d"] = np.clip(users["user_sessions_7d"] * 2.5 + 20, 0, 200)
        items["item_price"] = np.clip(items["item_price"] * 3.0 + 200, 0, 5000)
    publish_feature_tables(store, snapshot, users, items, features=features)
