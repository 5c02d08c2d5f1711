"""The Triton repository in the object store and its local mirror.

Store layout (bucket ``settings().bucket``, prefix :data:`REPOSITORY_PREFIX`) is a
Triton repository (see :mod:`modelops.serving.builder`), plus ``NAME/<N>/_COMPLETE``.

Upload (:func:`upload_release`): the version's files are written under a staging
prefix (``triton/staging/NAME/N/<token>/``) and read back (sha256 compared), copied
server-side into the repository and read back again, and only then ``_COMPLETE`` with
the manifest is written, last. A version without ``_COMPLETE`` is never mirrored or
loaded; a crashed upload is simply redone by the next publish (the sha256 keeps its
integer). Re-publishing a complete, identical version writes nothing.

Mirror (:func:`mirror_release`): the embedded Triton reads a local directory. A
complete version is downloaded into a temporary folder beside the repository, every
file is checked against the manifest (a tampered object fails the publish), every
ONNX file must open in onnxruntime (:mod:`modelops.serving.preflight`: a file that
cannot is never a failed load on a shared Triton), and each model's version folder
is renamed into place — the pipeline's, holding the local ``_COMPLETE``, last.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

from modelops.errors import ObjectStoreError, ServingError
from modelops.objectstore import ObjectStore
from modelops.serving.modelinfo import COMPLETE_MARKER, Manifest, sha256_bytes, verify_files
from modelops.serving.preflight import unopenable

REPOSITORY_PREFIX = "triton/repository/"
STAGING_PREFIX = "triton/staging/"
"""Uploads land here first; only verified files are copied into the repository."""


def marker_path(model: str, version: int) -> str:
    """Repository-relative path of the completion marker of ``model`` version ``version``."""
    return f"{model}/{version}/{COMPLETE_MARKER}"


def read_manifest(store: ObjectStore, model: str, version: int,
                  prefix: str = REPOSITORY_PREFIX) -> Manifest | None:
    """The ``_COMPLETE`` manifest in the store, or None when the version is not complete."""
    key = prefix + marker_path(model, version)
    if not store.exists(key):
        return None
    return Manifest.from_json(store.get_bytes(key))


def _put_if_changed(store: ObjectStore, key: str, data: bytes) -> bool:
    """Put ``data`` unless the object already holds exactly it; returns whether it wrote."""
    if store.exists(key) and sha256_bytes(store.get_bytes(key)) == sha256_bytes(data):
        return False
    store.put_bytes(key, data)
    return True


def upload_release(store: ObjectStore, manifest: Manifest, files: Mapping[str, bytes], *,
                   prefix: str = REPOSITORY_PREFIX) -> bool:
    """Upload one version and mark it complete; returns False when it was complete already.

    Args:
        store: the object store.
        manifest: the manifest of the version's own files (``X/N/...``).
        files: every file to place: the version's files and the models' ``config.pbtxt``.
        prefix: repository prefix in the bucket.

    Raises:
        ServingError: a file read back differs from what was written.
        ObjectStoreError: the store failed.
    """
    existing = read_manifest(store, manifest.model, manifest.triton_version, prefix)
    configs = {p: d for p, d in files.items() if p not in manifest.files}
    wrote_config = any([_put_if_changed(store, prefix + p, d) for p, d in sorted(configs.items())])
    if existing is not None:
        if existing.sha256 != manifest.sha256:
            raise ServingError(
                f"{store.uri(prefix + marker_path(manifest.model, manifest.triton_version))} belongs to "
                f"sha256 {existing.sha256}, not {manifest.sha256}: "
                "the version index and the repository disagree"
            )
        if existing.content_equal(manifest):
            return wrote_config
    store.delete(prefix + marker_path(manifest.model, manifest.triton_version))
    staging = f"{STAGING_PREFIX}{manifest.model}/{manifest.triton_version}/{uuid.uuid4().hex[:12]}/"
    try:
        for path in manifest.files:
            store.put_bytes(staging + path, files[path])
        _verify_in_store(store, manifest, staging, "staged upload")
        for path in manifest.files:
            _copy(store, staging + path, prefix + path)
        _verify_in_store(store, manifest, prefix, "repository copy")
    finally:
        for path in manifest.files:
            store.delete(staging + path)
    store.put_bytes(prefix + marker_path(manifest.model, manifest.triton_version), manifest.to_json(),
                    content_type="application/json")
    return True


def _verify_in_store(store: ObjectStore, manifest: Manifest, prefix: str, what: str) -> None:
    """Re-read every file of ``manifest`` under ``prefix`` and compare its sha256."""
    read_back = {path: sha256_bytes(store.get_bytes(prefix + path)) for path in manifest.files}
    problems = verify_files(manifest, read_back)
    if problems:
        raise ServingError(f"{what} verification failed ({store.uri(prefix)}), version not marked "
                           "complete:\n  " + "\n  ".join(problems))


def _copy(store: ObjectStore, source: str, target: str) -> None:
    """Server-side copy inside the bucket (the ObjectStore adapter has no copy yet)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        store.client.copy_object(Bucket=store.bucket, Key=target,
                                 CopySource={"Bucket": store.bucket, "Key": source})
    except (ClientError, BotoCoreError) as exc:
        raise ObjectStoreError(f"copy {store.uri(source)} -> {store.uri(target)} failed: {exc}") from exc


def _local_manifest_ok(root: Path, manifest: Manifest) -> bool:
    local_marker = root / marker_path(manifest.model, manifest.triton_version)
    if not local_marker.exists() or Manifest.from_json(local_marker.read_bytes()) != manifest:
        return False
    try:
        actual = {p: sha256_bytes((root / p).read_bytes()) for p in manifest.files}
    except OSError:
        return False
    return not verify_files(manifest, actual)


def mirror_release(store: ObjectStore, model: str, version: int, local_root: Path, *,
                   prefix: str = REPOSITORY_PREFIX) -> bool:
    """Copy a complete version from the store into the local repository, atomically per folder.

    Returns False when the local copy was already complete and intact (nothing copied).

    Raises:
        ServingError: the version is not complete in the store, or a downloaded file does
            not match the manifest (nothing is placed in the local repository then).
    """
    manifest = read_manifest(store, model, version, prefix)
    if manifest is None:
        raise ServingError(f"{store.uri(prefix + marker_path(model, version))} missing: "
                           f"version {version} of {model} is not complete, refusing to mirror it")
    if _local_manifest_ok(local_root, manifest):
        return False
    staging = local_root.parent / "staging" / f"{model}-{version}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        actual: dict[str, str] = {}
        for path in manifest.files:
            data = store.get_bytes(prefix + path)
            actual[path] = sha256_bytes(data)
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        problems = verify_files(manifest, actual)
        if problems:
            raise ServingError(f"{store.uri(prefix)}: version {version} of {model} does not match its "
                               "manifest (corrupted or tampered), refusing to mirror it:\n  "
                               + "\n  ".join(problems))
        models = sorted({path.split("/", 1)[0] for path in manifest.files}, key=lambda m: (m == model, m))
        problems = unopenable(staging / name / str(version) for name in models)
        if problems:
            raise ServingError(f"version {version} of {model} cannot be loaded, refusing to mirror it (no Triton "
                               "is asked to load it):\n  " + "\n  ".join(problems))
        (staging / marker_path(model, version)).write_bytes(manifest.to_json())
        for name in models:
            config_key = f"{prefix}{name}/config.pbtxt"
            local_config = local_root / name / "config.pbtxt"
            (local_root / name).mkdir(parents=True, exist_ok=True)
            try:
                config = store.get_bytes(config_key)
            except ObjectStoreError:
                config = None
            if config is not None:
                tmp = local_config.with_name(f".config.pbtxt.{uuid.uuid4().hex[:8]}")
                tmp.write_bytes(config)
                os.replace(tmp, local_config)
            _swap_in(staging / name / str(version), local_root / name / str(version))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def _swap_in(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first, then removed."""
    old = None
    if target.exists():
        old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
