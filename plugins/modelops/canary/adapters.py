"""Real adapters of the runner's ports: routes in the object store, Triton, MLflow, checkpoints.

Heavy clients (boto3, mlflow, tritonclient) are imported by the wrapped modules only when
an adapter is used.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from modelops.canary.runner import Checkpoint, ShadowRef, VersionRef
from modelops.documents.routes import Routes, Shadow, load_routes, routed_versions, routes_key, serialize_routes
from modelops.documents.routes import VersionRef as RouteVersion
from modelops.errors import ContractError, ModelopsError
from modelops.names import check_model_name

if TYPE_CHECKING:
    from modelops.config import Settings
    from modelops.registry.mlflow_registry import MlflowRegistry

GetJson = Callable[[str], Any]
_log = logging.getLogger(__name__)


class RoutesNotApplied(ModelopsError):
    """A gateway did not report the new routes revision in time (transient: retry)."""


class BlobStore(Protocol):
    """The part of :class:`modelops.objectstore.ObjectStore` the adapters use."""

    def exists(self, key: str) -> bool: ...

    def get_bytes(self, key: str) -> bytes: ...

    def put_bytes(self, key: str, data: bytes, *, content_type: str = ...) -> str: ...


def current_routes(store: BlobStore, model: str) -> Routes | None:
    """The model's routes document in the object store, or None before its first release."""
    key = routes_key(model)
    return load_routes(store.get_bytes(key)) if store.exists(key) else None


def next_routes(current: Routes | None, model: str, stable: VersionRef, canary: VersionRef | None, weight: float,
                by: str, now: datetime, *, salted: bool = True, shadow: ShadowRef | None = None) -> Routes:
    """The routes document that follows ``current`` (its revision + 1).

    ``salted``: the sticky split is salted with the canary's sha256 prefix, the same for every
    step of one release (earlier canary users stay on it) and different for the next release.
    ``shadow``: the version the gateways mirror a share of the stable's requests to (none: no mirroring).
    """
    salt = canary.sha256[:16] if salted and canary is not None else ""
    mirror = None if shadow is None else Shadow(RouteVersion(shadow.version.triton_version, shadow.version.sha256),
                                                shadow.share, shadow.top_k)
    return Routes(model=model, revision=(current.revision + 1) if current else 1,
                  stable=RouteVersion(stable.triton_version, stable.sha256),
                  canary=None if canary is None else RouteVersion(canary.triton_version, canary.sha256),
                  canary_weight=weight if canary is not None else 0.0,
                  updated_at=now.isoformat(), updated_by=by, canary_salt=salt, shadow=mirror)


class GatewayDown(ConnectionError):
    """Nothing listens at the gateway's address (connection refused): it serves no traffic."""


def http_get_json(timeout_s: float = 3.0) -> GetJson:
    def get(url: str) -> Any:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                return json.loads(response.read().decode("utf-8"))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            refused = isinstance(exc, ConnectionRefusedError) or isinstance(
                getattr(exc, "reason", None), ConnectionRefusedError)
            raise (GatewayDown if refused else ConnectionError)(f"{url}: {exc}") from exc

    return get


@dataclass
class ObjectStoreRoutes:
    """Writes ``routes/<model>.json`` and waits until every gateway reports the new revision.

    The moment returned is the latest ``applied_at`` the gateways report (their own clock),
    or the time of the poll that saw the revision when a gateway gives none.

    A gateway that refuses connections (:class:`GatewayDown`) for ``down_after_s`` serves no
    traffic, so it cannot serve the old routes either: once every other gateway has applied
    the revision, the down ones are listed in :attr:`last_down` and the wait ends (a
    restarted gateway loads the newest routes at start; the canary's next windows, unable to
    scrape it, are inconclusive, so the release pauses and alerts). A gateway that answers
    with an older revision, or cannot be reached for another reason (a timeout: it may still
    serve), is waited for until ``timeout_s``, then :class:`RoutesNotApplied`.
    """

    store: BlobStore
    gateway_urls: Sequence[str]
    get_json: GetJson = field(default_factory=http_get_json)
    timeout_s: float = 30.0
    poll_s: float = 0.2
    down_after_s: float = 5.0
    salted: bool = True
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    last_down: tuple[str, ...] = ()
    grace_s: float = 600.0  # the routes reconciler's default grace (``modelops serving reconcile --grace-s``)

    def apply(self, model: str, stable: VersionRef, canary: VersionRef | None, weight: float, by: str,
              *, shadow: ShadowRef | None = None) -> float:
        from modelops.serving.holds import write_hold

        now = datetime.fromtimestamp(self.clock(), UTC)
        previous = current_routes(self.store, model)
        routes = next_routes(previous, model, stable, canary, weight, by, now, salted=self.salted, shadow=shadow)
        # A version these routes stop naming (the old stable on promotion, the canary on rollback) stays
        # loaded for the reconciler's grace: held here, before the routes change, so a reconciler that
        # restarts right after the change cannot unload it at once (an unload releases the hold).
        for version in sorted(routed_versions(previous) - routed_versions(routes)):
            write_hold(self.store, model, version, why=f"dropped from the routes by {by}: kept loaded for "
                       f"{self.grace_s:.0f} s (instant rollback)", ttl_s=self.grace_s)
        self.store.put_bytes(routes_key(model), serialize_routes(routes), content_type="application/json")
        return self.wait(model, routes.revision)

    def wait(self, model: str, revision: int) -> float:
        """Poll ``GET /v1/routes`` of every gateway until each reports ``revision`` or newer (or is down)."""
        started = self.clock()
        deadline = started + self.timeout_s
        applied: dict[str, float] = {}
        refusing_since: dict[str, float] = {}
        last_error = ""
        while True:
            now = self.clock()
            for url in self.gateway_urls:
                if url in applied:
                    continue
                try:
                    view = self.get_json(f"{url.rstrip('/')}/v1/routes")
                except GatewayDown as exc:
                    refusing_since.setdefault(url, now)
                    last_error = f"{url}: {exc}"
                    continue
                except ConnectionError as exc:
                    refusing_since.pop(url, None)
                    last_error = f"{url}: {exc}"
                    continue
                refusing_since.pop(url, None)
                try:
                    entry = view["models"][model]
                except (KeyError, TypeError) as exc:
                    last_error = f"{url}: {exc}"
                    continue
                if int(entry.get("revision", -1)) >= revision:
                    applied[url] = _epoch(entry.get("applied_at", "")) or self.clock()
            pending = set(self.gateway_urls) - set(applied)
            down = {u for u in pending if u in refusing_since and now - refusing_since[u] >= self.down_after_s}
            if pending == down:
                self.last_down = tuple(sorted(down))
                if down:
                    _log.warning("routes %s revision %d applied by %s; down (refusing connections for %.0f s, "
                                 "serving nothing): %s", model, revision, sorted(applied), self.down_after_s,
                                 list(self.last_down))
                return max(applied.values(), default=self.clock()) if applied else self.clock()
            if self.clock() >= deadline:
                missing = sorted(pending)
                raise RoutesNotApplied(f"routes {model} revision {revision}: not applied within {self.timeout_s:g} s "
                                       f"by {missing}" + (f" (last error: {last_error})" if last_error else ""))
            self.sleep(self.poll_s)


def _epoch(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


@dataclass
class TritonServing:
    """Load / unload through :mod:`modelops.serving.api`."""

    cfg: Settings | None = None

    def load(self, model: str, triton_version: int) -> None:
        from modelops.serving.api import load_version

        load_version(model, triton_version, cfg=self.cfg)

    def unload(self, model: str, triton_version: int) -> None:
        from modelops.serving.api import unload_version

        unload_version(model, triton_version, cfg=self.cfg)


@dataclass
class MlflowRegistryPort:
    """Promotion and rollback bookkeeping through :class:`MlflowRegistry`."""

    registry: MlflowRegistry

    def promote(self, model: str, mlflow_version: str) -> None:
        self.registry.promote(model, mlflow_version)

    def mark_rollback(self, model: str, mlflow_version: str, reason: str) -> None:
        self.registry.mark_rollback(model, mlflow_version, reason=reason)

    def restage(self, model: str, mlflow_version: str) -> None:
        self.registry.restage(model, mlflow_version)

    def set_tags(self, model: str, mlflow_version: str, tags: Mapping[str, str]) -> None:
        self.registry.set_tags(model, mlflow_version, tags)


def checkpoint_key(model: str, canary_triton_version: int) -> str:
    """Object-store key of a release's checkpoint."""
    return f"canary/{check_model_name(model)}/v{canary_triton_version}.json"


@dataclass
class ObjectStoreStatusStore:
    """The checkpoint in the object store, readable by every Airflow component after a restart."""

    store: BlobStore
    key: str

    def load(self) -> Checkpoint | None:
        try:
            if not self.store.exists(self.key):
                return None
            return Checkpoint.from_json(self.store.get_bytes(self.key).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ContractError(f"canary checkpoint {self.key}: unreadable ({exc})") from exc

    def save(self, checkpoint: Checkpoint) -> None:
        self.store.put_bytes(self.key, checkpoint.to_json().encode("utf-8"), content_type="application/json")
