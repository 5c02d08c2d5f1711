"""The cockpit's reads: release records and indexes, routes, checkpoints, MLflow facts.

The release records are written by the canary (:mod:`modelops.canary.record_store`).

Reads of many small documents run in a thread pool (one object-store round trip each), so
the Releases page costs about two list calls and the slowest GET, not their sum.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from modelops.canary.record import (
    INDEX_PREFIX,
    ReleaseRecord,
    index_rows,
)
from modelops.canary.record_store import Store, read_or_none
from modelops.canary.status import CanaryStatus
from modelops.documents.routes import ROUTES_PREFIX, Routes, load_routes, model_from_key
from modelops.errors import ModelopsError

_log = logging.getLogger(__name__)
READ_THREADS = 16
CONTRACT_HTML = "contracts/features_validation.html"


# ------------------------------------------------------------------ reads (the pages)
def _model_of_index(key: str) -> str | None:
    if key.startswith(INDEX_PREFIX) and key.endswith(".json"):
        return key[len(INDEX_PREFIX):-len(".json")] or None
    return None


@dataclass(frozen=True)
class Overview:
    """Every model's routes and release summaries; ``versions`` identifies each model's documents
    (their ETags), so a page can reuse what it rendered from the same documents."""

    routes: dict[str, Routes | None]
    releases: dict[str, list[ReleaseRecord]]
    versions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


_PARSED: dict[str, tuple[str, Any]] = {}  # key -> (etag, parsed document): the documents read before
_PARSED_LOCK = threading.Lock()


def _listing(store: Store, prefix: str) -> dict[str, str | None]:
    """Keys under ``prefix`` with their ETags (one LIST call per 1000 keys; None when unknown)."""
    client = getattr(store, "client", None)
    if client is None:
        return dict.fromkeys(store.list_keys(prefix))
    from botocore.exceptions import BotoCoreError, ClientError

    out: dict[str, str | None] = {}
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[str(obj["Key"])] = str(obj.get("ETag", "")).strip('"') or None
    except (ClientError, BotoCoreError) as exc:
        raise ModelopsError(f"object store: list s3://{store.bucket}/{prefix} failed: {exc}") from exc
    return out


def _read(store: Store, key: str, etag: str | None, parse: Callable[[bytes], Any]) -> Any:
    """The parsed document at ``key``: reused while its ETag is unchanged, else read and parsed."""
    cache_key = f"{store.bucket}/{key}"
    if etag is not None:
        with _PARSED_LOCK:
            hit = _PARSED.get(cache_key)
        if hit is not None and hit[0] == etag:
            return hit[1]
    body = read_or_none(store, key)
    if body is None:
        return None
    value = parse(body)
    if etag is not None:
        with _PARSED_LOCK:
            _PARSED[cache_key] = (etag, value)
    return value


def overview(store: Store) -> Overview:
    """Every model's routes document and release index.

    Two LIST calls give every document's ETag; only documents whose ETag changed since this
    process last read them are fetched (in parallel) and parsed again.
    """
    routes_keys = {m: (k, e) for k, e in _listing(store, ROUTES_PREFIX).items() if (m := model_from_key(k))}
    index_keys = {m: (k, e) for k, e in _listing(store, INDEX_PREFIX).items() if (m := _model_of_index(k))}
    jobs: list[tuple[str, str, str, str | None, Callable[[bytes], Any]]] = [
        *(("routes", m, k, e, load_routes) for m, (k, e) in routes_keys.items()),
        *(("index", m, k, e, index_rows) for m, (k, e) in index_keys.items())]
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        values = list(pool.map(lambda job: _read(store, job[2], job[3], job[4]), jobs))
    routes: dict[str, Routes | None] = {}
    releases: dict[str, list[ReleaseRecord]] = {}
    for (kind, model, _, _, _), value in zip(jobs, values, strict=True):
        if value is None:
            continue
        if kind == "routes":
            routes[model] = value
        else:
            releases[model] = value
    versions = {m: (routes_keys.get(m, ("", None))[1], index_keys.get(m, ("", None))[1])
                for m in set(routes) | set(releases)}
    return Overview(routes, releases, versions)


def find_run(store: Store, dag_id: str, run_id: str) -> ReleaseRecord | None:
    """The release an Airflow run started (None before its canary began, or for another DAG's run)."""
    for records in overview(store).releases.values():
        for r in records:
            if r.run_id == run_id and r.dag_id == dag_id:
                return r
    return None


def checkpoint_status(store: Store, model: str, canary_version: int) -> CanaryStatus | None:
    from modelops.canary.adapters import ObjectStoreStatusStore, checkpoint_key

    saved = ObjectStoreStatusStore(store, checkpoint_key(model, canary_version)).load()
    return saved.status if saved is not None else None


def model_info(store: Store, repository_uri: str, model: str, triton_version: str) -> str:
    """``model-info.json`` of a published version (``<repository>/<model>/<N>/``), pretty-printed
    ('' when the repository is not in this bucket or the file is missing)."""
    head = f"s3://{store.bucket}/"
    if not repository_uri.startswith(head) or not triton_version:
        return ""
    key = f"{repository_uri[len(head):].rstrip('/')}/{model}/{triton_version}/model-info.json"
    body = read_or_none(store, key) if store.exists(key) else None
    return json.dumps(json.loads(body), indent=2, sort_keys=True) if body else ""


def contract(tags: Mapping[str, str], run_id: str, mlflow_ui: str) -> dict[str, str]:
    """The contract gate's result and the link to its HTML report (an MLflow run artifact)."""
    result = tags.get("modelops.contract_result") or tags.get("modelops.contract_passed") or "n/a"
    url = f"{mlflow_ui.rstrip('/')}/get-artifact?path={CONTRACT_HTML}&run_uuid={run_id}" if run_id and mlflow_ui \
        else ""
    return {"result": result, "url": url}
