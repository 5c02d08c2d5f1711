"""Publish an MLflow model version as a Triton version: the functions Airflow tasks call.

``publish_version(name, mlflow_version)``: download the run's ``onnx/`` artifacts,
give their sha256 its integer (the CAS index), build the files, upload with
verification and ``_COMPLETE`` last, mirror into the embedded Triton's local
repository, load beside the versions already served, check the config Triton reports,
and tag the MLflow version (sha256, Triton version, repository). Every step is
idempotent: a second publish of the same version uploads nothing and gives the same
integer.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from modelops.config import PROJECT_ROOT, Settings, settings
from modelops.errors import ServingError
from modelops.objectstore import ObjectStore
from modelops.serving.builder import Artifacts, release_files
from modelops.serving.holds import write_hold
from modelops.serving.index_store import allocate_version, model_lock
from modelops.serving.loader import ServedCheck, load_version, verify_served
from modelops.serving.modelinfo import MODEL_INFO_FILE, Manifest, ModelInfo, bundle_sha256, sha256_bytes
from modelops.serving.pbtxt import ModelConfigSpec, Role, Tuning, pipeline_specs
from modelops.serving.repository import REPOSITORY_PREFIX, mirror_release, read_manifest, upload_release
from modelops.serving.triton import TritonClient, triton_clients

ONNX_ARTIFACT_DIR = "onnx"


@dataclass(frozen=True)
class PublishResult:
    """What a publish did.

    Attributes:
        model: Triton pipeline name.
        triton_version: the integer version.
        sha256: identity of the version.
        uploaded: whether anything was written to the object store.
        loaded: whether the version is served by Triton after the publish.
        repository_uri: ``s3://bucket/triton/repository/``.
        mlflow_version: the MLflow version published (None for artifacts published directly).
    """

    model: str
    triton_version: int
    sha256: str
    uploaded: bool
    loaded: bool
    repository_uri: str
    mlflow_version: str | None = None


@dataclass(frozen=True)
class Provenance:
    """The model-info fields that come from MLflow (not from the build)."""

    mlflow_model_uri: str = ""
    mlflow_version: str = ""
    run_id: str = ""
    data_start: str | None = None
    data_end: str | None = None
    features: tuple[str, ...] = ()
    owner: str = ""


@lru_cache(maxsize=1)
def code_revision() -> str | None:
    """``git rev-parse HEAD`` of the project, None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def local_repository(cfg: Settings) -> Path:
    """The local repository the embedded Triton reads (``<home>/triton/repository``)."""
    return cfg.home / "triton" / "repository"


def specs_for(model: str, cfg: Settings, tuning: Tuning | None = None) -> dict[Role, ModelConfigSpec]:
    """The three config specs of ``model`` with the configured backend."""
    return pipeline_specs(model, backend=cfg.triton_backend, tuning=tuning)


def publish_artifacts(
    model: str,
    artifacts: Artifacts,
    provenance: Provenance,
    *,
    cfg: Settings | None = None,
    store: ObjectStore | None = None,
    client: TritonClient | None = None,
    tuning: Tuning | None = None,
    mirror_to: Path | None = None,
    load: bool = True,
) -> PublishResult:
    """Publish ONNX artifacts as a Triton version of ``model`` (the core of :func:`publish_version`).

    Args:
        model: Triton pipeline name (``[a-z0-9_]``).
        artifacts: the files to serve.
        provenance: MLflow-side fields of model-info.json.
        cfg: settings (default ``settings()``).
        store: object store (default from settings).
        client: Triton client (default from settings).
        tuning: batching/instances (default :class:`Tuning`).
        mirror_to: local repository to mirror into; default ``<home>/triton/repository``.
        load: load the version on Triton after publishing (else only upload + mirror).

    Raises:
        ServingError: verification, mirroring, loading or config check failed.
        ObjectStoreError: the store failed.
    """
    cfg = cfg or settings()
    store = store or ObjectStore.from_settings(cfg)
    sha = bundle_sha256(artifacts.as_files())
    version = allocate_version(store, model, sha).version
    specs = specs_for(model, cfg, tuning)
    existing = read_manifest(store, model, version)
    info = ModelInfo(
        model=model, triton_version=version, sha256=sha,
        files_sha256={name: sha256_bytes(data) for name, data in artifacts.as_files().items()},
        mlflow_model_uri=provenance.mlflow_model_uri, mlflow_version=provenance.mlflow_version,
        run_id=provenance.run_id, data_start=provenance.data_start, data_end=provenance.data_end,
        features=provenance.features, owner=provenance.owner,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"), code_revision=code_revision(),
    )
    files = release_files(specs, version, artifacts, info)
    if existing is not None:
        # Keep the model-info.json of the first publish (its created_at) when re-publishing.
        info_path = f"{model}/{version}/{MODEL_INFO_FILE}"
        if info_path in existing.files:
            files[info_path] = store.get_bytes(REPOSITORY_PREFIX + info_path)
    version_files = {p: d for p, d in files.items() if not p.endswith("config.pbtxt")}
    manifest = Manifest.of(model, version, sha, version_files)
    uploaded = upload_release(store, manifest, files)
    mirror_release(store, model, version, mirror_to or local_repository(cfg))
    loaded = False
    if load:
        # Every Triton server (MODELOPS_TRITON_URL=dns+http://...: each one the name resolves to now).
        clients = [client] if client is not None else triton_clients(cfg)
        todo = [c for c in clients if uploaded or not all(c.is_model_ready(spec.name, version)
                                                          for spec in specs.values())]
        if todo:
            with model_lock(store, model, owner=f"publish {model} v{version}"):
                # Held, so the reconciler keeps it loaded until the routes name it (or the hold expires).
                write_hold(store, model, version, why=f"publish {model} v{version}")
                for each in todo:
                    load_version(each, specs, version)
        loaded = True
    return PublishResult(model, version, sha, uploaded, loaded, store.uri(REPOSITORY_PREFIX),
                         provenance.mlflow_version or None)


def onnx_scorer(artifacts: Artifacts) -> Any:
    """features → score with onnxruntime on ``artifacts`` (what Triton must reproduce).

    A ``permuted`` variant (``templates/onnx_model.py``: each request's rows answered in reverse
    order, on purpose) is reproduced too, so the check still tells another model from it.
    """
    import json

    import onnxruntime as ort

    prep = ort.InferenceSession(artifacts.preprocess_onnx, providers=["CPUExecutionProvider"])
    model = ort.InferenceSession(artifacts.model_onnx, providers=["CPUExecutionProvider"])
    try:
        reversed_rows = json.loads(artifacts.variant_json or b"{}").get("variant") == "permuted"
    except (ValueError, AttributeError):
        reversed_rows = False

    def score(features: Any) -> Any:
        scaled = prep.run(["scaled"], {"features": features})[0]
        scores = model.run(["score"], {"scaled": scaled})[0]
        return scores[::-1] if reversed_rows else scores

    return score


def _feature_names() -> tuple[str, ...]:
    try:
        from modelops.modelspec.recommender import recommender_feature_names

        return recommender_feature_names()
    except Exception:  # the feature file is optional for publishing; model-info then lists none
        return ()


def fetch_version(name: str, mlflow_version: str | int, *, cfg: Settings | None = None,
                  dst: Path | None = None) -> tuple[Artifacts, Provenance]:
    """Download an MLflow version's ``onnx/`` artifacts and its provenance."""
    from modelops.registry.mlflow_registry import MlflowRegistry

    cfg = cfg or settings()
    registry = MlflowRegistry.from_settings(cfg)
    info = registry.get(name, mlflow_version)
    if not info.run_id:
        raise ServingError(f"models:/{name}/{mlflow_version} has no run id: cannot find its onnx/ artifacts")
    run_tags = registry.run_tags(info.run_id)
    tags = {**run_tags, **info.tags}
    with tempfile.TemporaryDirectory(dir=dst) as tmp:
        folder = registry.download(info.run_id, ONNX_ARTIFACT_DIR, Path(tmp))
        artifacts = Artifacts.from_dir(folder)
    provenance = Provenance(
        mlflow_model_uri=info.uri, mlflow_version=info.version, run_id=info.run_id,
        data_start=tags.get("data_start"), data_end=tags.get("data_end"),
        features=_feature_names(), owner=tags.get("owner") or run_tags.get("mlflow.user", ""),
    )
    return artifacts, provenance


def publish_version(
    model_name: str,
    mlflow_version: str | int,
    *,
    triton_name: str | None = None,
    cfg: Settings | None = None,
    store: ObjectStore | None = None,
    client: TritonClient | None = None,
    load: bool = True,
    tuning: Tuning | None = None,
    mirror_to: Path | None = None,
) -> PublishResult:
    """Publish MLflow ``models:/<model_name>/<mlflow_version>`` to Triton (see the module doc).

    Args:
        model_name: registered model name; also the Triton pipeline name unless ``triton_name``.
        mlflow_version: the registered version.
        triton_name: Triton pipeline name when it differs from ``model_name``.
        cfg: settings (default ``settings()``).
        store / client: object store and Triton client (default from settings).
        load: load on Triton after publishing.
        tuning: batching/instances.
        mirror_to: local repository to mirror into (default ``<home>/triton/repository``).

    Returns:
        The :class:`PublishResult`; the MLflow version is tagged with sha256 and Triton version.
    """
    from modelops.registry.lifecycle import Lineage
    from modelops.registry.mlflow_registry import MlflowRegistry

    cfg = cfg or settings()
    artifacts, provenance = fetch_version(model_name, mlflow_version, cfg=cfg)
    result = publish_artifacts(triton_name or model_name, artifacts, provenance, cfg=cfg, store=store,
                               client=client, load=load, tuning=tuning, mirror_to=mirror_to)
    MlflowRegistry.from_settings(cfg).set_lineage(
        model_name, mlflow_version,
        Lineage(sha256=result.sha256, triton_version=result.triton_version,
                triton_repository=result.repository_uri, data_start=provenance.data_start,
                data_end=provenance.data_end),
    )
    return PublishResult(result.model, result.triton_version, result.sha256, result.uploaded, result.loaded,
                         result.repository_uri, provenance.mlflow_version)


def verify_published(model: str, version: int, artifacts: Artifacts | None = None, *,
                     cfg: Settings | None = None) -> ServedCheck:
    """:func:`~modelops.serving.loader.verify_served` on every configured Triton server.

    Returns:
        The check of the first server (every server answered the same way: the same scores
        as the published artifacts when ``artifacts`` are given).

    Raises:
        ServingError: a server does not serve the version or answers differently (it names the server).
    """
    expected_fn = onnx_scorer(artifacts) if artifacts else None
    checks = []
    for client in triton_clients(cfg or settings()):
        try:
            checks.append(verify_served(client, model, version, expected_fn=expected_fn))
        except ServingError as exc:
            raise ServingError(f"Triton {client.base_url}: {exc}") from exc
    return checks[0]
