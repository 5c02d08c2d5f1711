"""The precompute_predictions DAG's task bodies: find each model's champion, score, publish a snapshot.

The batch scores the active users x candidate items (the users and items of the served
feature snapshot, optionally capped) with the champion (the routes document's stable Triton
version) through Triton's HTTP API with binary tensors, ``batch_rows`` pairs per call (at
most the model's ``max_batch_size``), ``concurrency`` calls in flight, then writes the
scores and, last, the manifest (:mod:`modelops.serving.precompute`). The pairs are built
from the in-memory feature tables exactly as the gateway builds a request's matrix
(:class:`~modelops.documents.feature_tables.FeatureLookup`), so a precomputed score is what Triton
returns online for the same features.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.errors import ContractError, ServingError
from modelops.objectstore import ObjectStore
from modelops.serving.precompute import (
    MAX_PAIRS,
    Manifest,
    Population,
    manifest_key,
    model_prefix,
    population,
    prunable,
    row_ranges,
    scores_key,
    serialize_manifest,
    snapshot_name,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Champion:
    """What a batch scores with: the stable version of a model's routes document."""

    model: str
    version: int
    sha256: str
    routes_revision: int


def champions(store: ObjectStore, models: list[str] | None = None) -> list[Champion]:
    """The stable version of each routed model that has a candidate set (``models``: only these).

    Only the feature-lookup models (the recommender: users x candidate items) have answers to
    precompute; a model published from its spec (:mod:`modelops.serving.spec_publish`) takes its
    features inline in each request and is always answered online, so it is left out (logged).

    Raises:
        ContractError: a named model has no routes document, is published from its spec, or a
            document is invalid.
    """
    from modelops.documents.routes import ROUTES_PREFIX, load_routes, model_from_key, routes_key
    from modelops.serving.spec_reconcile import read_spec

    names = models or sorted(m for k in store.list_keys(ROUTES_PREFIX) if (m := model_from_key(k)) is not None)
    found: list[Champion] = []
    for name in names:
        key = routes_key(name)
        if models and not store.exists(key):
            raise ContractError(f"model={name!r}: no routes document {key} (example: model=recommender)")
        routes = load_routes(store.get_bytes(key))
        if read_spec(store, name, routes.stable.version) is not None:
            why = (f"model={name!r}: version {routes.stable.version} is published from its spec and takes its "
                   "features inline; it has no candidate set to precompute and is always answered online")
            if models:
                raise ContractError(why)
            log.info("skipped: %s", why)
            continue
        found.append(Champion(name, routes.stable.version, routes.stable.sha256, routes.revision))
    return found


def interval_start(context: Any) -> datetime:
    """The time that names a run's snapshot: its data interval's start, else (manual runs) when it ran."""
    start = context.get("data_interval_start")
    if start is None:
        start = context["dag_run"].run_after
    return datetime.fromtimestamp(start.timestamp(), UTC)


def _pairs(lookup: Any, users: npt.NDArray[Any], items: npt.NDArray[Any], start: int,
           stop: int) -> npt.NDArray[np.float32]:
    """Feature rows ``[start, stop)`` of the user-major pairs (user k, item j) -> row k * len(items) + j."""
    rows = np.arange(start, stop)
    return np.asarray(lookup.matrix(users[rows // len(items)], items[rows % len(items)]), dtype=np.float32)


async def score_pairs(triton_url: str, champion: Champion, lookup: Any, pop: Population, *,
                      batch_rows: int = 4096, concurrency: int = 4) -> npt.NDArray[np.float32]:
    """Every pair's score from Triton ``champion.version``, user-major (float32 ``[rows]``).

    Raises:
        ServingError: Triton unreachable, the version not loaded, or a refused call.
    """
    from modelops.gateway.triton.pool import TritonPool

    # Every server of a dns+http:// name (a plain URL: the one); a batch may wait, not fail.
    triton = TritonPool(triton_url, max_idle=concurrency, connect_timeout_s=10.0)
    try:
        await triton.start()
        config = await triton.version_config(champion.model, champion.version)
        max_batch = int(config.get("max_batch_size", 0) or 0)
        scores = np.empty(pop.rows, dtype=np.float32)
        gate = asyncio.Semaphore(concurrency)
        users, items = np.asarray(pop.user_ids, dtype=object), np.asarray(pop.item_ids, dtype=object)

        async def one(start: int, stop: int) -> None:
            async with gate:  # features built under the gate: a batch's rows exist only while it is in flight
                features = _pairs(lookup, users, items, start, stop)
                scores[start:stop] = await triton.infer_scores(champion.model, champion.version, features)

        await asyncio.gather(*(one(a, b) for a, b in row_ranges(pop.rows, batch_rows, max_batch)))
        return scores
    finally:
        await triton.close()


def scores_parquet(pop: Population, scores: npt.NDArray[np.float32]) -> bytes:
    """``user_id``, ``item_id`` (dictionary-encoded), ``score`` float32, user-major, zstd."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n_items = len(pop.item_ids)
    table = pa.table({
        "user_id": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(pop.user_ids), dtype=np.int32), n_items)), pa.array(pop.user_ids)),
        "item_id": pa.DictionaryArray.from_arrays(
            pa.array(np.tile(np.arange(n_items, dtype=np.int32), len(pop.user_ids))), pa.array(pop.item_ids)),
        "score": pa.array(scores, type=pa.float32()),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def publish_snapshot(store: ObjectStore, champion: Champion, snapshot: str, feature_snapshot: str,
                     pop: Population, scores: npt.NDArray[np.float32], created_at: datetime) -> Manifest:
    """Write the scores, then the manifest (last: a reader never sees half a snapshot)."""
    key = scores_key(champion.model, champion.version, snapshot)
    digest = store.put_bytes(key, scores_parquet(pop, scores))
    manifest = Manifest(
        model=champion.model, version=champion.version, sha256=champion.sha256, snapshot=snapshot,
        created_at=created_at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        rows=pop.rows, n_users=len(pop.user_ids), n_items=len(pop.item_ids), feature_snapshot=feature_snapshot,
        scores_key=key, scores_sha256=digest, routes_revision=champion.routes_revision)
    store.put_bytes(manifest_key(champion.model, champion.version, snapshot), serialize_manifest(manifest),
                    content_type="application/json")
    return manifest


def prune(store: ObjectStore, model: str, keep: int) -> int:
    """Delete a model's snapshots beyond the newest ``keep`` per version; returns how many went.

    The manifest goes first, so a reader never finds a manifest whose scores are gone.
    """
    old = prunable(store.list_keys(model_prefix(model)), keep)
    for name, version, snapshot in old:
        store.delete(manifest_key(name, version, snapshot))
        store.delete(scores_key(name, version, snapshot))
    return len(old)


def precompute(champion: Champion, interval_start: datetime, *, store: ObjectStore | None = None,
               triton_url: str | None = None, max_users: int = 0, max_items: int = 0, max_pairs: int = MAX_PAIRS,
               batch_rows: int = 4096, concurrency: int = 4, keep: int = 3) -> dict[str, Any]:
    """Score the served feature snapshot's users x items with ``champion`` and publish the snapshot.

    Idempotent per interval: the snapshot is named by ``interval_start``, so a re-run rewrites it.
    Afterwards the model's snapshots beyond the newest ``keep`` of each version are deleted.
    Returns a small summary (the manifest's location, version, rows, seconds).

    Raises:
        ContractError: the population exceeds ``max_pairs``.
        ObjectStoreError: the feature tables or the upload failed.
        ServingError: Triton refused or is unreachable.
    """
    from modelops.config import settings
    from modelops.documents.feature_tables import FeatureLookup, load_feature_tables
    from modelops.modelspec.recommender import recommender_feature_names

    store = store or ObjectStore.from_settings()
    triton_url = triton_url or settings().triton_http_url
    started = time.perf_counter()
    users, items, feature_snapshot = load_feature_tables(store)
    lookup = FeatureLookup.from_frames(users, items, recommender_feature_names())
    pop = population(users["user_id"].astype(str).tolist(), items["item_id"].astype(str).tolist(),
                     max_users=max_users, max_items=max_items, max_pairs=max_pairs)
    snapshot = snapshot_name(interval_start)
    try:
        scores = asyncio.run(score_pairs(triton_url, champion, lookup, pop, batch_rows=batch_rows,
                                         concurrency=concurrency))
    except ServingError as exc:
        raise ServingError(f"precompute {champion.model} v{champion.version}: {exc}") from exc
    scored_s = time.perf_counter() - started
    manifest = publish_snapshot(store, champion, snapshot, feature_snapshot, pop, scores, datetime.now(UTC))
    pruned = prune(store, champion.model, keep)
    took = time.perf_counter() - started
    log.info("precomputed %s v%d: %d rows (%d users x %d items) in %.1f s (%.0f rows/s scoring)",
             champion.model, champion.version, pop.rows, len(pop.user_ids), len(pop.item_ids), took,
             pop.rows / max(scored_s, 1e-9))
    return {"model": champion.model, "version": champion.version, "snapshot": snapshot, "rows": pop.rows,
            "created_at": manifest.created_at, "feature_snapshot": feature_snapshot, "pruned": pruned,
            "manifest": store.uri(manifest_key(champion.model, champion.version, snapshot)),
            "seconds": round(took, 3)}

