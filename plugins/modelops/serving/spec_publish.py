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
version is tagged with the lineage, the spec's location and how it is served (``modelops.served_as``).

The payload follows the flavor (:mod:`modelops.serving.spec_files`): an ONNX graph, the MLflow model
directory under Triton's python backend (``pyfunc``, also a converted flavor whose graph failed its
parity check: :attr:`SpecPublishResult.notes` says why), or the user's own Triton version folder
(``triton``, whose backend the servers must have: refused before a version number is taken). A
triton-flavor model logged without expected outputs has no answers to be held against:
:func:`verify_consistency` checks its answers' shapes, that they are finite, and that a second call and
every other server answer the same (``verified_by: consistency``).

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
from modelops.serving.prepared import EVAL_SUFFIXES
from modelops.serving.publisher import code_revision, local_repository
from modelops.serving.repository import REPOSITORY_PREFIX, mirror_release, upload_release
from modelops.serving.spec_files import (
    SPEC_FILE,
    payload_files,
    require_backend,
    require_placement,
    served_spec,
    spec_release_files,
    version_sha256,
)
from modelops.serving.spec_serving import Placement, serve_versions
from modelops.serving.triton import TritonClient, triton_clients

EVAL_DIR = "eval"


@dataclass(frozen=True)
class SpecPublishResult:
    """What :func:`publish_prepared` did (``timings_s``: prepare, upload, load, verify).

    ``served_as``: ``onnx``, ``pyfunc`` or ``triton``; ``verified_by``: what Triton's answers were held
    against (:data:`modelops.serving.prepared.VERIFIED_BY`); ``notes``: what happened on the way (a failed
    conversion served by pyfunc instead, a triton model verified by consistency).
    """

    model: str
    triton_version: int
    sha256: str
    uploaded: bool
    max_abs_diff: float
    spec_uri: str
    timings_s: Mapping[str, float]
    served_as: str = "onnx"
    verified_by: str = "model"
    notes: tuple[str, ...] = ()


def compare_answers(spec: ModelSpec, version: int, got: Mapping[str, Any], expected: Mapping[str, Any],
                    against: str = "the model's own") -> float:
    """``got`` against ``expected`` (output name → array); returns the largest absolute difference.

    Raises:
        ServingError: an output differs beyond its tolerance (named, with the difference).
    """
    worst = 0.0
    for name, want in expected.items():
        have = np.asarray(got[name]).reshape(np.shape(want))
        if np.issubdtype(np.asarray(want).dtype, np.floating):
            diff = np.abs(have.astype(np.float64) - np.asarray(want, dtype=np.float64))
            if name == "probabilities":
                measured, bound, which = float(diff.max(initial=0.0)), PROBABILITY_TOLERANCE, "absolute"
            else:
                rel = diff / np.maximum(np.abs(np.asarray(want, dtype=np.float64)), 1.0)
                measured, bound, which = float(rel.max(initial=0.0)), REGRESSION_TOLERANCE, "relative"
            worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)))
            if not measured <= bound:  # NaN is no answer either
                raise ServingError(f"{spec.name} version {version}: Triton's {name} differ from {against} by "
                                   f"{measured:.3g} ({which}, tolerance {bound:g}): not served")
        elif not np.array_equal(have, want):
            raise ServingError(f"{spec.name} version {version}: Triton's {name} are not {against} "
                               f"(first rows {have[:3].tolist()} vs {np.asarray(want)[:3].tolist()}): not served")
    return worst


def infer_sample(client: TritonClient, spec: ModelSpec, version: int, sample: Mapping[str, Any],
                 outputs: tuple[str, ...]) -> dict[str, Any]:
    """Triton's answers on ``sample``, asked in batches of at most ``max_batch_size`` rows (Triton refuses more)."""
    size = spec.tuning.max_batch_size
    rows = int(next(iter(sample.values())).shape[0]) if sample else 0
    if size <= 0 or rows <= size:
        return client.infer(spec.name, version, dict(sample), outputs)
    parts = [client.infer(spec.name, version, {k: v[i:i + size] for k, v in sample.items()}, outputs)
             for i in range(0, rows, size)]
    return {name: np.concatenate([p[name] for p in parts]) for name in outputs}


def verify_answers(client: TritonClient, spec: ModelSpec, version: int, prepared: PreparedModel) -> float:
    """Triton's outputs on the evaluation sample against the expected ones; returns the largest difference.

    Raises:
        ServingError: an output differs beyond its tolerance (named, with the difference).
    """
    got = infer_sample(client, spec, version, prepared.sample, tuple(prepared.expected))
    against = "the logged outputs" if prepared.verified_by == "logged_outputs" else "the model's own"
    return compare_answers(spec, version, got, prepared.expected, against)


def answer_problems(spec: ModelSpec, got: Mapping[str, Any], rows: int) -> list[str]:
    """Where ``got`` is not an answer of the spec's outputs to ``rows`` rows: missing, shape, non-finite floats."""
    problems = []
    batched = spec.tuning.max_batch_size > 0
    for t in spec.outputs:
        if t.name not in got:
            problems.append(f"output {t.name}: missing")
            continue
        array = np.asarray(got[t.name])
        want = (rows, *t.shape[1:]) if batched else t.shape
        if array.ndim != len(want) or any(w != -1 and w != h for w, h in zip(want, array.shape, strict=True)):
            problems.append(f"output {t.name}: shape {list(array.shape)}, the spec says {list(want)} for {rows} rows")
        elif np.issubdtype(array.dtype, np.floating) and not bool(np.isfinite(array).all()):
            problems.append(f"output {t.name}: {int((~np.isfinite(array)).sum())} values are NaN or infinite")
    return problems


def verify_consistency(client: TritonClient, spec: ModelSpec, version: int, prepared: PreparedModel,
                       reference: Mapping[str, Any] | None) -> dict[str, Any]:
    """A model with no expected answers: well-formed, the same on a second call, and the same as ``reference``
    (the first server's answers); returns this server's answers.

    Raises:
        ServingError: malformed answers, or answers that change between calls or servers (named).
    """
    outputs = tuple(t.name for t in spec.outputs)
    first = infer_sample(client, spec, version, prepared.sample, outputs)
    problems = answer_problems(spec, first, prepared.sample_rows)
    if problems:
        raise ServingError(f"{spec.name} version {version}: Triton's answers on the evaluation sample are not the "
                           "spec's outputs:\n  " + "\n  ".join(problems))
    again = infer_sample(client, spec, version, prepared.sample, outputs)
    compare_answers(spec, version, again, first, "its own first answers (a second call answered differently)")
    if reference is not None:
        compare_answers(spec, version, first, reference, "the first server's answers")
    return first


def _load(client: TritonClient, spec: ModelSpec, version: int, server_backend: str, server_gpus: int) -> list[int]:
    """Serve ``version`` beside what ``client`` serves; on a refused or differing config, back to what it served."""
    previous = client.ready_versions(spec.name)
    placement = Placement(server_backend, server_gpus)
    try:
        serve_versions(client, spec, sorted(set(previous) | {version}), placement)
    except ServingError:
        _restore(client, spec, previous, server_backend, server_gpus)
        raise
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
    require_backend(spec, cfg.triton_backend)
    started = time.perf_counter()
    payload = payload_files(spec, prepared.payload)
    sha = version_sha256(prepared.payload, spec)
    version = allocate_version(store, spec.name, sha).version
    info = ModelInfo(
        model=spec.name, triton_version=version, sha256=sha,
        files_sha256={path: sha256_bytes(data) for path, data in payload.items()}, mlflow_model_uri=mlflow_model_uri,
        mlflow_version=mlflow_version, run_id=run_id, data_start=None, data_end=None,
        features=tuple(f.name for f in spec.features), owner="",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"), code_revision=code_revision(),
    )
    files = spec_release_files(spec, version, prepared.payload, info, server_backend=cfg.triton_backend,
                               server_gpus=cfg.triton_gpus)
    version_files = {p: d for p, d in files.items() if not p.endswith("config.pbtxt")}
    uploaded = upload_release(store, Manifest.of(spec.name, version, sha, version_files), files)
    mirror_release(store, spec.name, version, mirror_to or local_repository(cfg))
    timings["upload_s"] = time.perf_counter() - started
    worst, reference = 0.0, None
    with model_lock(store, spec.name, owner=f"publish {spec.name} v{version}"):
        write_hold(store, spec.name, version, why=f"publish {spec.name} v{version}")
        for client in clients if clients is not None else triton_clients(cfg):
            started = time.perf_counter()
            previous = _load(client, spec, version, cfg.triton_backend, cfg.triton_gpus)
            timings["load_s"] = timings.get("load_s", 0.0) + time.perf_counter() - started
            started = time.perf_counter()
            try:
                if prepared.expected:
                    worst = max(worst, verify_answers(client, spec, version, prepared))
                else:
                    reference = verify_consistency(client, spec, version, prepared, reference)
            except ServingError as exc:
                _restore(client, spec, previous, cfg.triton_backend, cfg.triton_gpus)
                raise ServingError(f"Triton {client.base_url}: {exc}") from exc
            timings["verify_s"] = timings.get("verify_s", 0.0) + time.perf_counter() - started
    return SpecPublishResult(spec.name, version, sha, uploaded, worst,
                             store.uri(f"{REPOSITORY_PREFIX}{spec.name}/{version}/{SPEC_FILE}"), timings,
                             prepared.served_as, prepared.verified_by, prepared.notes)


def eval_table(registry: Any, run_id: str, into: Path) -> Path | None:
    """The first ``.parquet``/``.csv``/``.npz`` the run logged under ``eval/``, None when it logged none."""
    from modelops.errors import RegistryError

    try:
        folder = registry.download(run_id, EVAL_DIR, into / EVAL_DIR)
    except RegistryError:  # no eval/ folder in the run: the input example is the next source
        return None
    tables = sorted(p for p in Path(folder).rglob("*") if p.suffix in EVAL_SUFFIXES)
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
    registry.set_tags(name, info.version, {"modelops.spec_uri": result.spec_uri,
                                           "modelops.served_as": result.served_as})
    return dataclasses.replace(result, timings_s={"prepare_s": prepare_s, **result.timings_s})


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
