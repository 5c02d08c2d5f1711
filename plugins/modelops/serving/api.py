"""The serving functions Airflow tasks and the CLI call: names and settings only, small results.

    from modelops.serving.api import publish_version, load_version, unload_version, verify_served

Each reads the settings (``settings()`` unless ``cfg`` is given), builds the clients
and returns a small value suitable for XCom. With several Triton servers (``MODELOPS_TRITON_URL``
a ``dns+`` name) each call covers every server: a load must succeed on every one (a server that
is down fails it, and the task is retried), an unload skips a server that is not ready (it
restarts empty, and the reconciler unloads whatever the routes do not name). A version published from
its model spec (a ``model-spec.json`` beside it) is one Triton model loaded with its spec's config
(:mod:`modelops.serving.spec_serving`); the reference recommender's is its three-model pipeline.
"""

from __future__ import annotations

import logging

from modelops.config import Settings, settings
from modelops.errors import ServingError
from modelops.objectstore import ObjectStore
from modelops.serving import loader
from modelops.serving.holds import release_hold, write_hold
from modelops.serving.index_store import model_lock
from modelops.serving.publisher import (
    PublishResult,
    local_repository,
    publish_version,
    specs_for,
)
from modelops.serving.repository import mirror_release
from modelops.serving.spec_reconcile import read_spec
from modelops.serving.spec_serving import Placement, check_served, load_beside, unload_one
from modelops.serving.triton import triton_clients

__all__ = ["PublishResult", "load_version", "publish_version", "served_versions", "unload_version",
           "verify_served"]

log = logging.getLogger(__name__)


def load_version(model: str, triton_version: int, *, cfg: Settings | None = None) -> list[int]:
    """Serve a published version beside those already served (mirrors it first); returns the versions served.

    Raises:
        ServingError: the version is not complete/intact in the store, or failed to load (the
            versions served before keep serving).
    """
    cfg = cfg or settings()
    store = ObjectStore.from_settings(cfg)
    mirror_release(store, model, triton_version, local_repository(cfg))
    with model_lock(store, model, owner=f"load {model} v{triton_version}"):
        # Held, so the reconciler keeps it loaded until the routes name it (or the hold expires).
        write_hold(store, model, triton_version, why=f"load {model} v{triton_version}")
        spec = read_spec(store, model, triton_version)
        if spec is not None:
            placement = Placement(cfg.triton_backend, cfg.triton_gpus)
            loaded = [load_beside(client, spec, triton_version, placement) for client in triton_clients(cfg)]
            return sorted(set().union(*loaded))
        specs = specs_for(model, cfg)
        served = [loader.load_version(client, specs, triton_version) for client in triton_clients(cfg)]
        return sorted(set().union(*served))


def unload_version(model: str, triton_version: int, *, cfg: Settings | None = None) -> list[int]:
    """Stop serving one version (idempotent); returns the versions still served."""
    cfg = cfg or settings()
    store = ObjectStore.from_settings(cfg)
    with model_lock(store, model, owner=f"unload {model} v{triton_version}"):
        release_hold(store, model, triton_version)
        spec = read_spec(store, model, triton_version)
        specs = specs_for(model, cfg)
        placement = Placement(cfg.triton_backend, cfg.triton_gpus)
        left: set[int] = set()
        for client in triton_clients(cfg):
            if not client.is_ready():
                log.warning("Triton %s not ready: %s v%d not unloaded there (it restarts empty; the reconciler "
                            "unloads what the routes do not name)", client.base_url, model, triton_version)
                continue
            if spec is not None:
                left |= set(unload_one(client, model, triton_version, lambda v: read_spec(store, model, v) or spec,
                                       placement))
            else:
                left |= set(loader.unload_version(client, specs, triton_version))
        return sorted(left)


def served_versions(model: str, *, cfg: Settings | None = None) -> list[int]:
    """The versions of the pipeline ``model`` any ready Triton server serves (READY), ascending.

    Raises:
        ServingError: no server is ready.
    """
    versions: set[int] = set()
    ready = 0
    for client in triton_clients(cfg or settings()):
        if client.is_ready():
            ready += 1
            versions |= set(client.ready_versions(model))
    if not ready:
        raise ServingError(f"no Triton server is ready ({(cfg or settings()).triton_http_url})")
    return sorted(versions)


def verify_served(model: str, triton_version: int, *, cfg: Settings | None = None, rows: int = 8) -> bool:
    """Whether ``model`` version ``triton_version`` answers the contract on every server; raises ServingError if not.

    A spec-published version is checked for READY with its spec's config on every server (its answers were
    compared with the framework's own when it was published).
    """
    cfg = cfg or settings()
    spec = read_spec(ObjectStore.from_settings(cfg), model, triton_version)
    for client in triton_clients(cfg):
        if spec is not None:
            check_served(client, spec, triton_version, Placement(cfg.triton_backend, cfg.triton_gpus))
        else:
            loader.verify_served(client, model, triton_version, rows=rows)
    return True
