"""The Open Inference Protocol v2 at the gateway: requests checked against the model's spec, answers (pure).

``POST /v2/models/{model}/infer`` takes the protocol's JSON tensors and its binary tensor extension
(the JSON header, then the raw tensors, ``Inference-Header-Content-Length`` giving the header's length;
``tritonclient.http`` sends tensors this way by default). Every input of the spec must be given once,
with the spec's datatype and shape (a variable dimension any size, the batch at most the model's
``max_batch_size`` and ``request.max_items``), data of that many values of that type, and, for a model
whose features form its one input matrix, values inside the features' ranges and no NaN where a
feature is required. A refusal is a :class:`~modelops.gateway.protocol.forms.BadInput` whose message names the
input and the rule; the gateway answers it as the protocol does, ``{"error": "<message>"}``.

Answers carry the outputs (JSON data, or binary where the request asked for it with the
``binary_data`` output parameter or ``binary_data_output``) and the platform's fields as response
``parameters``: ``request_id``, ``model_id``, ``variant`` and ``feedback_token``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.protocol.forms import EdgeModel, Inputs, feature_violation, refuse
from modelops.gateway.triton.inference import NUMPY_DATATYPES
from modelops.modelspec.spec import ModelSpec, Tensor

_KINDS = {"FP32": "fiu", "FP64": "fiu", "INT32": "iu", "INT64": "iu", "BOOL": "b"}
"""The numpy kinds of JSON data accepted per datatype (integers are fine for a float tensor, not the reverse)."""


@dataclass(frozen=True)
class OipRequest:
    """A checked infer request: the tensors for Triton, the outputs asked for, the routing value."""

    id: str | None
    inputs: Inputs
    outputs: tuple[tuple[str, bool], ...]  # (name, binary)
    rows: int
    key_value: str | None


def _input_array(t: Tensor, given: Mapping[str, Any], binary: memoryview, offset: int, model: EdgeModel,
                 where: str) -> tuple[npt.NDArray[Any], int]:
    datatype = given.get("datatype")
    if datatype != t.dtype:
        raise refuse(where, f"datatype {t.dtype}", f"{where}: datatype {datatype!r}, the model takes {t.dtype}")
    shape = given.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise refuse(where, "shape", f"{where}: shape must be a list of non-negative integers "
                     f"(example: {[2 if d == -1 else d for d in t.shape]})", shape)
    if len(shape) != len(t.shape) or any(w != -1 and w != d for w, d in zip(t.shape, shape, strict=True)):
        raise refuse(where, f"shape {list(t.shape)}", f"{where}: shape {shape}, the model takes {list(t.shape)} "
                     "(-1: any size)", shape)
    if model.batched and shape and shape[0] > model.max_rows:
        raise refuse(where, f"max_batch_size {model.max_rows}", f"{where}: a batch of {shape[0]}, more than the "
                     f"{model.max_rows} this model takes per request; split the request", shape)
    dtype = NUMPY_DATATYPES.get(t.dtype)
    if dtype is None:
        raise refuse(where, f"datatype {t.dtype}", f"{where}: {t.dtype} tensors are not carried by the gateway yet")
    count = int(np.prod(shape))
    size = (given.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size != count * dtype.itemsize or offset + size > len(binary):
            raise refuse(where, "binary_data_size", f"{where}: binary_data_size {size!r} for {count} {t.dtype} "
                         f"values must be {count * dtype.itemsize} bytes within the body")
        return np.frombuffer(binary, dtype=dtype, count=count, offset=offset).reshape(shape), offset + size
    try:
        data = np.asarray(given.get("data"))
    except ValueError as exc:
        raise refuse(f"{where}.data", "rectangular array", f"{where}.data: ragged ({exc})") from exc
    if data.size != count:
        raise refuse(f"{where}.data", f"{count} values", f"{where}.data: {data.size} values for shape {shape}")
    if data.size and data.dtype.kind not in _KINDS[t.dtype]:
        raise refuse(f"{where}.data", f"type {t.dtype}", f"{where}.data: values of kind {data.dtype.name}, the "
                     f"model takes {t.dtype} (example: {'true' if t.dtype == 'BOOL' else '1'})")
    try:
        with np.errstate(over="raise"):
            return data.astype(dtype).reshape(shape), offset
    except (OverflowError, FloatingPointError) as exc:
        raise refuse(f"{where}.data", f"range of {t.dtype}", f"{where}.data: a value outside the range of "
                     f"{t.dtype} ({exc})") from exc


def parse_infer(model: EdgeModel, document: Any, binary: bytes = b"") -> OipRequest:
    """Check an infer request against ``model``'s spec (see the module docstring).

    Raises:
        BadInput: the first broken rule, naming the input.
    """
    spec = model.spec
    if not isinstance(document, Mapping) or not isinstance(document.get("inputs"), list):
        raise refuse("inputs", "required", 'the body must be an object with "inputs": a list of tensors '
                     f'(example: {{"inputs": [{_example(spec.inputs[0])}]}})')
    given: dict[str, Mapping[str, Any]] = {}
    for i, item in enumerate(document["inputs"]):
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            raise refuse(f"inputs[{i}].name", "required", f"inputs[{i}]: every input needs a name")
        if name in given:
            raise refuse(f"inputs[{i}] ({name})", "unique", f"input {name} is given twice")
        given[name] = item
    declared = [t.name for t in spec.inputs]
    extra = [n for n in given if n not in declared]
    if extra:
        raise refuse(f"inputs ({extra[0]})", "declared inputs", f"input {extra[0]!r} is not one of the model's "
                     f"inputs {declared}")
    view, offset, arrays = memoryview(binary), 0, []
    for t in spec.inputs:
        if t.name not in given:
            raise refuse(f"inputs ({t.name})", "required", f"input {t.name!r} is missing (example: "
                         f"{_example(t)})")
        array, offset = _input_array(t, given[t.name], view, offset, model, f"input {t.name}")
        arrays.append((t.name, array))
    batches = {name: a.shape[0] for name, a in arrays if model.batched and a.ndim}
    if len(set(batches.values())) > 1:
        raise refuse("inputs", "one batch size", f"the inputs have different batch sizes {batches}")
    problem = feature_violation(model, arrays, f"input {spec.inputs[0].name}")
    if problem is not None:
        raise problem
    outputs = _outputs(spec, document)
    rows = int(arrays[0][1].shape[0]) if arrays[0][1].ndim else 1
    key_value = _key_value(spec, arrays)
    request_id = document.get("id")
    return OipRequest(request_id if isinstance(request_id, str) else None, tuple(arrays), outputs, rows,
                      key_value)


def _key_value(spec: ModelSpec, arrays: Sequence[tuple[str, npt.NDArray[Any]]]) -> str | None:
    """The routing key's value in the first row: an input tensor of that name, or that column of the features."""
    names = [f.name for f in spec.features]
    keyed = dict(arrays).get(spec.routing_key or "")
    if keyed is None and spec.routing_key in names and len(arrays) == 1 and arrays[0][1].ndim == 2:
        keyed = arrays[0][1][:, names.index(spec.routing_key)]
    return str(keyed.reshape(-1)[0].item()) if keyed is not None and keyed.size else None


def _outputs(spec: ModelSpec, document: Mapping[str, Any]) -> tuple[tuple[str, bool], ...]:
    parameters = document.get("parameters") or {}
    binary_all = bool(parameters.get("binary_data_output", False)) if isinstance(parameters, Mapping) else False
    asked = document.get("outputs")
    declared = [t.name for t in spec.outputs]
    if asked is None:
        return tuple((n, binary_all) for n in declared)
    if not isinstance(asked, list) or not asked:
        raise refuse("outputs", "list", 'outputs must be a non-empty list (example: [{"name": "' + declared[0] + '"}])')
    out = []
    for i, item in enumerate(asked):
        name = item.get("name") if isinstance(item, Mapping) else None
        if name not in declared:
            raise refuse(f"outputs[{i}]", "declared outputs", f"output {name!r} is not one of the model's "
                         f"outputs {declared}")
        flag = (item.get("parameters") or {}).get("binary_data", binary_all)
        out.append((str(name), bool(flag)))
    return tuple(out)


def _example(t: Tensor) -> str:
    shape = [1 if d == -1 else d for d in t.shape]
    return json.dumps({"name": t.name, "datatype": t.dtype, "shape": shape, "data": [0] * int(np.prod(shape))})


def infer_answer(model_name: str, version: int, request: OipRequest, outputs: Mapping[str, npt.NDArray[Any]],
                 parameters: Mapping[str, Any]) -> tuple[bytes, int | None]:
    """The answer body and, when some output is binary, the length of its JSON header."""
    described: list[dict[str, Any]] = []
    tail: list[bytes] = []
    for name, binary in request.outputs:
        array = np.ascontiguousarray(outputs[name])
        item: dict[str, Any] = {"name": name, "datatype": _datatype(array), "shape": list(array.shape)}
        if binary:
            item["parameters"] = {"binary_data_size": array.nbytes}
            tail.append(array.tobytes())
        else:
            item["data"] = array.reshape(-1).tolist()
        described.append(item)
    document: dict[str, Any] = {"model_name": model_name, "model_version": str(version)}
    if request.id is not None:
        document["id"] = request.id
    document["parameters"] = dict(parameters)
    document["outputs"] = described
    header = json.dumps(document, separators=(",", ":")).encode()
    if not tail:
        return header, None
    return b"".join((header, *tail)), len(header)


def _datatype(array: npt.NDArray[Any]) -> str:
    for name, dtype in NUMPY_DATATYPES.items():
        if array.dtype == dtype:
            return name
    raise ValueError(f"no Open Inference Protocol datatype for {array.dtype}")


def model_metadata(spec: ModelSpec, versions: list[int]) -> dict[str, Any]:
    """``GET /v2/models/{model}``: name, the routed versions, platform, inputs and outputs."""
    def tensors(items: tuple[Tensor, ...]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.dtype, "shape": list(t.shape)} for t in items]

    return {"name": spec.name, "versions": [str(v) for v in versions], "platform": spec.triton_backend,
            "inputs": tensors(spec.inputs), "outputs": tensors(spec.outputs)}
