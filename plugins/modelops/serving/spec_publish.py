"""Publish any MLflow model from its model spec: one Triton model per version, verified by its own answers.

``publish_model(name, mlflow_version)``: download ``models:/<name>/<version>``, prepare it
(:func:`modelops.serving.mlflow_models.prepare_model`: spec, graph, evaluation sample, the framework's
own answers; every refusal happens here, before Triton), give the version's sha256
(:func:`modelops.serving.spec_files.version_sha256`) its integer in the CAS index, upload with
verification and ``_COMPLETE`` last, mirror, load beside the versions already served with the config
rendered from the spec, check the config Triton reports, and check **Triton's answers on the
evaluation sample against the framework's own** (:func:`verify_answers`: probabilities within 1e-5
absolute, other floats within 1e-4 relative, integers and booleans exactly). A version that loads but
answers differently is unloaded again and the publish fails: it is never left served wrong. The MLflow
version is tagged with the lineage and the spec's location.

The reference recommender keeps its own three-step pipeline (:mod:`modelops.serving.publisher`); this
path serves every other model. Releasing such a model through ``model_release`` (its canary through the
gateway) needs the per-model edge of the companion issue and is not wired yet.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from modelops.config import Settings, settings
from modelops.errors import ServingError
from modelops.modelspec.baselines import with_baselines
from modelops.modelspec.convert import PROBABILITY_TOLERANCE, REGRESSION_TOLERANCE
from modelops.modelspec.derive import TAG_PREFIX
from modelops.modelspec.render import config_json
from modelops.modelspec.spec import ModelSpec, Source
from modelops.objectstore import ObjectStore
from modelops.serving.holds import write_hold
from modelops.serving.index_store import allocate_version, model_lock
from modelops.serving.mlflow_models import PreparedModel, prepare_model
from modelops.serving.modelinfo import Manifest, ModelInfo, sha256_bytes
from modelops.serving.pbtxt import config_mismatches
from modelops.serving.publisher import code_revision, local_repository
from modelops.serving.repository import REPOSITORY_PREFIX, mirror_release, upload_release
from modelops.serving.spec_files import (
    GRAPH_FILE,
    SPEC_FILE,
    require_placement,
    served_spec,
    spec_release_files,
    version_sha256,
)
from modelops.serving.triton import TritonClient, triton_clients

SETTLE_TIMEOUT_S = 30.0
EVAL_DIR = "eval"


@dataclass(frozen=True)
class SpecPublishResult:
    """What :func:`publish_prepared` did (``timings_s``: prepare, upload, load, verify)."""

    model: str
    triton_version: int
    sha256: str
    uploaded: bool
    max_abs_diff: float
    spec_uri: str
    timings_s: Mapping[str, float]


def verify_answers(client: TritonClient, spec: ModelSpec, version: int, prepared: PreparedModel) -> float:
    """Triton's outputs on the evaluation sample against the framework's own; returns the largest difference.

    Raises:
        ServingError: an output differs beyond its tolerance (named, with the difference).
    """
    got = client.infer(spec.name, version, dict(prepared.sample), tuple(prepared.expected))
    worst = 0.0
    for name, want in prepared.expected.items():
        have = np.asarray(got[name]).reshape(np.shape(want))
        if np.issubdtype(np.asarray(want).dtype, np.floating):
            diff = np.abs(have.astype(np.float64) - np.asarray(want, dtype=np.float64))
            if name == "probabilities":
                measured, bound, which = float(diff.max(initial=0.0)), PROBABILITY_TOLERANCE, "absolute"
            else:
                rel = diff / np.maximum(np.abs(np.asarray(want, dtype=np.float64)), 1.0)
                measured, bound, which = float(rel.max(initial=0.0)), REGRESSION_TOLERANCE, "relative"
            worst = max(worst, float(diff.max(initial=0.0)))
            if measured > bound:
                raise ServingError(f"{spec.name} version {version}: Triton's {name} differ from the model's own by "
                                   f"{measured:.3g} ({which}, tolerance {bound:g}): not served")
        elif not np.array_equal(have, want):
            raise ServingError(f"{spec.name} version {version}: Triton's {name} are not the model's own "
                               f"(first rows {have[:3].tolist()} vs {np.asarray(want)[:3].tolist()}): not served")
    return worst


def _load(client: TritonClient, spec: ModelSpec, version: int, server_backend: str, server_gpus: int) -> list[int]:
    previous = client.ready_versions(spec.name)
    target = sorted(set(previous) | {version})
    expected = config_json(served_spec(spec, server_backend, server_gpus), versions=target)
    client.load(spec.name, expected)
    reported = client.model_config(spec.name, version)
    problems = config_mismatches(expected, {**reported, "version_policy": expected["version_policy"]})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not problems and client.ready_versions(spec.name) != target:
        if time.monotonic() > deadline:
            problems = [f"Triton serves versions {client.ready_versions(spec.name)}, expected {target}"]
        time.sleep(0.1)
    if problems:
        _restore(client, spec, previous, server_backend, server_gpus)
        raise ServingError(f"{spec.name} version {version}: Triton's config after loading differs from the "
                           "spec's:\n  " + "\n  ".join(problems))
    return previous


def _restore(client: TritonClient, spec: ModelSpec, previous: list[int], server_backend: str,
             server_gpus: int) -> None:
    if previous:
        client.load(spec.name, config_json(served_spec(spec, server_backend, server_gpus), versions=previous))
    elif client.ready_versions(spec.name):
        client.unload(spec.name)


def publish_prepared(prepared: PreparedModel, *, mlflow_model_uri: str = "", mlflow_version: str = "",
                     run_id: str = "", cfg: Settings | None = None, store: ObjectStore | None = None,
                     clients: list[TritonClient] | None = None, mirror_to: Path | None = None) -> SpecPublishResult:
    """Upload, mirror, load and verify ``prepared`` on every Triton server (see the module docstring)."""
    cfg = cfg or settings()
    store = store or ObjectStore.from_settings(cfg)
    # the explain baseline (each feature's sample mean where not declared) is part of the version's identity
    spec, timings = with_baselines(prepared.spec, prepared.sample), {}
    require_placement(spec, cfg.triton_gpus)  # before a version number is taken or a byte uploaded
    started = time.perf_counter()
    sha = version_sha256(prepared.graph, spec)
    version = allocate_version(store, spec.name, sha).version
    info = ModelInfo(
        model=spec.name, triton_version=version, sha256=sha,
        files_sha256={GRAPH_FILE: sha256_bytes(prepared.graph)}, mlflow_model_uri=mlflow_model_uri,
        mlflow_version=mlflow_version, run_id=run_id, data_start=None, data_end=None,
        features=tuple(f.name for f in spec.features), owner="",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"), code_revision=code_revision(),
    )
    files = spec_release_files(spec, version, prepared.graph, info, server_backend=cfg.triton_backend,
                               server_gpus=cfg.triton_gpus)
    version_files = {p: d for p, d in files.items() if not p.endswith("config.pbtxt")}
    uploaded = upload_release(store, Manifest.of(spec.name, version, sha, version_files), files)
    mirror_release(store, spec.name, version, mirror_to or local_repository(cfg))
    timings["upload_s"] = time.perf_counter() - started
    worst = 0.0
    with model_lock(store, spec.name, owner=f"publish {spec.name} v{version}"):
        write_hold(store, spec.name, version, why=f"publish {spec.name} v{version}")
        for client in clients if clients is not None else triton_clients(cfg):
            started = time.perf_counter()
            previous = _load(client, spec, version, cfg.triton_backend, cfg.triton_gpus)
            timings["load_s"] = timings.get("load_s", 0.0) + time.perf_counter() - started
            started = time.perf_counter()
            try:
                worst = max(worst, verify_answers(client, spec, version, prepared))
            except ServingError as exc:
                _restore(client, spec, previous, cfg.triton_backend, cfg.triton_gpus)
                raise ServingError(f"Triton {client.base_url}: {exc}") from exc
            timings["verify_s"] = timings.get("verify_s", 0.0) + time.perf_counter() - started
    return SpecPublishResult(spec.name, version, sha, uploaded, worst,
                             store.uri(f"{REPOSITORY_PREFIX}{spec.name}/{version}/{SPEC_FILE}"), timings)


def eval_table(registry: Any, run_id: str, into: Path) -> Path | None:
    """The first ``.parquet``/``.csv`` the run logged under ``eval/``, None when it logged none."""
    from modelops.errors import RegistryError

    try:
        folder = registry.download(run_id, EVAL_DIR, into / EVAL_DIR)
    except RegistryError:  # no eval/ folder in the run: the input example is the next source
        return None
    tables = sorted(p for p in Path(folder).rglob("*") if p.suffix in (".parquet", ".csv"))
    return tables[0] if tables else None


def publish_model(name: str, mlflow_version: str | int, *, cfg: Settings | None = None,
                  overrides: Mapping[str, Any] | None = None) -> SpecPublishResult:
    """Publish ``models:/<name>/<mlflow_version>`` from its spec; tags the MLflow version with the lineage.

    Raises:
        ContractError: the model is refused before Triton (see :func:`~modelops.serving.mlflow_models.prepare_model`).
        ServingError: Triton could not load it, reports another config, or answers differently.
    """
    from modelops.registry.lifecycle import Lineage
    from modelops.registry.mlflow_registry import MlflowRegistry

    cfg = cfg or settings()
    registry = MlflowRegistry.from_settings(cfg)
    info = registry.get(name, mlflow_version)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = registry.download_model(name, info.version, Path(tmp) / "model")
        table = eval_table(registry, info.run_id, Path(tmp)) if info.run_id else None
        tags = {k: v for k, v in registry.model_tags(name).items() if k.startswith(TAG_PREFIX)}
        prepared = prepare_model(model_dir, name, overrides={**tags, **(overrides or {})}, eval_table=table)
    # where it came from is the registry's name for it, not the temporary download folder
    source = Source(model_uri=info.uri, run_id=info.run_id)
    prepared = dataclasses.replace(prepared, spec=msgspec.structs.replace(prepared.spec, source=source))
    prepare_s = time.perf_counter() - started
    result = publish_prepared(prepared, mlflow_model_uri=info.uri, mlflow_version=info.version,
                              run_id=info.run_id, cfg=cfg)
    registry.set_lineage(name, info.version, Lineage(sha256=result.sha256, triton_version=result.triton_version,
                                                     triton_repository=store_uri(cfg)))
    registry.set_tags(name, info.version, {"modelops.spec_uri": result.spec_uri})
    return SpecPublishResult(result.model, result.triton_version, result.sha256, result.uploaded,
                             result.max_abs_diff, result.spec_uri, {"prepare_s": prepare_s, **result.timings_s})


def store_uri(cfg: Settings) -> str:
    """``s3://bucket/triton/repository/`` of the configured store."""
    return ObjectStore.from_settings(cfg).uri(REPOSITORY_PREFIX)


def route_first(result: SpecPublishResult, *, cfg: Settings | None = None, store: ObjectStore | None = None,
                by: str = "modelops publish --route") -> bool:
    """Route all traffic to ``result``'s version when the model has no routes document yet (its first serving).

    Returns whether a document was written; a model that is routed already is left alone (its next
    version goes through a release, which moves traffic step by step).
    """
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes

    store = store or ObjectStore.from_settings(cfg or settings())
    key = routes_key(result.model)
    if store.exists(key):
        return False
    store.put_bytes(key, serialize_routes(Routes(
        model=result.model, revision=1, stable=VersionRef(result.triton_version, result.sha256), canary=None,
        canary_weight=0.0, updated_at=datetime.now(UTC).isoformat(timespec="seconds"), updated_by=by)),
        content_type="application/json")
    return True
