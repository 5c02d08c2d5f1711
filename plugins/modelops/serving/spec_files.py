"""The files of one Triton version of a model published from its model spec (pure: bytes in, path → bytes out).

Layout (paths relative to the repository root, N the integer version), by how the version is served
(:func:`served_as`, from the spec's flavor)::

    NAME/config.pbtxt            rendered from the spec (modelops.modelspec.render.config_pbtxt)
    NAME/N/model-info.json       provenance (modelops.serving.modelinfo)
    NAME/N/model-spec.json       the spec itself (schema_version 1), the single source of the model's
                                 contract, Triton config, features and outcomes
    onnx (onnx, sklearn, lightgbm, xgboost):
    NAME/N/model.onnx            the served graph (converted, or the user's own)
    NAME/N/model.py              only when the server runs ONNX through the python backend
    pyfunc (MLflow's python_function, Triton's python backend):
    NAME/N/model.py              model_repository/templates/pyfunc_model.py (loads the directory below)
    NAME/N/mlflow_model/...      the MLflow model directory as logged (MLmodel, requirements.txt, ...)
    triton (a Triton model directory the user logged):
    NAME/N/...                   the files of its version folder as logged (model.py, weights, ...)

One Triton model per version, not the reference recommender's three-step pipeline
(:mod:`modelops.serving.builder`). The identity of a version (:func:`version_sha256`) covers the
payload (the graph, or every payload file by its path in the version folder) and the spec, so the
same files with another declared contract or tuning are a new version; for an ONNX graph it is the
same sha256 as before payloads of several files existed.

*Served* spec: a spec whose flavor Triton runs with ``onnxruntime`` is rendered with the ``python``
backend on a server that has none (``MODELOPS_TRITON_BACKEND=python``: the embedded stack's
Triton carries only the python backend), running ``model_repository/templates/spec_model.py``;
the stored ``model-spec.json`` keeps the user's declaration. A ``triton``-flavor model keeps its own
backend: :func:`require_backend` refuses, before anything is uploaded, one the servers lack
(:func:`server_backends`). Its ``instance_group`` ``kind: auto`` is
served as ``gpu`` on servers with GPUs (``MODELOPS_TRITON_GPUS`` > 0) and as ``cpu`` elsewhere, so the
config Triton reports after loading is the one rendered; :func:`require_placement` refuses, before
anything is uploaded, a spec the servers cannot place (``kind: gpu`` without a GPU, a device id they
do not have).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from modelops.errors import ContractError, ServingError
from modelops.modelspec.render import config_pbtxt
from modelops.modelspec.spec import ModelSpec
from modelops.serving.modelinfo import COMPLETE_MARKER, MODEL_INFO_FILE, ModelInfo, bundle_sha256
from modelops.serving.pbtxt import TEMPLATES_DIR

SPEC_FILE = "model-spec.json"
GRAPH_FILE = "model.onnx"
RUNNER_TEMPLATE = "spec_model.py"
PYFUNC_TEMPLATE = "pyfunc_model.py"
PYFUNC_DIR = "mlflow_model"
"""The MLflow model directory's folder inside a pyfunc version folder (the template loads it from there)."""
RUNNER_FILE = "model.py"
RESERVED_FILES = frozenset({SPEC_FILE, MODEL_INFO_FILE, COMPLETE_MARKER})
"""Names of a version folder the platform writes; a payload may not bring its own."""
SERVED_AS: tuple[str, ...] = ("onnx", "pyfunc", "triton")
Payload = bytes | Mapping[str, bytes]
"""An ONNX graph, or the files of a pyfunc model directory / a Triton version folder by relative path."""


def served_as(spec: ModelSpec) -> str:
    """How a version of ``spec`` is served: ``triton`` (the user's own Triton model), ``pyfunc`` (the python
    backend running the MLflow model) or ``onnx`` (an ONNX graph, converted or logged)."""
    return spec.flavor if spec.flavor in ("triton", "pyfunc") else "onnx"


def server_backends(server_backend: str) -> tuple[str, ...]:
    """The Triton backends the servers have: ``python`` everywhere (the pytriton wheel's server and NVIDIA's
    image both carry it), ``onnxruntime`` besides where ``MODELOPS_TRITON_BACKEND=onnxruntime`` says so."""
    return ("python",) if server_backend == "python" else ("onnxruntime", "python")


def require_backend(spec: ModelSpec, server_backend: str) -> None:
    """Refuse a ``triton``-flavor spec whose backend the servers lack (before anything is uploaded).

    Raises:
        ContractError: the backend, and the servers' backends.
    """
    have = server_backends(server_backend)
    if served_as(spec) == "triton" and spec.triton_backend not in have:
        raise ContractError(f"model {spec.name}: the triton-flavor model's backend {spec.triton_backend!r} is not "
                            f"on the Triton servers; they have {list(have)} (MODELOPS_TRITON_BACKEND="
                            f"{server_backend}); log a model for one of them (example: backend: \"python\" with "
                            "model.py in the version folder)")


def payload_files(spec: ModelSpec, payload: Payload) -> dict[str, bytes]:
    """The payload's files by their path in the version folder (see the module docstring's layout).

    Raises:
        ContractError: a payload of the wrong kind for how ``spec`` is served, an empty one, or a file named
            like one the platform writes (``model-spec.json``, ``model-info.json``, ``_COMPLETE``; a pyfunc
            model directory is free to hold any names, it lies in a folder of its own).
    """
    how = served_as(spec)
    if how == "onnx":
        if not isinstance(payload, bytes):
            raise ContractError(f"model {spec.name}: an ONNX-served version takes the graph's bytes")
        return {GRAPH_FILE: payload}
    if isinstance(payload, bytes) or not payload:
        raise ContractError(f"model {spec.name}: a {how} version takes the files of its folder; none given")
    if how == "pyfunc":
        return {f"{PYFUNC_DIR}/{path}": data for path, data in sorted(payload.items())}
    clashes = sorted(p for p in payload if p in RESERVED_FILES)
    if clashes:
        raise ContractError(f"model {spec.name}: the version folder holds {clashes}, names the platform writes "
                            f"({sorted(RESERVED_FILES)}); rename them")
    return dict(sorted(payload.items()))


def served_spec(spec: ModelSpec, server_backend: str, server_gpus: int = 0) -> ModelSpec:
    """The spec as this server runs it.

    ``onnxruntime`` becomes ``python`` where the server has no onnxruntime (for an ONNX graph the runner
    template runs; a ``triton``-flavor model keeps its backend, see :func:`require_backend`); ``kind: auto`` becomes
    ``gpu`` where the server has GPUs (``server_gpus`` > 0), ``cpu`` otherwise.
    """
    served = spec
    if served_as(spec) == "onnx" and spec.triton_backend == "onnxruntime" and server_backend == "python":
        served = msgspec.structs.replace(served, backend="python")
    group = spec.tuning.instance_group
    if group.kind == "auto":
        placed = msgspec.structs.replace(group, kind="gpu" if server_gpus > 0 else "cpu")
        served = msgspec.structs.replace(served, tuning=msgspec.structs.replace(spec.tuning, instance_group=placed))
    return served


def require_placement(spec: ModelSpec, server_gpus: int) -> None:
    """Refuse a spec whose ``instance_group`` the servers (``server_gpus`` GPUs each) cannot place.

    Raises:
        ContractError: ``kind: gpu`` on CPU-only servers, or ``gpus`` naming a device they do not have.
    """
    group = spec.tuning.instance_group
    field = "tuning.instance_group"
    if group.kind == "gpu" and server_gpus == 0:
        raise ContractError(f"model {spec.name}: {field}.kind=gpu, but the Triton servers have no GPU "
                            "(MODELOPS_TRITON_GPUS=0); declare kind: auto (a GPU where the server has one, the CPU "
                            "otherwise) or kind: cpu (example: instance_group: {kind: auto, count: 1})")
    missing = sorted(d for d in group.gpus if d >= server_gpus)
    if group.kind == "gpu" and missing:
        raise ContractError(f"model {spec.name}: {field}.gpus={list(group.gpus)}: the Triton servers have "
                            f"{server_gpus} GPU(s), ids 0..{server_gpus - 1}; no device {missing} "
                            f"(example: gpus: [0])")


def spec_bytes(spec: ModelSpec) -> bytes:
    """``model-spec.json``: the spec as indented JSON in field order (stable bytes for the version identity).

    Fields added after the format's first version are left out at their defaults (empty ``parameters``,
    a null ``outcomes.token_ttl_s``), so a spec without them has the bytes (and the identity) it had
    before they existed: republishing an unchanged model gives the same Triton version.
    """
    doc = msgspec.to_builtins(spec)
    if not doc.get("parameters"):
        doc.pop("parameters", None)
    if doc.get("outcomes", {}).get("token_ttl_s") is None:
        doc.get("outcomes", {}).pop("token_ttl_s", None)
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def version_sha256(payload: Payload, spec: ModelSpec) -> str:
    """The identity of a spec-published version: sha256 over the payload and the spec (not its ``source``).

    ``source`` (the model URI, the run) says where the bytes came from, not what is served, so
    publishing the same model from another run gives the same integer version.
    """
    declared = msgspec.structs.replace(spec, source=type(spec.source)())
    return bundle_sha256({**payload_files(spec, payload), SPEC_FILE: spec_bytes(declared)})


def spec_release_files(spec: ModelSpec, version: int, payload: Payload, info: ModelInfo, *, server_backend: str,
                       server_gpus: int = 0, templates_dir: Path = TEMPLATES_DIR) -> dict[str, bytes]:
    """Every file of version ``version`` of ``spec``'s model, repository-relative path → bytes.

    ``payload``: the ONNX graph (``onnx``), the MLflow model directory's files (``pyfunc``) or the
    version folder's files (``triton``), as :func:`payload_files` places them.

    Raises:
        ServingError: ``info`` names another version, or a runner template is unreadable.
        ContractError: the payload does not fit how the spec is served (:func:`payload_files`).
    """
    if info.triton_version != version:
        raise ServingError(f"model-info says version {info.triton_version}, building {version}")
    served = served_spec(spec, server_backend, server_gpus)
    folder = f"{spec.name}/{version}"
    files = {f"{spec.name}/config.pbtxt": config_pbtxt(served).encode()}
    files.update({f"{folder}/{path}": data for path, data in payload_files(spec, payload).items()})
    files[f"{folder}/{MODEL_INFO_FILE}"] = info.to_json()
    files[f"{folder}/{SPEC_FILE}"] = spec_bytes(spec)
    how = served_as(spec)
    runner = PYFUNC_TEMPLATE if how == "pyfunc" else RUNNER_TEMPLATE if served.triton_backend == "python" else None
    if how != "triton" and runner is not None:
        try:
            files[f"{folder}/{RUNNER_FILE}"] = (templates_dir / runner).read_bytes()
        except OSError as exc:
            raise ServingError(f"{templates_dir / runner} unreadable: {exc}") from exc
    return files
