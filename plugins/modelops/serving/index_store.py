"""The version index in the object store, updated by compare-and-swap.

``triton/<NAME>/index.json`` holds the :class:`~modelops.serving.versions.VersionIndex`.
Updates are conditional writes: the first with ``If-None-Match: *`` (create only),
later ones with ``If-Match: <etag read>``. A writer that loses the race re-reads and
retries, so two concurrent publishes can never give two sha256s the same integer.
S3 (since 2024), MinIO and moto (checked: 5.2.5) honour both conditions on PutObject.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from modelops.errors import ModelopsError, ObjectStoreError, ServingError
from modelops.objectstore import ObjectStore
from modelops.serving.versions import VersionIndex, assign_version

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20
"""Conditional-write attempts before giving up (each loser re-reads and retries)."""


class ConditionalStore(Protocol):
    """The two operations compare-and-swap needs (the S3 adapter below; an in-memory one in tests)."""

    def read(self, key: str) -> tuple[bytes | None, str | None]:
        """``(body, etag)``, or ``(None, None)`` when the key does not exist."""
        ...

    def write_if(self, key: str, body: bytes, etag: str | None) -> bool:
        """Write only if the object still has ``etag`` (does not exist when None); False if not."""
        ...

    def remove(self, key: str) -> None:
        """Delete ``key`` (no error when it does not exist)."""
        ...


def index_key(model: str) -> str:
    """Object key of the index of ``model``."""
    return f"triton/{model}/index.json"


@dataclass(frozen=True)
class Allocation:
    """The outcome of :func:`allocate_version`."""

    version: int
    created: bool
    index: VersionIndex


@dataclass(frozen=True)
class S3ConditionalStore:
    """:class:`ConditionalStore` over the platform's :class:`ObjectStore` (conditional PutObject)."""

    store: ObjectStore

    def read(self, key: str) -> tuple[bytes | None, str | None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.store.client.get_object(Bucket=self.store.bucket, Key=key)
            body = bytes(response["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return None, None
            raise ObjectStoreError(f"get {self.store.uri(key)} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise ObjectStoreError(f"get {self.store.uri(key)} failed: {exc}") from exc
        return body, str(response["ETag"])

    def write_if(self, key: str, body: bytes, etag: str | None) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            self.store.client.put_object(
                Bucket=self.store.bucket, Key=key, Body=body, ContentType="application/json", **condition
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            lost = code in {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}
            if lost or status in {409, 412}:
                return False
            raise ObjectStoreError(f"conditional put {self.store.uri(key)} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise ObjectStoreError(f"conditional put {self.store.uri(key)} failed: {exc}") from exc
        return True

    def remove(self, key: str) -> None:
        self.store.delete(key)


def read_index(store: ConditionalStore, model: str) -> tuple[VersionIndex, str | None]:
    """The current index of ``model`` and its ETag (None when it does not exist yet)."""
    body, etag = store.read(index_key(model))
    if body is None:
        return VersionIndex(model), None
    return VersionIndex.from_json(body, model=model), etag


def allocate_version(store: ConditionalStore | ObjectStore, model: str, sha256: str) -> Allocation:
    """The integer Triton version of ``sha256`` for ``model``, assigning ``max + 1`` if new.

    Idempotent: the same sha256 always gets the same integer. Safe under concurrency.

    Raises:
        ServingError: when the index stays contended for :data:`MAX_ATTEMPTS` attempts.
        ObjectStoreError: when the store fails.
    """
    cas: ConditionalStore = S3ConditionalStore(store) if isinstance(store, ObjectStore) else store
    key = index_key(model)
    for attempt in range(MAX_ATTEMPTS):
        index, etag = read_index(cas, model)
        new_index, version, created = assign_version(index, sha256)
        if not created:
            return Allocation(version, False, index)
        if cas.write_if(key, new_index.to_json().encode(), etag):
            return Allocation(version, True, new_index)
        time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))  # back off; another publish won
    raise ServingError(f"{key}: still contended after {MAX_ATTEMPTS} attempts")


def _this_process() -> dict[str, object]:
    """Who holds a lock: host, PID and the PID's start time (so a reused PID is not mistaken for it)."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_started": psutil.Process().create_time()}


def holder_is_gone(holder: dict[str, object]) -> bool:
    """True when the lock's holder was a process on this host that no longer runs (never for another host)."""
    import psutil

    pid, started = holder.get("pid"), holder.get("pid_started")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or not isinstance(started, float):
        return False
    try:
        proc = psutil.Process(pid)
        return bool(abs(proc.create_time() - started) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # cannot tell (e.g. access denied): treat as alive, the TTL still applies
        return False


def lock_key(model: str) -> str:
    """Object key of the lock that serialises loads/unloads of ``model`` on Triton."""
    return f"triton/{model}/load.lock"


@contextmanager
def model_lock(store: ConditionalStore | ObjectStore, model: str, *, owner: str = "",
               ttl_s: float = 300.0, wait_s: float = 600.0, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the per-model lock while changing which versions Triton serves.

    A load reads the versions served and reloads with that set plus one; two of them at
    once could each drop the other's version. The lock is a create-only object
    (``If-None-Match: *``); a holder that died is replaced by a conditional overwrite
    (``If-Match``), so exactly one waiter takes it over: at once when the holder was a process
    on this host that no longer runs (a publish task SIGKILLed with its scheduler), else after
    ``ttl_s``.

    Raises:
        ServingError: the lock stayed held by someone else for ``wait_s`` seconds.
    """
    cas: ConditionalStore = S3ConditionalStore(store) if isinstance(store, ObjectStore) else store
    key = lock_key(model)
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while True:
        body = json.dumps({"owner": owner or f"pid {os.getpid()}", "token": token,
                           "expires_at": time.time() + ttl_s, **_this_process()}).encode()
        if cas.write_if(key, body, None):
            break
        current, etag = cas.read(key)
        if current is not None:
            holder = json.loads(current)
            stale = float(holder.get("expires_at", 0)) < time.time() or holder_is_gone(holder)
            if stale and cas.write_if(key, body, etag):
                break
            if time.monotonic() > deadline:
                raise ServingError(f"{key}: held by {holder.get('owner')} for longer than {wait_s:.0f} s")
        time.sleep(poll_s)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew_lock, args=(cas, key, token, ttl_s, stop), daemon=True,
                               name=f"lock-renew-{model}")
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        current, _ = cas.read(key)
        if current is not None and json.loads(current).get("token") == token:
            cas.remove(key)


def _renew_lock(cas: ConditionalStore, key: str, token: str, ttl_s: float, stop: threading.Event) -> None:
    """Push the lock's expiry forward every ``ttl_s / 3`` while its holder works (a reload with its retries
    can outlast the TTL; without renewal a waiter would take the lock over from a live holder)."""
    while not stop.wait(ttl_s / 3):
        try:
            current, etag = cas.read(key)
            holder = json.loads(current) if current is not None else {}
            if holder.get("token") != token:
                log.error("%s: the lock was taken over from its live holder %s", key, holder.get("owner", "?"))
                return
            if not cas.write_if(key, json.dumps({**holder, "expires_at": time.time() + ttl_s}).encode(), etag):
                continue  # changed under us: the next round reads it again
        except (ModelopsError, ValueError) as exc:  # the store is briefly unreachable: retry next round
            log.warning("%s: lock renewal failed (retrying): %s", key, exc)
