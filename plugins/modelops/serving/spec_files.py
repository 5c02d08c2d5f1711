"""The files of one Triton version of a model published from its model spec (pure: bytes in, path → bytes out).

Layout (paths relative to the repository root, N the integer version)::

    NAME/config.pbtxt            rendered from the spec (modelops.modelspec.render.config_pbtxt)
    NAME/N/model.onnx            the served graph (converted from sklearn, or the user's own)
    NAME/N/model.py              only when the server runs ONNX through the python backend
    NAME/N/model-info.json       provenance (modelops.serving.modelinfo)
    NAME/N/model-spec.json       the spec itself (schema_version 1), the single source of the model's
                                 contract, Triton config, features and outcomes

One Triton model per version, not the reference recommender's three-step pipeline
(:mod:`modelops.serving.builder`). The identity of a version (:func:`version_sha256`) covers the
graph and the spec, so the same graph with another declared contract or tuning is a new version.

*Served* spec: a spec whose flavor Triton runs with ``onnxruntime`` is rendered with the ``python``
backend on a server that has none (``MODELOPS_TRITON_BACKEND=python``: the embedded stack's
Triton carries only the python backend), running ``model_repository/templates/spec_model.py``;
the stored ``model-spec.json`` keeps the user's declaration. Its ``instance_group`` ``kind: auto`` is
served as ``gpu`` on servers with GPUs (``MODELOPS_TRITON_GPUS`` > 0) and as ``cpu`` elsewhere, so the
config Triton reports after loading is the one rendered; :func:`require_placement` refuses, before
anything is uploaded, a spec the servers cannot place (``kind: gpu`` without a GPU, a device id they
do not have).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from modelops.errors import ContractError, ServingError
from modelops.modelspec.render import config_pbtxt
from modelops.modelspec.spec import ModelSpec
from modelops.serving.modelinfo import MODEL_INFO_FILE, ModelInfo, bundle_sha256
from modelops.serving.pbtxt import TEMPLATES_DIR

SPEC_FILE = "model-spec.json"
GRAPH_FILE = "model.onnx"
RUNNER_TEMPLATE = "spec_model.py"


def served_spec(spec: ModelSpec, server_backend: str, server_gpus: int = 0) -> ModelSpec:
    """The spec as this server runs it.

    ``onnxruntime`` becomes ``python`` where the server has no onnxruntime; ``kind: auto`` becomes
    ``gpu`` where the server has GPUs (``server_gpus`` > 0), ``cpu`` otherwise.
    """
    served = spec
    if spec.triton_backend == "onnxruntime" and server_backend == "python":
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
    """``model-spec.json``: the spec as indented JSON in field order (stable bytes for the version identity)."""
    return msgspec.json.format(msgspec.json.encode(spec), indent=2) + b"\n"


def version_sha256(graph: bytes, spec: ModelSpec) -> str:
    """The identity of a spec-published version: sha256 over the graph and the spec (not its ``source``).

    ``source`` (the model URI, the run) says where the bytes came from, not what is served, so
    publishing the same model from another run gives the same integer version.
    """
    declared = msgspec.structs.replace(spec, source=type(spec.source)())
    return bundle_sha256({GRAPH_FILE: graph, SPEC_FILE: spec_bytes(declared)})


def spec_release_files(spec: ModelSpec, version: int, graph: bytes, info: ModelInfo, *, server_backend: str,
                       server_gpus: int = 0, templates_dir: Path = TEMPLATES_DIR) -> dict[str, bytes]:
    """Every file of version ``version`` of ``spec``'s model, repository-relative path → bytes.

    Raises:
        ServingError: ``info`` names another version, or the runner template is unreadable.
    """
    if info.triton_version != version:
        raise ServingError(f"model-info says version {info.triton_version}, building {version}")
    served = served_spec(spec, server_backend, server_gpus)
    folder = f"{spec.name}/{version}"
    files = {
        f"{spec.name}/config.pbtxt": config_pbtxt(served).encode(),
        f"{folder}/{GRAPH_FILE}": graph,
        f"{folder}/{MODEL_INFO_FILE}": info.to_json(),
        f"{folder}/{SPEC_FILE}": spec_bytes(spec),
    }
    if served.triton_backend == "python":
        try:
            files[f"{folder}/model.py"] = (templates_dir / RUNNER_TEMPLATE).read_bytes()
        except OSError as exc:
            raise ServingError(f"{templates_dir / RUNNER_TEMPLATE} unreadable: {exc}") from exc
    return files
