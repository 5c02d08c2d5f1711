"""scikit-learn → ONNX with ``skl2onnx``, and the parity check that must pass before the ONNX graph serves.

:func:`convert_sklearn` converts a fitted estimator or pipeline taking one numeric matrix (the
spec's ``input`` tensor, ``[-1, n]``); a classifier is converted with ``zipmap=False``, so its
probabilities are one tensor ``probabilities`` ``[-1, k]`` (beside ``label``), not a list of maps.
:func:`check_parity` runs the graph with onnxruntime on a sample and compares it with the
estimator's own answer:

* classifiers: ``predict_proba`` against ``probabilities``; passed when the maximum absolute
  difference is at most :data:`PROBABILITY_TOLERANCE` (1e-5);
* regressors: ``predict`` against the first output; passed when the maximum relative difference
  ``|onnx - sklearn| / max(|sklearn|, 1)`` is at most :data:`REGRESSION_TOLERANCE` (1e-4; below 1 in
  magnitude it is absolute, so values near zero do not blow it up).

:func:`spec_for_graph` puts the converted graph's own tensors into the spec (the signature said FP64
columns; a graph converted with ``dtype="FP32"`` takes FP32), so ``config.pbtxt`` describes the file
Triton loads. One-dimensional outputs (a classifier's ``label`` ``[N]``) are left out of the spec: the
served outputs are the ``[N, k]`` ones (``probabilities``).

A failed check is returned as a :class:`Parity` with ``passed=False`` and the differences; it is never
accepted silently: :func:`require_parity` raises :class:`~modelops.errors.ContractError` for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelops.errors import ContractError
from modelops.modelspec.spec import ModelSpec, Tensor

PROBABILITY_TOLERANCE = 1e-5
REGRESSION_TOLERANCE = 1e-4
INPUT_NAME = "input"
_NUMPY = {"FP32": np.float32, "FP64": np.float64}
_ONNX_DTYPES = {1: "FP32", 11: "FP64", 6: "INT32", 7: "INT64", 9: "BOOL", 8: "BYTES"}
"""ONNX ``TensorProto`` element types the spec carries."""


@dataclass(frozen=True)
class Parity:
    """The outcome of one parity check.

    Attributes:
        passed: the difference is within the tolerance.
        kind: ``probabilities`` (classifier) or ``prediction`` (regressor).
        max_abs_diff: the largest absolute difference over the sample.
        max_rel_diff: the largest ``|onnx - sklearn| / max(|sklearn|, 1)`` over the sample.
        tolerance: the bound applied (absolute for probabilities, relative for predictions).
        rows: rows in the sample.
    """

    passed: bool
    kind: str
    max_abs_diff: float
    max_rel_diff: float
    tolerance: float
    rows: int

    def describe(self) -> str:
        measured = self.max_abs_diff if self.kind == "probabilities" else self.max_rel_diff
        verdict = "passed" if self.passed else "FAILED"
        which = "absolute" if self.kind == "probabilities" else "relative"
        return (f"parity {verdict}: {self.kind} over {self.rows} rows, max {which} difference {measured:.3g} "
                f"(tolerance {self.tolerance:g})")


def is_classifier(model: Any) -> bool:
    """Whether ``model`` answers with class probabilities (``predict_proba``)."""
    from sklearn.base import is_classifier as sk_is_classifier

    try:
        return bool(sk_is_classifier(model)) and hasattr(model, "predict_proba")
    except AttributeError:  # not a scikit-learn estimator at all; conversion will say so
        return False


def convert_sklearn(model: Any, n_features: int, *, dtype: str = "FP32",
                    target_opset: int | dict[str, int] | None = None) -> bytes:
    """The serialized ONNX graph of the fitted ``model`` with one input ``input`` ``[-1, n_features]``.

    Raises:
        ContractError: skl2onnx cannot convert the model (named with skl2onnx's reason).
    """
    from skl2onnx import convert_sklearn as skl_convert
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    if dtype not in _NUMPY:
        raise ContractError(f"convert dtype={dtype!r}: must be one of {sorted(_NUMPY)} (example: FP32)")
    tensor_type = FloatTensorType if dtype == "FP32" else DoubleTensorType
    options = {id(model): {"zipmap": False}} if is_classifier(model) else None
    try:
        # name: skl2onnx names the graph with a random uuid otherwise, and the same model would convert to
        # other bytes (another sha256, another Triton version) at every publish
        onx = skl_convert(model, name=f"modelops_{type(model).__name__}",
                          initial_types=[(INPUT_NAME, tensor_type([None, n_features]))], options=options,
                          target_opset=target_opset)
    except Exception as exc:  # skl2onnx raises many types (RuntimeError, MissingShapeCalculator, ...)
        raise ContractError(f"skl2onnx cannot convert {type(model).__name__}: {type(exc).__name__}: {exc}") from exc
    data: bytes = onx.SerializeToString()
    return data


def onnx_outputs(onnx_model: bytes) -> list[str]:
    """The output names of a serialized ONNX graph, in order."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    return [o.name for o in session.get_outputs()]


def run_graph(onnx_model: bytes, sample: Any, dtype: str) -> dict[str, Any]:
    """The graph's outputs (name → array) on ``sample`` (a DataFrame or a 2-D array) fed as ``input`` in ``dtype``."""
    import onnxruntime as ort

    features = np.asarray(sample.to_numpy() if hasattr(sample, "to_numpy") else sample)
    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {INPUT_NAME: features.astype(_NUMPY[dtype])}), strict=True))


def compare(kind: str, want: Any, got: Any, *, tolerance: float | None = None) -> Parity:
    """The :class:`Parity` of ``got`` (the graph) against ``want`` (the model); kind: probabilities or prediction."""
    bound = (PROBABILITY_TOLERANCE if kind == "probabilities" else REGRESSION_TOLERANCE) if tolerance is None \
        else tolerance
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    diff = np.abs(got - want)
    rel = diff / np.maximum(np.abs(want), 1.0)
    max_abs, max_rel = float(diff.max(initial=0.0)), float(rel.max(initial=0.0))
    measured = max_abs if kind == "probabilities" else max_rel
    return Parity(passed=bool(measured <= bound), kind=kind, max_abs_diff=max_abs, max_rel_diff=max_rel,
                  tolerance=bound, rows=int(want.shape[0]) if want.ndim else 1)


def check_parity(model: Any, onnx_model: bytes, sample: Any, *, dtype: str = "FP32",
                 tolerance: float | None = None) -> Parity:
    """Compare the ONNX graph with ``model`` on ``sample`` (a DataFrame or a 2-D array); see the module docstring."""
    results = run_graph(onnx_model, sample, dtype)
    if is_classifier(model):
        if "probabilities" not in results:
            raise ContractError(f"ONNX graph outputs {list(results)}: no 'probabilities' (convert with zipmap=False)")
        return compare("probabilities", model.predict_proba(sample), results["probabilities"], tolerance=tolerance)
    return compare("prediction", model.predict(sample), next(iter(results.values())), tolerance=tolerance)


def require_parity(parity: Parity) -> Parity:
    """``parity`` when it passed.

    Raises:
        ContractError: it failed (the message says by how much).
    """
    if not parity.passed:
        raise ContractError(f"the converted ONNX graph does not match the model: {parity.describe()}")
    return parity


def graph_tensors(onnx_model: bytes) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """The (inputs, outputs) of a serialized ONNX graph as spec tensors (symbolic dims become -1)."""
    import onnx

    graph = onnx.load_from_string(onnx_model).graph
    initializers = {i.name for i in graph.initializer}

    def tensor(value: Any) -> Tensor:
        t = value.type.tensor_type
        if t.elem_type not in _ONNX_DTYPES:
            raise ContractError(f"ONNX tensor {value.name}: element type {t.elem_type} not supported; "
                                f"supported: {sorted(_ONNX_DTYPES.values())}")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        return Tensor(name=value.name, dtype=_ONNX_DTYPES[t.elem_type], shape=dims)

    return (tuple(tensor(v) for v in graph.input if v.name not in initializers),
            tuple(tensor(v) for v in graph.output))


def spec_for_graph(spec: ModelSpec, onnx_model: bytes) -> ModelSpec:
    """``spec`` with the inputs and (two-or-more-dimensional) outputs of the converted graph, re-checked."""
    inputs, outputs = graph_tensors(onnx_model)
    served = [t for t in outputs if len(t.shape) >= 2]
    doc = spec.to_dict()
    doc["inputs"] = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in inputs]
    doc["outputs"] = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in served]
    return ModelSpec.from_dict(doc)
