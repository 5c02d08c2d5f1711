"""``model-info.json`` (schema_version 1) and the ``_COMPLETE`` manifest: records, pure.

``model-info.json`` lies in the pipeline's version folder (``NAME/<N>/model-info.json``)
and says where the version came from. ``_COMPLETE`` (``NAME/<N>/_COMPLETE``) is written
last by the publisher: its manifest lists the sha256 of every file of the version (the
three models' version folders and their ``config.pbtxt``); a version without it is
incomplete and never mirrored or loaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TypeVar

import msgspec

from modelops.errors import ServingError

MODEL_INFO_SCHEMA_VERSION = 1
MANIFEST_SCHEMA_VERSION = 1
MODEL_INFO_FILE = "model-info.json"
COMPLETE_MARKER = "_COMPLETE"
_STRUCT = {"frozen": True, "forbid_unknown_fields": True}
_Record = TypeVar("_Record", bound=msgspec.Struct)


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def bundle_sha256(files: Mapping[str, bytes]) -> str:
    """The identity of a model version: sha256 over the sorted ``name sha256`` lines of its files.

    Covers every served artifact (``preprocess.onnx``, ``model.onnx``, ``variant.json``),
    so two versions differing only in their preprocessing or variant get different
    integers. With the single file ``model.onnx`` it is still a pure function of it.
    """
    lines = "".join(f"{name} {sha256_bytes(data)}\n" for name, data in sorted(files.items()))
    return sha256_bytes(lines.encode())


def _to_json(record: msgspec.Struct) -> bytes:
    """The record as the files have always been written: two-space indent, keys sorted, a final newline."""
    return (json.dumps(msgspec.to_builtins(record), indent=2, sort_keys=True) + "\n").encode()


def _from_json(data: bytes | str, kind: type[_Record], what: str, schema_version: int) -> _Record:
    """Decode and type-check one record; a wrong type, a missing or an unknown field names its path."""
    try:
        doc = msgspec.json.decode(data, type=dict[str, object])  # parsed once; the version read first
        found = doc.get("schema_version")
        if found != schema_version:
            raise ServingError(f"{what}: schema_version must be {schema_version}, found {found!r}")
        return msgspec.convert(doc, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ServingError(f"{what}: unreadable ({exc})") from exc


class ModelInfo(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Provenance of one served version (``model-info.json``).

    Attributes:
        model: Triton pipeline name NAME.
        triton_version: the integer version folder.
        sha256: identity of the version (:func:`bundle_sha256` of its artifacts).
        files_sha256: sha256 of each source artifact (``model.onnx`` → hex).
        mlflow_model_uri: ``models:/<name>/<version>``.
        mlflow_version: registered model version (string, as MLflow returns it).
        run_id: the MLflow run that logged the artifacts.
        data_start / data_end: training-data date range (ISO dates), None when unknown.
        features: input feature names in tensor order.
        owner: who owns the model.
        created_at: ISO-8601 UTC time the version was built.
        code_revision: git commit of the publishing code, None when unknown.
    """

    model: str
    triton_version: int
    sha256: str
    files_sha256: dict[str, str]
    mlflow_model_uri: str
    mlflow_version: str
    run_id: str
    data_start: str | None
    data_end: str | None
    features: tuple[str, ...]
    owner: str
    created_at: str
    code_revision: str | None
    schema_version: int = MODEL_INFO_SCHEMA_VERSION

    def to_json(self) -> bytes:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> ModelInfo:
        return _from_json(data, cls, MODEL_INFO_FILE, MODEL_INFO_SCHEMA_VERSION)


class Manifest(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """The ``_COMPLETE`` marker: every file of a version and its sha256.

    Attributes:
        model: Triton pipeline name.
        triton_version: version integer.
        sha256: identity of the version.
        files: repository-relative path (``NAME_model/3/model.onnx``) → sha256, sorted by path.
    """

    model: str
    triton_version: int
    sha256: str
    files: dict[str, str] = msgspec.field(default_factory=dict)
    schema_version: int = MANIFEST_SCHEMA_VERSION

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "files", dict(sorted(self.files.items())))

    def to_json(self) -> bytes:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> Manifest:
        return _from_json(data, cls, COMPLETE_MARKER, MANIFEST_SCHEMA_VERSION)

    @classmethod
    def of(cls, model: str, triton_version: int, sha256: str, files: Mapping[str, bytes]) -> Manifest:
        """The manifest of in-memory ``files`` (path → content)."""
        return cls(model, triton_version, sha256, {path: sha256_bytes(data) for path, data in files.items()})

    def content_equal(self, other: Manifest, *, ignore: tuple[str, ...] = (MODEL_INFO_FILE,)) -> bool:
        """Same version and files, ignoring files whose name ends with one of ``ignore``.

        ``model-info.json`` holds ``created_at`` and so differs between two builds of the
        same version; it is ignored when deciding whether a re-publish must upload.
        """

        def kept(files: Mapping[str, str]) -> dict[str, str]:
            return {p: s for p, s in files.items() if not p.endswith(ignore)}

        return (self.model, self.triton_version, self.sha256) == (
            other.model, other.triton_version, other.sha256
        ) and kept(self.files) == kept(other.files)


def verify_files(manifest: Manifest, actual: Mapping[str, str]) -> list[str]:
    """Problems between ``manifest`` and the sha256s ``actual`` read back (empty when they agree)."""
    problems = [
        f"{path}: expected sha256 {want}, found {actual.get(path, 'nothing')}"
        for path, want in manifest.files.items()
        if actual.get(path) != want
    ]
    problems += [f"{path}: not in the manifest" for path in sorted(set(actual) - set(manifest.files))]
    return problems
