"""The online feature lookup: the newest published feature snapshot, reloaded when it changes.

The tables and their pointer are written by :mod:`modelops.example.tables` and read through
:mod:`modelops.documents.feature_tables`; this adapter polls the pointer, loads a new snapshot off
the event loop, and swaps the
prepared :class:`~modelops.documents.feature_tables.FeatureLookup` in one assignment.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.errors import ModelopsError
from modelops.objectstore import ObjectStore

log = logging.getLogger(__name__)


class FeaturesUnavailable(ModelopsError):
    """No feature snapshot has been loaded yet (HTTP 503 at the gateway)."""


@dataclass(frozen=True)
class LoadedSnapshot:
    """One snapshot prepared for the hot path: id -> row dicts and the float32 value arrays.

    ``lookup`` is the shared :class:`~modelops.documents.feature_tables.FeatureLookup` (same arrays);
    the gateway indexes them through plain dicts because building a pandas ``Index`` per
    request costs ~0.2 ms, a dict lookup per id ~50 ns.
    """

    snapshot: str
    lookup: Any  # modelops.documents.feature_tables.FeatureLookup (imported lazily: pandas)
    published_at: float  # the pointer's created_at when it has one, else when this process first saw it
    loaded_at: float
    user_rows: dict[str, int]
    item_rows: dict[str, int]
    user_values: npt.NDArray[np.float32]  # last row all NaN
    item_values: npt.NDArray[np.float32]
    user_positions: npt.NDArray[np.int64]
    item_positions: npt.NDArray[np.int64]
    width: int
    baseline: npt.NDArray[np.float32]  # per feature: the mean over the snapshot's users / items (explain's reference)
    user_columns: slice | npt.NDArray[np.int64]  # user_positions as a slice when they are one run (a cheaper copy)
    item_columns: slice | npt.NDArray[np.int64]

    @classmethod
    def prepare(cls, snapshot: str, lookup: Any, published_at: float, loaded_at: float) -> LoadedSnapshot:
        width = len(lookup.names)
        baseline = np.full(width, np.nan, dtype=np.float32)
        with warnings.catch_warnings():  # a column without any value keeps NaN (the model imputes it)
            warnings.simplefilter("ignore", RuntimeWarning)
            if len(lookup.user_values) > 1:
                baseline[lookup.user_positions] = np.nanmean(lookup.user_values[:-1], axis=0)
            if len(lookup.item_values) > 1:
                baseline[lookup.item_positions] = np.nanmean(lookup.item_values[:-1], axis=0)
        return cls(snapshot, lookup, published_at, loaded_at,
                   {str(k): i for i, k in enumerate(lookup.user_index)},
                   {str(k): i for i, k in enumerate(lookup.item_index)},
                   lookup.user_values, lookup.item_values, lookup.user_positions, lookup.item_positions,
                   width, baseline, _columns(lookup.user_positions), _columns(lookup.item_positions))

    def matrix(self, user_id: str, item_ids: Sequence[str]) -> npt.NDArray[np.float32]:
        missing_item = len(self.item_values) - 1
        rows = [self.item_rows.get(item, missing_item) for item in item_ids]
        user_row = self.user_rows.get(user_id, len(self.user_values) - 1)
        out = np.empty((len(rows), self.width), dtype=np.float32)
        out[:, self.user_columns] = self.user_values[user_row]
        out[:, self.item_columns] = self.item_values[rows]
        return out


def _columns(positions: npt.NDArray[np.int64]) -> slice | npt.NDArray[np.int64]:
    """``positions`` as a slice when they are consecutive (a block copy instead of a scatter), else themselves."""
    if len(positions) and np.array_equal(positions, np.arange(positions[0], positions[0] + len(positions))):
        return slice(int(positions[0]), int(positions[0]) + len(positions))
    return positions


class OnlineFeatures:
    """The gateway's view of the feature tables.

    Args:
        store: the object store holding ``features/_latest.json`` and the tables.
        names: the model's feature order (``features.yaml``).
    """

    def __init__(self, store: ObjectStore, names: Sequence[str]) -> None:
        self.store = store
        self.names = tuple(names)
        self.current: LoadedSnapshot | None = None
        self.errors = 0
        self.last_error = ""

    def refresh(self) -> bool:
        """Load the newest snapshot when the pointer moved (blocking: call from a thread).

        Returns True when a new snapshot was applied. Errors are counted and logged; the
        loaded snapshot (if any) keeps serving.
        """
        from modelops.documents.feature_tables import FeatureLookup, load_feature_tables, read_pointer

        try:
            pointer = read_pointer(self.store)
            if self.current is not None and str(pointer["snapshot"]) == self.current.snapshot:
                return False
            users, items, snapshot = load_feature_tables(self.store)
            lookup = FeatureLookup.from_frames(users, items, self.names)
        except (ModelopsError, KeyError, ValueError, OSError) as exc:
            self.errors += 1
            self.last_error = str(exc)
            log.warning("feature snapshot reload failed (keeping %s): %s",
                        self.current.snapshot if self.current else "none", exc)
            return False
        now = time.time()
        self.current = LoadedSnapshot.prepare(snapshot, lookup, _published_at(pointer, now), now)
        log.info("feature snapshot %s loaded (%d users, %d items)", snapshot, len(users), len(items))
        return True

    def matrix(self, user_id: str, item_ids: Sequence[str]) -> npt.NDArray[np.float32]:
        """float32 ``[len(item_ids), 128]`` for one user and its items; NaN where unknown.

        Raises:
            FeaturesUnavailable: no snapshot loaded yet.
        """
        current = self.current
        if current is None:
            raise FeaturesUnavailable("no feature snapshot loaded yet (features/_latest.json missing or unreadable)")
        return current.matrix(user_id, item_ids)

    def age_s(self, now: float) -> float:
        """Seconds since the loaded snapshot was published (NaN when none is loaded)."""
        return float("nan") if self.current is None else max(0.0, now - self.current.published_at)


def _published_at(pointer: dict[str, Any], default: float) -> float:
    for key in ("created_at", "published_at"):
        raw = pointer.get(key)
        if isinstance(raw, str):
            try:
                return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return default
