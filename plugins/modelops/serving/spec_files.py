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
the stored ``model-spec.json`` keeps the user's declaration.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from modelops.errors import ServingError
from modelops.modelspec.render import config_pbtxt
from modelops.modelspec.spec import ModelSpec
from modelops.serving.modelinfo import MODEL_INFO_FILE, ModelInfo, bundle_sha256
from modelops.serving.pbtxt import TEMPLATES_DIR

SPEC_FILE = "model-spec.json"
GRAPH_FILE = "model.onnx"
RUNNER_TEMPLATE = "spec_model.py"


def served_spec(spec: ModelSpec, server_backend: str) -> ModelSpec:
    """The spec as this server runs it: ``onnxruntime`` becomes ``python`` where the server has no onnxruntime."""
    if spec.triton_backend == "onnxruntime" and server_backend == "python":
        return msgspec.structs.replace(spec, backend="python")
    return spec


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
                       templates_dir: Path = TEMPLATES_DIR) -> dict[str, bytes]:
    """Every file of version ``version`` of ``spec``'s model, repository-relative path → bytes.

    Raises:
        ServingError: ``info`` names another version, or the runner template is unreadable.
    """
    if info.triton_version != version:
        raise ServingError(f"model-info says version {info.triton_version}, building {version}")
    served = served_spec(spec, server_backend)
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
