"""Request forms of a model served from its spec: MLflow's scoring bodies in, tensors out (pure).

An :class:`EdgeModel` is one routed version's spec compiled for the edge: the request contract
rendered from the spec (:func:`modelops.modelspec.render.edge_contract`, JSON Schema 2020-12, checked
by jsonschema-rs through :func:`modelops.gateway.protocol.contract.compile_schema`) and what it takes to turn a
body that kept it into Triton's input tensors.

The *tabular* form takes exactly the bodies of MLflow's scoring server
(``mlflow.pyfunc.scoring_server``): ``dataframe_split`` (``columns`` + ``data`` rows),
``dataframe_records`` and ``instances`` (rows as objects), ``inputs`` (rows as objects, an object of
columns, or tensors for a model without columns). Columns become the model's input tensors in the
spec's order: one ``[n, k]`` matrix when the spec has one input of all ``k`` features, else one
``[n, 1]`` tensor per column. A null in a column that may be null is NaN (a float column only).
Answers are MLflow's: ``{"predictions": ...}``, one output as its rows (a ``[n, 1]`` output as a flat
list), several as an object of outputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.protocol.contract import Check, Violation, compile_schema
from modelops.gateway.triton.inference import NUMPY_DATATYPES
from modelops.modelspec.render import edge_contract
from modelops.modelspec.scores import row_scores
from modelops.modelspec.spec import ModelSpec, Tensor

Inputs = tuple[tuple[str, npt.NDArray[Any]], ...]


class BadInput(Exception):
    """A body that kept the JSON contract but cannot become the model's tensors (named, with the rule)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation


def refuse(field: str, rule: str, message: str, value: Any = None) -> BadInput:
    return BadInput(Violation(field, rule, value, message))


@dataclass(frozen=True)
class EdgeModel:
    """One routed version's spec, compiled for the edge."""

    spec: ModelSpec
    schema: Mapping[str, Any] = field(repr=False)
    check: Check = field(repr=False)
    bounds: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]] | None = \
        field(default=None, repr=False)
    """Per column of a feature matrix input: minimum, maximum (±inf when not declared), required."""

    @property
    def tabular(self) -> bool:
        return self.spec.request.form == "tabular"

    @property
    def batched(self) -> bool:
        return self.spec.tuning.max_batch_size > 0

    @property
    def max_rows(self) -> int:
        """Rows per request: the spec's ``request.max_items``, and Triton's ``max_batch_size`` when batched."""
        n = self.spec.request.max_items
        return min(n, self.spec.tuning.max_batch_size) if self.batched else n

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.spec.outputs)


def edge_model(spec: ModelSpec) -> EdgeModel:
    """Compile ``spec``'s request contract (once per routed version)."""
    schema = edge_contract(spec)
    bounds = None
    if len(spec.inputs) == 1 and spec.features and spec.inputs[0].shape[-1] == len(spec.features):
        bounds = (np.array([-np.inf if f.min is None else f.min for f in spec.features]),
                  np.array([np.inf if f.max is None else f.max for f in spec.features]),
                  np.array([f.required for f in spec.features]))
    return EdgeModel(spec, schema, compile_schema(schema), bounds)


def _dtype(tensor: Tensor) -> np.dtype[Any]:
    dtype = NUMPY_DATATYPES.get(tensor.dtype)
    if dtype is None:
        raise refuse(tensor.name, f"dtype {tensor.dtype}", f"input {tensor.name} is {tensor.dtype}, which the "
                     f"gateway does not carry yet (one of {sorted(NUMPY_DATATYPES)})")
    return dtype


def _rows(model: EdgeModel, key: str, body: Any) -> list[list[Any]]:
    """The body's rows as lists in the spec's column order."""
    names = [f.name for f in model.spec.features]
    if key == "dataframe_split":
        return list(body["data"])
    if isinstance(body, Mapping):  # ``inputs`` as an object of columns
        lengths = {name: len(body[name]) for name in names if name in body}
        if len(set(lengths.values())) > 1:
            raise refuse(f"{key}", "equal column lengths", f"{key}: columns of different lengths {lengths} "
                         f"(example: {{\"{names[0]}\": [1.0, 2.0], ...}} with every column as long)")
        n = next(iter(lengths.values()))
        return [[body[name][i] if name in body else None for name in names] for i in range(n)]
    return [[record.get(name) for name in names] for record in body]


def _column_inputs(model: EdgeModel, key: str, body: Any) -> tuple[Inputs, list[list[Any]]]:
    spec = model.spec
    rows = _rows(model, key, body)
    if len(spec.inputs) == 1 and spec.inputs[0].shape[-1] == len(spec.features):
        tensor = spec.inputs[0]
        dtype = _dtype(tensor)
        if any(v is None for row in rows for v in row):
            if dtype.kind != "f":
                name = next(f.name for i, f in enumerate(spec.features) if any(r[i] is None for r in rows))
                raise refuse(f"{key}.{name}", "not null", f"{key}.{name}: null cannot be sent to the "
                             f"{tensor.dtype} input {tensor.name} (example: 0)")
            rows = [[math.nan if v is None else v for v in row] for row in rows]
        return ((tensor.name, _array(rows, dtype, key)),), rows
    inputs: list[tuple[str, npt.NDArray[Any]]] = []
    for i, (feature, tensor) in enumerate(zip(spec.features, spec.inputs, strict=False)):
        dtype = _dtype(tensor)
        column: list[Any] = [row[i] for row in rows]
        if any(v is None for v in column):
            if dtype.kind != "f":
                raise refuse(f"{key}.{feature.name}", "not null", f"{key}.{feature.name}: null cannot be sent "
                             f"to the {tensor.dtype} input {tensor.name} (example: 0)")
            column = [math.nan if v is None else v for v in column]
        inputs.append((tensor.name, _array(column, dtype, f"{key}.{feature.name}").reshape(-1, 1)))
    return tuple(inputs), rows


def _array(values: Any, dtype: np.dtype[Any], where: str) -> npt.NDArray[Any]:
    """``values`` as ``dtype``; a number the dtype cannot hold is refused, never wrapped or made infinite."""
    try:
        with np.errstate(over="raise"):
            return np.asarray(values, dtype=dtype)
    except (OverflowError, FloatingPointError) as exc:
        info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype) if dtype.kind == "f" else None
        bounds = f" [{info.min}, {info.max}]" if info is not None else ""
        raise refuse(where, f"range of {dtype.name}", f"{where}: a value outside the range of {dtype.name}"
                     f"{bounds} ({exc})") from exc


def _tensor(tensor: Tensor, value: Any, where: str) -> npt.NDArray[Any]:
    try:
        array = _array(value, _dtype(tensor), where)
    except (ValueError, TypeError) as exc:
        raise refuse(where, "rectangular array", f"{where}: not a rectangular array of {tensor.dtype} "
                     f"({exc}; example shape {list(tensor.shape)})") from exc
    return array


def _tensor_inputs(model: EdgeModel, key: str, body: Any) -> Inputs:
    spec = model.spec
    only = spec.inputs[0] if len(spec.inputs) == 1 else None
    if key == "inputs":
        named = body if isinstance(body, Mapping) else {only.name: body} if only is not None else body
        arrays = [(t.name, _tensor(t, named[t.name], f"inputs.{t.name}")) for t in spec.inputs]
    else:  # instances: one row (an object of tensors, or the one tensor's row) per item
        arrays = []
        for t in spec.inputs:
            rows = [r[t.name] if isinstance(r, Mapping) else r for r in body]
            arrays.append((t.name, _tensor(t, rows, f"instances[*].{t.name}")))
    batch = {name: a.shape[0] for name, a in arrays if a.ndim}
    if len(set(batch.values())) > 1:
        raise refuse(key, "one batch size", f"{key}: the inputs have different first dimensions {batch} "
                     "(every input needs one row per instance)")
    return tuple(arrays)


def tabular_inputs(model: EdgeModel, document: Mapping[str, Any]) -> tuple[Inputs, int, str | None]:
    """Triton's inputs for a body that kept ``model``'s contract, the number of rows, the routing value.

    Raises:
        BadInput: columns of different lengths, a null for an integer input, a ragged tensor.
    """
    ((key, body),) = document.items()  # the contract allows exactly one key
    spec = model.spec
    if spec.features:
        inputs, rows = _column_inputs(model, key, body)
        names = [f.name for f in spec.features]
        key_value = rows[0][names.index(spec.routing_key)] if spec.routing_key in names and rows else None
    else:
        inputs = _tensor_inputs(model, key, body)
        routed = dict(inputs).get(spec.routing_key or "")
        key_value = routed.reshape(-1)[0].item() if routed is not None and routed.size else None
    n = int(inputs[0][1].shape[0]) if inputs[0][1].ndim else 1
    if n > model.max_rows:
        raise refuse(key, f"maxItems {model.max_rows}", f"{key}: {n} rows, more than the {model.max_rows} this "
                     f"model takes per request (max_items / max_batch_size); split the request")
    return inputs, n, None if key_value is None else str(key_value)


def _values(array: npt.NDArray[Any]) -> Any:
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    return array.tolist()


def predictions(outputs: Mapping[str, npt.NDArray[Any]]) -> Any:
    """MLflow's ``predictions``: one output as its rows, several as an object of outputs."""
    if len(outputs) == 1:
        return _values(next(iter(outputs.values())))
    return {name: _values(array) for name, array in outputs.items()}


def summary(outputs: Mapping[str, npt.NDArray[Any]]) -> tuple[float, float, float, float, float]:
    """Count, sum, sum of squares, max and std of the first output's row scores (:func:`row_scores`)."""
    first = row_scores(next(iter(outputs.values())))
    finite = first[np.isfinite(first)]
    if not finite.size:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    n, total, squares = float(finite.size), float(finite.sum()), float(np.dot(finite, finite))
    mean = total / n
    return n, total, squares, float(finite.max()), math.sqrt(max(0.0, squares / n - mean * mean))


def sample_features(model: EdgeModel, inputs: Inputs) -> npt.NDArray[np.float64] | None:
    """The request's ``[n, k]`` feature values in the spec's column order (float64), or None for a tensor model."""
    spec = model.spec
    if not spec.features or not inputs:
        return None
    if len(inputs) == 1 and inputs[0][1].ndim == 2 and inputs[0][1].shape[1] == len(spec.features):
        return np.asarray(inputs[0][1], dtype=np.float64)
    if len(inputs) == len(spec.features) and all(a.ndim == 2 and a.shape[1] == 1 for _, a in inputs):
        return np.hstack([np.asarray(a, dtype=np.float64) for _, a in inputs])
    return None


def feature_violation(model: EdgeModel, inputs: Sequence[tuple[str, npt.NDArray[Any]]],
                      where: str) -> BadInput | None:
    """A range or NaN rule of the spec's features broken by a feature matrix (tensors sent as they are).

    One vectorised pass over the matrix (the bounds are compiled once per version in :func:`edge_model`);
    only a broken rule is looked at column by column, to name it.
    """
    bounds = model.bounds
    matrix = inputs[0][1] if inputs else None
    if bounds is None or matrix is None or matrix.ndim != 2 or matrix.dtype.kind != "f" \
            or matrix.shape[1] != len(bounds[0]):
        return None
    low, high, required = bounds
    nan = np.isnan(matrix)
    with np.errstate(invalid="ignore"):
        broken = (nan & required) | (matrix < low) | (matrix > high)
    if not broken.any():
        return None
    row, i = (int(v) for v in np.argwhere(broken)[0])
    f, value = model.spec.features[i], float(matrix[row, i])
    if nan[row, i]:
        return refuse(f"{where}[{row}, {i}] ({f.name})", "not NaN",
                      f"{f.name}: NaN in a column the model requires (example: 0.0)", "NaN")
    if f.min is not None and value < f.min:
        return refuse(f"{where}[{row}, {i}] ({f.name})", f"minimum {f.min}",
                      f"{f.name}: {value} is below the minimum {f.min}", value)
    return refuse(f"{where}[{row}, {i}] ({f.name})", f"maximum {f.max}",
                  f"{f.name}: {value} is above the maximum {f.max}", value)
