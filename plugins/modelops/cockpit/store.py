"""The cockpit's reads and writes: release records and indexes, routes, checkpoints, MLflow facts.

Reads of many small documents run in a thread pool (one object-store round trip each), so
the Releases page costs about two list calls and the slowest GET, not their sum.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from modelops.canary.status import CanaryStatus
from modelops.cockpit.record import (
    INDEX_PREFIX,
    Control,
    ReleaseRecord,
    ReleaseRef,
    Window,
    index_document,
    index_key,
    index_rows,
    index_with,
    record_key,
    updated,
)
from modelops.errors import ModelopsError
from modelops.gateway.routes import ROUTES_PREFIX, Routes, load_routes, model_from_key

_log = logging.getLogger(__name__)
READ_THREADS = 16
DRIFT_PREFIX = "reports/drift"
CONTRACT_HTML = "contracts/features_validation.html"


class Store(Protocol):
    """The part of :class:`modelops.objectstore.ObjectStore` the cockpit uses."""

    bucket: str

    def exists(self, key: str) -> bool: ...

    def get_bytes(self, key: str) -> bytes: ...

    def put_bytes(self, key: str, data: bytes, *, content_type: str = ...) -> str: ...

    def list_keys(self, prefix: str) -> Iterable[str]: ...


# ------------------------------------------------------------------ writes (the release's canary task)
def save(store: Store, record: ReleaseRecord) -> None:
    """Write the release record and its summary into the model's index."""
    store.put_bytes(record_key(record.model, record.canary_version), record.to_json().encode("utf-8"),
                    content_type="application/json")
    key = index_key(record.model)
    rows: list[dict[str, Any]] = []
    if store.exists(key):
        rows = list(json.loads(store.get_bytes(key)).get("releases", []))
    store.put_bytes(key, index_document(record.model, index_with(rows, record)), content_type="application/json")


def load_record(store: Store, model: str, canary_version: int) -> ReleaseRecord | None:
    key = record_key(model, canary_version)
    if not store.exists(key):
        return None
    return ReleaseRecord.from_dict(json.loads(store.get_bytes(key)))


# ------------------------------------------------------------------ reads (the pages)
def _model_of_index(key: str) -> str | None:
    if key.startswith(INDEX_PREFIX) and key.endswith(".json"):
        return key[len(INDEX_PREFIX):-len(".json")] or None
    return None


def _get(store: Store, key: str) -> bytes | None:
    try:
        return store.get_bytes(key)
    except ModelopsError as exc:  # deleted between the listing and the read
        _log.warning("cockpit: %s", exc)
        return None


@dataclass(frozen=True)
class Overview:
    routes: dict[str, Routes | None]
    releases: dict[str, list[ReleaseRecord]]


def overview(store: Store) -> Overview:
    """Every model's routes document and release index (read in parallel)."""
    routes_keys = {m: k for k in store.list_keys(ROUTES_PREFIX) if (m := model_from_key(k))}
    index_keys = {m: k for k in store.list_keys(INDEX_PREFIX) if (m := _model_of_index(k))}
    jobs = [("routes", m, k) for m, k in routes_keys.items()] + [("index", m, k) for m, k in index_keys.items()]
    routes: dict[str, Routes | None] = {}
    releases: dict[str, list[ReleaseRecord]] = {}
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        bodies = list(pool.map(lambda job: _get(store, job[2]), jobs))
    for (kind, model, _), body in zip(jobs, bodies, strict=True):
        if body is None:
            continue
        if kind == "routes":
            routes[model] = load_routes(body)
        else:
            releases[model] = index_rows(body)
    return Overview(routes, releases)


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


def latest_drift(store: Store, model: str, triton_version: str) -> dict[str, str]:
    """The newest nightly drift verdict of a Triton version and its report's URI (empty if none)."""
    prefix = f"{DRIFT_PREFIX}/{model}/v{triton_version}/"
    days = sorted({k[len(prefix):].split("/", 1)[0] for k in store.list_keys(prefix)})
    if not days:
        return {}
    day = days[-1]
    body = _get(store, f"{prefix}{day}/drift.json")
    if body is None:
        return {}
    document = json.loads(body)
    causes = ", ".join(document.get("top_causes", [])[:5])
    verdict = ("drifted" if document.get("drifted") else "no drift") + f" on {day.removeprefix('dt=')}"
    return {"verdict": verdict + (f" (top causes: {causes})" if causes else ""),
            "report": f"s3://{store.bucket}/{prefix}{day}/drift_report.html", "day": day}


def model_info(store: Store, repository_uri: str, triton_version: str) -> str:
    """``model-info.json`` of a published version, pretty-printed ('' when not in this bucket)."""
    head = f"s3://{store.bucket}/"
    if not repository_uri.startswith(head) or not triton_version:
        return ""
    body = _get(store, f"{repository_uri[len(head):].rstrip('/')}/{triton_version}/model-info.json")
    return json.dumps(json.loads(body), indent=2, sort_keys=True) if body else ""


def contract(tags: Mapping[str, str], run_id: str, mlflow_ui: str) -> dict[str, str]:
    """The contract gate's result and the link to its HTML report (an MLflow run artifact)."""
    result = tags.get("modelops.contract_result") or tags.get("modelops.contract_passed") or "n/a"
    url = f"{mlflow_ui.rstrip('/')}/get-artifact?path={CONTRACT_HTML}&run_uuid={run_id}" if run_id and mlflow_ui \
        else ""
    return {"result": result, "url": url}


def model_releases(store: Store, model: str) -> list[ReleaseRecord]:
    """One model's release summaries, newest first."""
    body = _get(store, index_key(model)) if store.exists(index_key(model)) else None
    return index_rows(body) if body else []


def note(store: Store, ref: ReleaseRef, status: CanaryStatus, window: Window | None = None,
         control: Control | None = None) -> ReleaseRecord:
    """Bring the release's record (and its index row) up to ``status``; returns the record written."""
    previous = load_record(store, ref.model, ref.canary_version)
    record = updated(previous, ref, status, window, control)
    save(store, record)
    return record
