"""The serving functions Airflow tasks and the CLI call: names and settings only, small results.

    from modelops.serving.api import publish_version, load_version, unload_version, verify_served

Each reads the settings (``settings()`` unless ``cfg`` is given), builds the clients
and returns a small value suitable for XCom.
"""

from __future__ import annotations

from modelops.config import Settings, settings
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
from modelops.serving.triton import TritonClient

__all__ = ["PublishResult", "load_version", "publish_version", "served_versions", "unload_version",
           "verify_served"]


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
        return loader.load_version(TritonClient.from_settings(cfg), specs_for(model, cfg), triton_version)


def unload_version(model: str, triton_version: int, *, cfg: Settings | None = None) -> list[int]:
    """Stop serving one version (idempotent); returns the versions still served."""
    cfg = cfg or settings()
    store = ObjectStore.from_settings(cfg)
    with model_lock(store, model, owner=f"unload {model} v{triton_version}"):
        release_hold(store, model, triton_version)
        return loader.unload_version(TritonClient.from_settings(cfg), specs_for(model, cfg), triton_version)


def served_versions(model: str, *, cfg: Settings | None = None) -> list[int]:
    """The versions of the pipeline ``model`` Triton serves (READY), ascending."""
    return TritonClient.from_settings(cfg or settings()).ready_versions(model)


def verify_served(model: str, triton_version: int, *, cfg: Settings | None = None, rows: int = 8) -> bool:
    """Whether ``model`` version ``triton_version`` answers the contract; raises ServingError if not."""
    loader.verify_served(TritonClient.from_settings(cfg or settings()), model, triton_version, rows=rows)
    return True
