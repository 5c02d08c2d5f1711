"""The release records in the object store: the canary writes them, the cockpit and the description read them.

Each release has one record (:func:`~modelops.canary.record.record_key`) and a row in its
model's index (:func:`~modelops.canary.record.index_key`), both JSON documents of
:mod:`modelops.canary.record`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from modelops.canary.record import (
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
from modelops.canary.status import CanaryStatus
from modelops.errors import ModelopsError

_log = logging.getLogger(__name__)
DRIFT_PREFIX = "reports/drift"


class Store(Protocol):
    """The part of :class:`modelops.objectstore.ObjectStore` the release records and the cockpit use."""

    @property
    def bucket(self) -> str: ...

    def exists(self, key: str) -> bool: ...

    def get_bytes(self, key: str) -> bytes: ...

    def put_bytes(self, key: str, data: bytes, *, content_type: str = ...) -> str: ...

    def list_keys(self, prefix: str) -> Iterable[str]: ...


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


def note(store: Store, ref: ReleaseRef, status: CanaryStatus, window: Window | None = None,
         control: Control | None = None) -> ReleaseRecord:
    """Bring the release's record (and its index row) up to ``status``; returns the record written."""
    previous = load_record(store, ref.model, ref.canary_version)
    record = updated(previous, ref, status, window, control)
    save(store, record)
    return record


def read_or_none(store: Store, key: str) -> bytes | None:
    """The bytes at ``key``, or None when it went away after a listing (logged)."""
    try:
        return store.get_bytes(key)
    except ModelopsError as exc:  # deleted between the listing and the read
        _log.warning("cockpit: %s", exc)
        return None


def model_releases(store: Store, model: str) -> list[ReleaseRecord]:
    """One model's release summaries, newest first."""
    body = read_or_none(store, index_key(model)) if store.exists(index_key(model)) else None
    return index_rows(body) if body else []


def latest_drift(store: Store, model: str, triton_version: str) -> dict[str, str]:
    """The newest nightly drift verdict of a Triton version and its report's URI (empty if none)."""
    prefix = f"{DRIFT_PREFIX}/{model}/v{triton_version}/"
    days = sorted({k[len(prefix):].split("/", 1)[0] for k in store.list_keys(prefix)})
    if not days:
        return {}
    day = days[-1]
    body = read_or_none(store, f"{prefix}{day}/drift.json")
    if body is None:
        return {}
    document = json.loads(body)
    causes = ", ".join(document.get("top_causes", [])[:5])
    verdict = ("drifted" if document.get("drifted") else "no drift") + f" on {day.removeprefix('dt=')}"
    return {"verdict": verdict + (f" (top causes: {causes})" if causes else ""),
            "report": f"s3://{store.bucket}/{prefix}{day}/drift_report.html", "day": day}
