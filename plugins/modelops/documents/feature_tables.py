"""The feature tables as their readers see them: keys, the pointer, the tables, the prepared lookup.

A shared document (beside the routes document): the gateway's online feature lookup, the hourly
precompute job and the demo read the newest snapshot through these functions; the example world
(:mod:`modelops.example.tables`) is what writes them. Layout inside the platform bucket::

    features/users/v=<snapshot>/users.parquet   user_id + the 64 user_* features
    features/items/v=<snapshot>/items.parquet   item_id + the 64 item_* features
    features/_latest.json                       pointer to the newest snapshot, written last

Readers poll ``_latest.json`` and reload when its snapshot changes; since the pointer is written
after both tables, a reader never sees half a snapshot.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from numpy.typing import NDArray

from modelops.errors import ContractError, ObjectStoreError
from modelops.modelspec.recommender import recommender_feature_names
from modelops.objectstore import ObjectStore

FEATURES_PREFIX = "features"
LATEST_KEY = f"{FEATURES_PREFIX}/_latest.json"
"""The default pointer key (the gateway polls it)."""
POINTER_SCHEMA_VERSION = 1


def users_key(snapshot: str, prefix: str = FEATURES_PREFIX) -> str:
    return f"{prefix}/users/v={snapshot}/users.parquet"


def items_key(snapshot: str, prefix: str = FEATURES_PREFIX) -> str:
    return f"{prefix}/items/v={snapshot}/items.parquet"


def latest_key(prefix: str = FEATURES_PREFIX) -> str:
    return f"{prefix}/_latest.json"


@dataclass(frozen=True)
class FeatureLookup:
    """Feature tables prepared for fast repeated lookups (index + float32 arrays).

    Build once per snapshot with :meth:`from_frames`; :meth:`matrix` is then a hash
    lookup plus two fancy-index copies.
    """

    names: tuple[str, ...]
    user_index: pd.Index
    item_index: pd.Index
    user_values: NDArray[Any]  # [n_users + 1, n_user_features]; last row is all NaN
    item_values: NDArray[Any]
    user_positions: NDArray[Any]  # output column of each user feature
    item_positions: NDArray[Any]

    @classmethod
    def from_frames(cls, users: pd.DataFrame, items: pd.DataFrame, names: Sequence[str] | None = None) -> FeatureLookup:
        """Prepare ``users`` (user_id + user_*) and ``items`` (item_id + item_*) for lookups.

        Args:
            users: the users table.
            items: the items table.
            names: the output feature order; the recommender's features when omitted.

        Raises:
            ContractError: a named feature is in neither table.
        """
        names = tuple(names) if names is not None else recommender_feature_names()
        user_cols = [n for n in names if n in users.columns and n != "user_id"]
        item_cols = [n for n in names if n in items.columns and n != "item_id"]
        missing = sorted(set(names) - set(user_cols) - set(item_cols))
        if missing:
            raise ContractError(f"feature tables lack {len(missing)} feature(s), e.g. {missing[:5]}")
        position = {n: i for i, n in enumerate(names)}

        def values(frame: pd.DataFrame, cols: list[str]) -> NDArray[Any]:
            table = frame[cols].to_numpy(dtype=np.float32, na_value=np.nan)
            return np.vstack([table, np.full((1, len(cols)), np.nan, dtype=np.float32)])

        return cls(
            names=names,
            user_index=pd.Index(users["user_id"].astype(str)),
            item_index=pd.Index(items["item_id"].astype(str)),
            user_values=values(users, user_cols),
            item_values=values(items, item_cols),
            user_positions=np.array([position[n] for n in user_cols], dtype=np.int64),
            item_positions=np.array([position[n] for n in item_cols], dtype=np.int64),
        )

    def matrix(self, user_ids: Sequence[str] | NDArray[Any], item_ids: Sequence[str] | NDArray[Any]) -> NDArray[Any]:
        """float32 ``[n, len(names)]`` for pairs (user_ids[k], item_ids[k]); NaN where unknown."""
        if len(user_ids) != len(item_ids):
            raise ValueError(f"user_ids ({len(user_ids)}) and item_ids ({len(item_ids)}) must have equal length")
        u = self.user_index.get_indexer(pd.Index(user_ids))
        i = self.item_index.get_indexer(pd.Index(item_ids))
        u[u < 0] = len(self.user_values) - 1  # the all-NaN row
        i[i < 0] = len(self.item_values) - 1
        out = np.empty((len(u), len(self.names)), dtype=np.float32)
        out[:, self.user_positions] = self.user_values[u]
        out[:, self.item_positions] = self.item_values[i]
        return out


def feature_matrix(
    users: pd.DataFrame,
    items: pd.DataFrame,
    user_ids: Sequence[str] | NDArray[Any],
    item_ids: Sequence[str] | NDArray[Any],
    names: Sequence[str] | None = None,
) -> NDArray[Any]:
    """The model input for (user, item) pairs: float32 ``[n, 128]`` in the recommender's feature order.

    Values of unknown users or items are NaN (the model's preprocess step imputes them).
    For repeated calls on the same tables build a :class:`FeatureLookup` once instead.
    """
    return FeatureLookup.from_frames(users, items, names).matrix(user_ids, item_ids)


def read_pointer(store: ObjectStore, prefix: str = FEATURES_PREFIX) -> dict[str, Any]:
    """The ``_latest.json`` pointer (cheap: poll this to notice a new snapshot)."""
    key = latest_key(prefix)
    try:
        pointer = json.loads(store.get_bytes(key))
    except json.JSONDecodeError as exc:
        raise ContractError(f"{store.uri(key)} is not valid JSON: {exc}") from exc
    if not isinstance(pointer, dict) or "snapshot" not in pointer:
        raise ContractError(f"{store.uri(key)}: must be an object with a 'snapshot'")
    return pointer


def load_feature_tables(store: ObjectStore, prefix: str = FEATURES_PREFIX) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The newest ``(users, items, snapshot)``, with their sha256 checked against the pointer.

    Raises:
        ObjectStoreError: nothing published yet, or a download failed or was corrupted.
        ContractError: the pointer is not valid.
    """
    pointer = read_pointer(store, prefix)
    frames: list[pd.DataFrame] = []
    for kind in ("users", "items"):
        key = str(pointer[f"{kind}_key"])
        data = store.get_bytes(key)
        expected = pointer.get(f"{kind}_sha256")
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise ObjectStoreError(
                f"{store.uri(key)}: sha256 differs from {latest_key(prefix)} (corrupted or replaced)"
            )
        frames.append(pq.read_table(io.BytesIO(data)).to_pandas())
    return frames[0], frames[1], str(pointer["snapshot"])
