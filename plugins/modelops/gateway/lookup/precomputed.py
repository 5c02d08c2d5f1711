"""The gateway's precomputed predictions: snapshots of the routed versions, polled, looked up per request.

:meth:`PrecomputedScores.refresh` (blocking: a background thread, never the request path) lists
the manifests of every routed ``(model, version)`` (:mod:`modelops.serving.precompute`), picks
the newest per version and build (sha256), loads its scores (sha256 checked against the
manifest) into a dense ``[users, items]`` float32 table, and swaps the set of loaded tables in
one assignment. Snapshots of versions no longer routed are dropped.

:meth:`PrecomputedScores.lookup` answers a request only from the snapshot of exactly the
version the routes send the user to (Triton version and sha256), scored on the feature
snapshot the gateway serves, younger than ``max_age_s``, and only when it holds every
requested item for the user; otherwise it returns None and the reason, and the gateway scores
online. So after a promotion or a rollback the gateway answers online until a snapshot of the
new version exists.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from modelops.documents.routes import Routes, VersionRef
from modelops.errors import ContractError, ModelopsError, ObjectStoreError
from modelops.gateway.metrics import Family, Registry
from modelops.objectstore import ObjectStore
from modelops.serving.precompute import (
    PRECOMPUTED_PREFIX,
    Manifest,
    load_manifest,
    manifest_key,
    newest_by_version,
    parse_manifest_key,
    servable,
)

log = logging.getLogger(__name__)

SOURCE_HEADER = b"x-prediction-source"
"""Every 200 predict answer says ``precomputed`` or ``online``."""

Key = tuple[str, int, str]  # (model, Triton version, sha256)


@dataclass(frozen=True)
class LoadedScores:
    """One snapshot ready for lookups: id -> row / column dicts and the dense score table (NaN: no pair)."""

    manifest: Manifest
    user_rows: dict[str, int]
    item_columns: dict[str, int]
    scores: npt.NDArray[np.float32]  # [n_users, n_items]

    @classmethod
    def from_parquet(cls, manifest: Manifest, data: bytes) -> LoadedScores:
        """Build from the stored Parquet (``user_id``, ``item_id``, ``score``; any order, pairs may be missing).

        Raises:
            ContractError: a column is missing or a pair appears twice.
        """
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pq.read_table(io.BytesIO(data))
        missing = {"user_id", "item_id", "score"} - set(table.column_names)
        if missing:
            raise ContractError(f"{manifest.scores_key}: columns {sorted(missing)} are required "
                                "(example: user_id, item_id, score)")
        codes: list[npt.NDArray[np.int64]] = []
        names: list[list[str]] = []
        for column in ("user_id", "item_id"):
            encoded = pc.dictionary_encode(table.column(column).cast("string")).combine_chunks()
            codes.append(np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64))
            names.append([str(v) for v in encoded.dictionary.to_pylist()])
        users, items = codes
        dense = np.full((len(names[0]), len(names[1])), np.nan, dtype=np.float32)
        flat = users * len(names[1]) + items
        unique, counts = np.unique(flat, return_counts=True)
        if len(unique) != len(flat):
            first = int(np.argmax(counts > 1))
            user, item = divmod(int(unique[first]), len(names[1]))
            raise ContractError(f"{manifest.scores_key}: a (user_id, item_id) pair appears more than once "
                                f"(each pair once; example: user_id={names[0][user]!r}, item_id={names[1][item]!r} "
                                f"appears {int(counts[first])} times)")
        dense.reshape(-1)[flat] = table.column("score").to_numpy().astype(np.float32)
        return cls(manifest, {u: k for k, u in enumerate(names[0])}, {i: k for k, i in enumerate(names[1])}, dense)

    def scores_of(self, user_id: str, item_ids: Sequence[str]) -> npt.NDArray[np.float32] | None:
        """The user's scores of ``item_ids`` in order, or None unless every pair is present."""
        row = self.user_rows.get(user_id)
        if row is None:
            return None
        columns = self.item_columns
        try:
            picked = [columns[item] for item in item_ids]
        except KeyError:
            return None
        scores = self.scores[row, picked]
        return None if np.isnan(scores).any() else scores


class PrecomputedScores:
    """The snapshots of the routed versions, and the lookup the request path calls.

    Args:
        store: the platform bucket.
        max_age_s: the freshness limit (``MODELOPS_PRECOMPUTED_MAX_AGE_S``); an older snapshot is not served.
    """

    def __init__(self, store: ObjectStore, max_age_s: float) -> None:
        self.store = store
        self.max_age_s = max_age_s
        self.loaded: dict[Key, LoadedScores] = {}
        # key -> (tag as listed, parsed; None: unusable, counted once). A rewrite (a re-run of the same
        # interval) changes the tag and is re-read; a key no longer listed is dropped.
        self._manifests: dict[str, tuple[str, Manifest | None]] = {}
        self.errors = 0
        self.m_age: Family | None = None
        self.m_source: Family | None = None
        self.m_errors: Family | None = None

    def register(self, registry: Registry) -> None:
        """Add the age gauge and the source counter to the gateway's metrics."""
        self.m_age = registry.gauge(
            "modelops_gateway_precomputed_snapshot_age_seconds",
            "Seconds since the loaded precomputed snapshot of a routed version was complete, by model and version.")
        self.m_errors = registry.gauge(
            "modelops_gateway_precomputed_refresh_errors",
            "Failed precomputed snapshot listings, manifest reads and score loads since start.")
        self.m_source = registry.counter(
            "modelops_gateway_prediction_source_total",
            "Answered predictions by model, version, source (precomputed, online) and why not precomputed "
            "(reason: none, version, features, stale, items, explain; empty when precomputed).")

    # ------------------------------------------------------------------ background (thread)
    def refresh(self, routes: Iterable[Routes]) -> bool:
        """Load the newest snapshot of every routed version (blocking: call from a thread).

        Returns True when the set of loaded snapshots changed. Errors are counted and logged;
        what is loaded keeps serving.
        """
        wanted: set[Key] = set()
        manifests: list[Manifest] = []
        listed: set[str] = set()
        for r in routes:
            for ref in (r.stable, r.canary):
                if ref is None:
                    continue
                wanted.add((r.model, ref.version, ref.sha256))
                manifests.extend(self._manifests_of(r.model, ref.version, listed))
        self._manifests = {k: v for k, v in self._manifests.items() if k in listed}  # bounded by what is listed
        newest = newest_by_version(manifests)
        current = self.loaded
        updated: dict[Key, LoadedScores] = {}
        for key in wanted:
            manifest = newest.get(key)
            if manifest is None:
                continue
            loaded = current.get(key)
            if loaded is not None and loaded.manifest == manifest:
                updated[key] = loaded
                continue
            try:
                data = self.store.get_bytes(manifest.scores_key)
                if hashlib.sha256(data).hexdigest() != manifest.scores_sha256:
                    raise ContractError(f"{manifest.scores_key}: sha256 differs from its manifest (replaced)")
                updated[key] = LoadedScores.from_parquet(manifest, data)
            except (ModelopsError, ValueError, OSError) as exc:
                self.errors += 1
                log.warning("precomputed snapshot %s v%d %s unusable: %s", manifest.model, manifest.version,
                            manifest.snapshot, exc)
                self._manifests.pop(manifest_key(manifest.model, manifest.version, manifest.snapshot), None)
                if loaded is not None:  # re-read next time: a re-run of the interval rewrites both
                    updated[key] = loaded
                continue
            log.info("precomputed snapshot %s v%d %s loaded (%d rows)", manifest.model, manifest.version,
                     manifest.snapshot, manifest.rows)
        changed = updated.keys() != current.keys() or any(updated[k] is not current[k] for k in updated)
        self.loaded = updated  # one assignment: a request sees the old or the new set, never half
        return changed

    def _manifests_of(self, model: str, version: int, listed: set[str]) -> list[Manifest]:
        """The version's manifests; adds their keys to ``listed``. A manifest is read again when its tag changes."""
        prefix = f"{PRECOMPUTED_PREFIX}{model}/v={version}/"
        try:
            keys = [(k, tag) for k, tag in self.store.list_tagged(prefix) if parse_manifest_key(k) is not None]
        except ObjectStoreError as exc:
            self.errors += 1
            log.warning("precomputed snapshots of %s v%d not listed: %s", model, version, exc)
            return []
        found: list[Manifest] = []
        for key, tag in keys:
            listed.add(key)
            cached = self._manifests.get(key)
            if cached is None or cached[0] != tag:
                try:
                    cached = (tag, load_manifest(self.store.get_bytes(key), key))
                except (ContractError, ObjectStoreError) as exc:
                    self.errors += 1
                    cached = (tag, None)
                    log.warning("precomputed manifest %s unusable: %s", key, exc)
                self._manifests[key] = cached
            manifest = cached[1]
            if manifest is not None:
                found.append(manifest)
        return found

    # ------------------------------------------------------------------ request path
    def lookup(self, model: str, version: VersionRef, user_id: str, item_ids: Sequence[str],
               feature_snapshot: str | None, now: float) -> tuple[npt.NDArray[np.float32] | None, str]:
        """``(scores, "")`` from the routed version's snapshot, or ``(None, reason)``: score online."""
        loaded = self.loaded.get((model, version.version, version.sha256))
        reason = servable(loaded.manifest if loaded else None, version=version.version, sha256=version.sha256,
                          feature_snapshot=feature_snapshot, now=now, max_age_s=self.max_age_s)
        if reason or loaded is None:
            return None, reason or "none"
        scores = loaded.scores_of(user_id, item_ids)
        return (None, "items") if scores is None else (scores, "")

    def count(self, model: str, version: int, source: str, reason: str) -> None:
        if self.m_source is not None:
            self.m_source.inc((("model", model), ("version", str(version)), ("source", source), ("reason", reason)))

    def refresh_gauges(self, now: float) -> None:
        """The age of each loaded snapshot and the refresh errors (set at every scrape)."""
        if self.m_errors is not None:
            self.m_errors.set((), float(self.errors))
        if self.m_age is not None:
            self.m_age.values = {(("model", m), ("version", str(v))): s.manifest.age_s(now)
                                 for (m, v, _sha), s in self.loaded.items()}
