"""Holds: a loaded version that no routes document names yet, kept loaded on purpose for a while.

The reconciler unloads every version the routes do not name, except held ones. A release
loads its candidate (and verifies it) before the routes name it; the load writes a hold
``holds/<model>/<version>.json`` with an expiry, and an unload removes it. A hold
never makes the reconciler *load* a version: only the routes do.
"""

from __future__ import annotations

import json
import time
from typing import Protocol

from modelops.errors import ObjectStoreError
from modelops.objectstore import ObjectStore

#: How long a load keeps an unrouted version loaded (covers verification and the canary's start).
DEFAULT_HOLD_S = 1800.0


def holds_prefix(model: str) -> str:
    return f"holds/{model}/"


def hold_key(model: str, version: int) -> str:
    return f"{holds_prefix(model)}{version}.json"


class _Writer(Protocol):
    def put_bytes(self, key: str, data: bytes, *, content_type: str = ...) -> str: ...


def write_hold(store: _Writer, model: str, version: int, *, why: str, ttl_s: float = DEFAULT_HOLD_S) -> None:
    """Keep ``version`` loaded for ``ttl_s`` seconds even while no routes name it."""
    body = {"model": model, "version": version, "why": why, "expires_at": time.time() + ttl_s}
    store.put_bytes(hold_key(model, version), json.dumps(body).encode(), content_type="application/json")


def release_hold(store: ObjectStore, model: str, version: int) -> None:
    """Remove the hold of ``version`` (no error when there is none)."""
    store.delete(hold_key(model, version))


def active_holds(store: ObjectStore, model: str, *, now: float | None = None) -> set[int]:
    """Versions of ``model`` with an unexpired hold (an unreadable hold counts as expired)."""
    now = time.time() if now is None else now
    held = set()
    for key in store.list_keys(holds_prefix(model)):
        try:
            doc = json.loads(store.get_bytes(key))
            if float(doc["expires_at"]) > now:
                held.add(int(doc["version"]))
        except (ObjectStoreError, ValueError, KeyError, TypeError):
            continue
    return held
