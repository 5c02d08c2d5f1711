"""Publishing versioned feature tables in the object store (the readers: :mod:`modelops.documents.feature_tables`).

Layout inside the platform bucket::

    features/users/v=<snapshot>/users.parquet   user_id + the 64 user_* features
    features/items/v=<snapshot>/items.parquet   item_id + the 64 item_* features
    features/_latest.json                       pointer to the newest snapshot, written last

Readers (the gateway) poll ``_latest.json`` and reload when its snapshot changes; since
the pointer is written after both tables, a reader never sees half a snapshot.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from modelops.documents.feature_tables import (
    FEATURES_PREFIX,
    LATEST_KEY,
    POINTER_SCHEMA_VERSION,
    FeatureLookup,
    feature_matrix,
    items_key,
    latest_key,
    load_feature_tables,
    read_pointer,
    users_key,
)
from modelops.errors import ContractError
from modelops.features import Feature
from modelops.modelspec.recommender import recommender_features
from modelops.objectstore import ObjectStore

_SNAPSHOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

__all__ = ["FEATURES_PREFIX", "LATEST_KEY", "POINTER_SCHEMA_VERSION", "FeatureLookup", "PublishedSnapshot",
           "feature_matrix", "items_key", "latest_key", "load_feature_tables", "publish_feature_tables",
           "read_pointer", "users_key"]

def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink, compression="zstd")
    return sink.getvalue()


def _check_table(frame: pd.DataFrame, key: str, prefix: str, features: Sequence[Feature]) -> None:
    expected = [f.name for f in features if f.name.startswith(prefix)]
    if key not in frame.columns:
        raise ContractError(f"{prefix}table: column {key!r} is required")
    missing = [n for n in expected if n not in frame.columns]
    if missing:
        raise ContractError(f"{prefix}table: missing feature columns, e.g. {missing[:5]}")
    if frame[key].duplicated().any():
        dup = frame.loc[frame[key].duplicated(), key].iloc[0]
        raise ContractError(f"{prefix}table: {key} {dup!r} appears more than once")


@dataclass(frozen=True)
class PublishedSnapshot:
    """What :func:`publish_feature_tables` wrote."""

    snapshot: str
    users_uri: str
    items_uri: str
    users_sha256: str
    items_sha256: str
    n_users: int
    n_items: int


def publish_feature_tables(
    store: ObjectStore,
    snapshot: str,
    users: pd.DataFrame,
    items: pd.DataFrame,
    *,
    features: Sequence[Feature] | None = None,
    prefix: str = FEATURES_PREFIX,
) -> PublishedSnapshot:
    """Upload both tables as Parquet under ``v=<snapshot>``, then move ``_latest.json`` to it.

    Idempotent: publishing the same tables under the same snapshot writes the same bytes.

    Args:
        store: the object store (platform bucket).
        snapshot: the version name, e.g. ``2026-11-29``.
        users: user_id + the user_* features.
        items: item_id + the item_* features.
        features: the feature metadata; the recommender's when omitted.
        prefix: the key prefix (tests use their own).

    Raises:
        ContractError: a table lacks its key or feature columns, or the snapshot name is bad.
        ObjectStoreError: the upload failed (the pointer then still names the old snapshot).
    """
    if not _SNAPSHOT.match(snapshot):
        raise ContractError(f"snapshot {snapshot!r}: must match {_SNAPSHOT.pattern} (example: 2026-11-29)")
    features = tuple(features) if features is not None else recommender_features()
    _check_table(users, "user_id", "user_", features)
    _check_table(items, "item_id", "item_", features)
    store.ensure_bucket()
    keys = {"users": users_key(snapshot, prefix), "items": items_key(snapshot, prefix)}
    users_sha = store.put_bytes(keys["users"], _parquet_bytes(users))
    items_sha = store.put_bytes(keys["items"], _parquet_bytes(items))
    pointer = {
        "schema_version": POINTER_SCHEMA_VERSION,
        "snapshot": snapshot,
        "users_key": keys["users"],
        "items_key": keys["items"],
        "users_sha256": users_sha,
        "items_sha256": items_sha,
        "n_users": len(users),
        "n_items": len(items),
    }
    body = json.dumps(pointer, indent=2).encode()
    store.put_bytes(latest_key(prefix), body, content_type="application/json")
    return PublishedSnapshot(
        snapshot=snapshot,
        users_uri=store.uri(keys["users"]),
        items_uri=store.uri(keys["items"]),
        users_sha256=users_sha,
        items_sha256=items_sha,
        n_users=len(users),
        n_items=len(items),
    )


