"""The ``triton`` flavor: a Triton model directory the user logged, published with the platform's spec record.

The flavor is the mlflow-triton-plugin's (``triton-inference-server/server``,
``deploy/mlflow-triton-plugin``): ``mlflow_triton.log_model(triton_model_path, ...)`` copies the
Triton model directory into the MLflow model and writes ``flavors: {triton: {data: <its folder
name>}}`` in ``MLmodel``; the folder holds ``config.pbtxt`` and numbered version folders. Here it holds
``config.pbtxt`` and exactly one version folder (the platform numbers versions itself, from the
sha256); any other file beside ``config.pbtxt`` is refused (Triton's model folder is shared by every
version the platform serves).

**The spec from the config**: ``config.pbtxt`` is parsed with Triton's own schema
(``model_config.proto``'s generated ``model_config_pb2`` that ``tritonclient`` ships, read with
``google.protobuf.text_format``: a real parser, so any valid config reads and a malformed one is refused
with protobuf's line and column). :func:`spec_fields` takes the backend (or a ``platform`` with a known
backend), ``max_batch_size``, inputs and outputs (name, data type, dims; the batch dimension ``-1``
added in front when ``max_batch_size`` > 0), ``dynamic_batching`` (no ``preferred_batch_size``: Triton's
own ``[max_batch_size]``), the one ``instance_group`` (none:
``kind: auto``) and the ``parameters``. A field the spec does not carry (``sequence_batching``,
``ensemble_scheduling``, ``reshape``, ``optional``, ``label_filename``, ``model_warmup``, several
instance groups, ...) is refused naming it: the served config is rendered from the spec, and a field
silently dropped would serve another model. ``name`` and ``version_policy`` are the platform's. The
spec's ``modelops.yaml`` and tags override these values as for every flavor.

**Verified** (:mod:`modelops.serving.spec_publish`): there is no framework to ask, so

* with expected outputs logged beside the sample (an ``eval/*.npz`` holding every input and every
  output tensor by name) Triton's answers must equal them within the platform's tolerance on every
  server (``verified_by: logged_outputs``);
* without, the version must answer the sample in the spec's shapes and dtypes, with finite floats,
  the same on a second call and on every server as on the first (``verified_by: consistency``): it loads
  and is deterministic everywhere, which is all that can be said of a model nobody else can run.

A ``python``-backend model's ``requirements.txt``, when it has one, is checked like a pyfunc model's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelops.errors import ContractError, ServingError
from modelops.modelspec.derive import derive_spec
from modelops.modelspec.spec import DTYPES, ModelSpec
from modelops.serving.model_requirements import require_environment
from modelops.serving.prepared import PreparedModel, input_tensors
from modelops.serving.spec_files import RESERVED_FILES

CONFIG_FILE = "config.pbtxt"
PLATFORMS = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "tensorrt_plan": "tensorrt",
             "tensorflow_savedmodel": "tensorflow", "tensorflow_graphdef": "tensorflow"}
"""Triton ``platform`` names → their backend."""
KINDS = {"KIND_CPU": "cpu", "KIND_GPU": "gpu", "KIND_AUTO": "auto"}
_TOP = frozenset({"name", "backend", "platform", "max_batch_size", "input", "output", "dynamic_batching",
                  "instance_group", "parameters", "version_policy"})
_TENSOR = frozenset({"name", "data_type", "dims"})
_BATCHER = frozenset({"preferred_batch_size", "max_queue_delay_microseconds"})
_GROUP = frozenset({"name", "kind", "count", "gpus"})


def parse_config(text: str, where: str = CONFIG_FILE) -> Any:
    """``config.pbtxt`` text as Triton's ``inference.ModelConfig`` message.

    Raises:
        ContractError: not a valid Triton model config (protobuf's message: line, column, field).
        ServingError: tritonclient's generated schema is not importable here.
    """
    from google.protobuf import text_format

    try:
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError) as exc:  # tritonclient raises RuntimeError without grpcio
        raise ServingError(f"cannot read {where}: Triton's config schema (tritonclient.grpc.model_config_pb2) is "
                           f"not importable ({exc}); install tritonclient[grpc]") from exc
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise ContractError(f"{where}: not a Triton model config: {exc}") from exc


def _unsupported(message: Any, allowed: frozenset[str], where: str) -> list[str]:
    return [f"{where}{fd.name}" for fd, _ in message.ListFields() if fd.name not in allowed]


def _tensor(message: Any, batched: bool, kind: str) -> dict[str, Any]:
    from tritonclient.grpc import model_config_pb2

    type_name = model_config_pb2.DataType.Name(message.data_type)
    dtype = "BYTES" if type_name == "TYPE_STRING" else type_name.removeprefix("TYPE_")
    if dtype not in DTYPES:
        supported = ["TYPE_STRING" if d == "BYTES" else f"TYPE_{d}" for d in DTYPES]
        raise ContractError(f"{CONFIG_FILE}: {kind} {message.name}: data_type {type_name} is not carried by the "
                            f"model spec; supported: {supported}")
    dims = [int(d) for d in message.dims]
    return {"name": message.name, "dtype": dtype, "shape": [-1, *dims] if batched else dims}


def spec_fields(config: Any) -> dict[str, Any]:
    """The spec fields a parsed config states: backend, parameters, inputs, outputs, tuning (see the docstring).

    Raises:
        ContractError: a field the spec does not carry (named), a data type it does not carry, no backend.
    """
    unsupported = _unsupported(config, _TOP, "")
    for kind in ("input", "output"):
        for t in getattr(config, kind):
            unsupported += _unsupported(t, _TENSOR, f"{kind} {t.name}: ")
    if config.HasField("dynamic_batching"):
        unsupported += _unsupported(config.dynamic_batching, _BATCHER, "dynamic_batching.")
    for g in config.instance_group:
        unsupported += _unsupported(g, _GROUP, "instance_group.")
    if len(config.instance_group) > 1:
        unsupported.append(f"instance_group (the spec carries one group; the config has {len(config.instance_group)})")
    if unsupported:
        raise ContractError(f"{CONFIG_FILE}: {unsupported} not carried by the model spec, which renders the served "
                            f"config; supported fields: {sorted(_TOP)}, tensors {sorted(_TENSOR)}, dynamic_batching "
                            f"{sorted(_BATCHER)}, one instance_group {sorted(_GROUP - {'name'})}")
    backend = config.backend or PLATFORMS.get(config.platform, "")
    if not backend:
        raise ContractError(f"{CONFIG_FILE}: no backend (platform {config.platform!r}); name it "
                            '(example: backend: "python")')
    batched = config.max_batch_size > 0
    tuning: dict[str, Any] = {"max_batch_size": int(config.max_batch_size), "dynamic_batching": None,
                              "instance_group": {"kind": "auto", "count": 1, "gpus": []}}
    if config.HasField("dynamic_batching"):
        b = config.dynamic_batching
        # none declared: Triton serves (and reports) [max_batch_size]; the spec says what Triton does
        preferred = [int(s) for s in b.preferred_batch_size] or [int(config.max_batch_size)]
        tuning["dynamic_batching"] = {"max_queue_delay_us": int(b.max_queue_delay_microseconds),
                                      "preferred_batch_size": preferred}
    if config.instance_group:
        from tritonclient.grpc import model_config_pb2

        g = config.instance_group[0]
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)
        if kind not in KINDS:
            raise ContractError(f"{CONFIG_FILE}: instance_group kind {kind}: the spec carries {sorted(KINDS)}")
        tuning["instance_group"] = {"kind": KINDS[kind], "count": int(g.count) or 1, "gpus": [int(d) for d in g.gpus]}
    return {
        "backend": backend,
        "parameters": {key: value.string_value for key, value in config.parameters.items()},
        "inputs": [_tensor(t, batched, "input") for t in config.input],
        "outputs": [_tensor(t, batched, "output") for t in config.output],
        "tuning": tuning,
    }


def triton_folder(model_dir: Path, flavor: Mapping[str, Any]) -> tuple[Path, Path]:
    """(the Triton model folder, its one version folder) of a triton-flavor MLflow model.

    Raises:
        ContractError: no such folder, no ``config.pbtxt``, no or several version folders, other files.
    """
    data = str(flavor.get("data", "")) if isinstance(flavor, Mapping) else ""
    folder = model_dir / data
    hint = "(example: mymodel/config.pbtxt and mymodel/1/model.py, logged with mlflow_triton.log_model)"
    if not data or not folder.is_dir() or not (folder / CONFIG_FILE).is_file():
        raise ContractError(f"{model_dir}: the triton flavor's data {data!r} is not a Triton model folder with "
                            f"{CONFIG_FILE} {hint}")
    versions = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    others = sorted(p.name for p in folder.iterdir() if p.name != CONFIG_FILE and p.name not in versions)
    if len(versions) != 1 or others:
        raise ContractError(f"{folder.name}/: a triton-flavor model holds {CONFIG_FILE} and exactly one numbered "
                            f"version folder (the platform numbers versions); found versions {versions}, other "
                            f"entries {others} {hint}")
    return folder, folder / versions[0]


def version_files(version_dir: Path) -> dict[str, bytes]:
    """The version folder's files by relative POSIX path; names the platform writes are refused."""
    files = {p.relative_to(version_dir).as_posix(): p.read_bytes()
             for p in sorted(version_dir.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    if not files:
        raise ContractError(f"{version_dir}: the version folder is empty")
    clashes = sorted(set(files) & RESERVED_FILES)
    if clashes:
        raise ContractError(f"{version_dir}: holds {clashes}, names the platform writes; rename them")
    return files


def triton_spec(model_dir: Path, name: str, flavors: Mapping[str, Any], *,
                overrides: Mapping[str, Any] | None) -> ModelSpec:
    """The spec of the triton-flavor model in ``model_dir``: derived from its ``config.pbtxt``, then the overrides."""
    folder, _version_dir = triton_folder(model_dir, flavors["triton"])
    config = parse_config((folder / CONFIG_FILE).read_text(), f"{folder.name}/{CONFIG_FILE}")
    return derive_spec(model_dir, name, overrides, derived=spec_fields(config))


def prepare_triton(model_dir: Path, name: str, flavors: Mapping[str, Any], *, overrides: Mapping[str, Any] | None,
                   raw: Any, source: str) -> PreparedModel:
    """The triton-flavor model in ``model_dir``: spec from its config, payload, sample and logged outputs."""
    spec = triton_spec(model_dir, name, flavors, overrides=overrides)
    _folder, version_dir = triton_folder(model_dir, flavors["triton"])
    files = version_files(version_dir)
    if spec.triton_backend == "python":
        if "model.py" not in files:
            raise ContractError(f"model {name}: backend python needs model.py in the version folder "
                                f"{version_dir.name}/ (it has {sorted(files)[:10]})")
        require_environment(model_dir, f"model {name} (triton, python backend)", flavors)
    if spec.features and not (len(spec.inputs) == 1 and spec.inputs[0].shape[-1] == len(spec.features)) \
            and len(spec.inputs) != len(spec.features):
        raise ContractError(f"model {name}: {len(spec.features)} features do not map onto the config's inputs "
                            f"{[t.name for t in spec.inputs]} (one [-1, n] input or one [-1, 1] input per column)")
    sample = input_tensors(spec.inputs, _inputs_only(raw, spec.outputs), source)
    rows = int(next(iter(sample.values())).shape[0])
    expected, verified_by = {}, "consistency"
    if isinstance(raw, Mapping):
        logged = [t.name for t in spec.outputs if t.name in raw]
        if logged and len(logged) != len(spec.outputs):
            raise ContractError(f"model {name}: the evaluation data ({source}) holds outputs {logged} but not "
                                f"{[t.name for t in spec.outputs if t.name not in raw]}; log all or none")
        if logged:
            expected = {t.name: input_tensors((t,), raw[t.name], source)[t.name] for t in spec.outputs}
            verified_by = "logged_outputs"
    notes = () if expected else (f"no expected outputs logged with the sample ({source}): verified by consistency "
                                 "(same answers on a second call and on every server)",)
    return PreparedModel(spec, b"", sample, expected, None, rows, source, notes, files, verified_by)


def _inputs_only(raw: Any, outputs: Any) -> Any:
    if isinstance(raw, Mapping):
        return {k: v for k, v in raw.items() if k not in {t.name for t in outputs}}
    return raw
