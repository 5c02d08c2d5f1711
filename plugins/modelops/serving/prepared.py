"""What one MLflow model is served as (:class:`PreparedModel`), and the evaluation sample every flavor checks.

Shared by the flavor paths of :func:`modelops.serving.mlflow_models.prepare_model` (ONNX and the
converted flavors there, :mod:`modelops.serving.flavor_pyfunc`, :mod:`modelops.serving.flavor_triton`).

The **evaluation sample**, in this order: a file the run logged under ``eval/`` (``*.parquet`` or
``*.csv``: a table; ``*.npz``: arrays by tensor name, which may also hold a ``triton`` model's expected
outputs), else the model's input example (``input_example.json``, as ``log_model(...,
input_example=X[:5])`` writes it). Column features are validated against the spec's own contract
(:func:`contract_problems`: the columns exist, values within the declared ``min``/``max``, no nulls where
``not_null_mostly`` forbids them) before anything is converted or loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from modelops.errors import ContractError
from modelops.modelspec.convert import Parity
from modelops.modelspec.derive import input_example_path
from modelops.modelspec.spec import ModelSpec, Tensor
from modelops.serving.spec_files import Payload, served_as

Array = np.ndarray[Any, Any]
NUMPY = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
         "BYTES": np.object_}
EVAL_SUFFIXES = (".parquet", ".csv", ".npz")
EVAL_HINT = ("log an evaluation sample: mlflow.log_table / mlflow.log_artifact of a parquet or csv file under "
             "eval/ in the model's run (example: mlflow.log_artifact('eval.parquet', 'eval')), or log the model "
             "with input_example=X[:20]")
VERIFIED_BY = ("model", "logged_outputs", "consistency")
"""What Triton's answers are held against: the model's own answers through MLflow's loading, the outputs
logged with the evaluation sample, or (a triton-flavor model logged without outputs) each other."""


class ConversionFailed(ContractError):
    """A converted flavor's ONNX graph could not be built or missed its parity check in both precisions.

    Attributes:
        predict_fn: the model's method the parity check compared (``predict_proba`` or ``predict``): what
            the pyfunc path serves instead.
    """

    def __init__(self, message: str, predict_fn: str) -> None:
        super().__init__(message)
        self.predict_fn = predict_fn


@dataclass(frozen=True)
class PreparedModel:
    """What one MLflow model is served as.

    Attributes:
        spec: the model spec (its ``flavor`` says how it is served: ``pyfunc``, ``triton``, else ONNX).
        graph: the serialized ONNX graph Triton runs (empty when served otherwise).
        sample: the evaluation sample as input tensors (name → array, the spec's dtypes).
        expected: the answers Triton's are held against (output tensor name → array); empty for a
            triton-flavor model logged without outputs (``verified_by="consistency"``).
        parity: the conversion's parity check (None for a graph served as logged).
        sample_rows: rows in the evaluation sample.
        sample_source: where the sample came from (``eval/...`` or ``input_example``).
        notes: what happened on the way (a failed conversion the pyfunc path replaced, ...).
        files: the version folder's payload of a ``pyfunc`` (the MLflow model directory) or ``triton``
            (its version folder) version, by relative path.
        verified_by: one of :data:`VERIFIED_BY`.
    """

    spec: ModelSpec
    graph: bytes
    sample: Mapping[str, Array]
    expected: Mapping[str, Array]
    parity: Parity | None = None
    sample_rows: int = 0
    sample_source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    files: Mapping[str, bytes] = field(default_factory=dict)
    verified_by: str = "model"

    @property
    def served_as(self) -> str:
        """``onnx``, ``pyfunc`` or ``triton`` (:func:`modelops.serving.spec_files.served_as`)."""
        return served_as(self.spec)

    @property
    def payload(self) -> Payload:
        """What the version folder carries: the graph, or the files (see ``spec_files.payload_files``)."""
        return self.graph if self.served_as == "onnx" else self.files


def read_eval_table(path: Path) -> Any:
    """A logged evaluation file: a DataFrame (``.parquet``, ``.csv``) or arrays by name (``.npz``)."""
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix == ".csv":
            return pd.read_csv(path)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError) as exc:
        raise ContractError(f"evaluation table {path.name}: unreadable ({exc})") from exc
    raise ContractError(f"evaluation table {path.name}: must be .parquet, .csv or .npz (example: eval/sample.parquet)")


def evaluation_data(model_dir: Path, name: str, eval_table: Path | None) -> tuple[Any, str]:
    """(the raw sample, where it came from); refused when there is none.

    Raises:
        ContractError: no evaluation data (naming what to log), or an unreadable file.
    """
    if eval_table is not None:
        return read_eval_table(eval_table), f"eval/{eval_table.name}"
    raw = input_example(model_dir)
    if raw is None:
        raise ContractError(f"model {name}: no evaluation data to check it with; {EVAL_HINT}")
    return raw, "input_example"


def input_example(model_dir: Path) -> Any:
    """The model's saved input example (MLflow's own loading), None when it has none."""
    from mlflow.models import Model

    if input_example_path(model_dir) is None:
        return None
    return Model.load(str(model_dir)).load_input_example(str(model_dir))


def contract_problems(spec: ModelSpec, frame: pd.DataFrame) -> list[str]:
    """Where ``frame`` breaks the spec's feature rules (column present, range, nulls), one line each."""
    problems = []
    for f in spec.features:
        if f.name not in frame.columns:
            problems.append(f"column {f.name!r}: missing (the spec's features: {[x.name for x in spec.features][:5]}…)")
            continue
        column = frame[f.name]
        nulls = float(column.isna().mean()) if len(column) else 0.0
        if f.not_null_mostly is not None and 1.0 - nulls < f.not_null_mostly:
            problems.append(f"column {f.name!r}: {nulls:.0%} nulls, the spec allows at most "
                            f"{1.0 - f.not_null_mostly:.0%} (not_null_mostly {f.not_null_mostly})")
        values = pd.to_numeric(column, errors="coerce") if f.dtype != "BYTES" else None
        if values is not None and f.min is not None and bool((values < f.min).any()):
            problems.append(f"column {f.name!r}: {int((values < f.min).sum())} values below min {f.min} "
                            f"(smallest {values.min():g})")
        if values is not None and f.max is not None and bool((values > f.max).any()):
            problems.append(f"column {f.name!r}: {int((values > f.max).sum())} values above max {f.max} "
                            f"(largest {values.max():g})")
    return problems


def feature_frame(spec: ModelSpec, raw: Any, source: str) -> pd.DataFrame:
    """The sample's feature columns in the spec's order, after :func:`contract_problems` found none."""
    frame = raw if isinstance(raw, pd.DataFrame) else pd.DataFrame(raw)
    problems = contract_problems(spec, frame)
    if problems:
        raise ContractError(f"model {spec.name}: the evaluation sample ({source}, {len(frame)} rows) violates the "
                            "model's own contract:\n  " + "\n  ".join(problems))
    return frame[[f.name for f in spec.features]]


def input_tensors(inputs: tuple[Tensor, ...], raw: Any, source: str) -> dict[str, Array]:
    """The sample's input tensors by name, in the spec's dtypes (a mapping by name, or the one input's array)."""
    if not isinstance(raw, Mapping):
        if len(inputs) != 1:
            raise ContractError(f"evaluation sample ({source}): the model has inputs {[t.name for t in inputs]}; "
                                "give a mapping of input name to array (example: {'x': X, 'ids': ids})")
        raw = {inputs[0].name: raw}
    out = {}
    for t in inputs:
        if t.name not in raw:
            raise ContractError(f"evaluation sample ({source}): no input {t.name!r}; it has {sorted(raw)}")
        array = np.asarray(raw[t.name], dtype=NUMPY[t.dtype])
        out[t.name] = array.reshape(-1, *t.shape[1:]) if len(t.shape) > 1 and all(d > 0 for d in t.shape[1:]) \
            else array
    return out


def column_tensors(spec: ModelSpec, frame: pd.DataFrame) -> dict[str, Array]:
    """The feature columns as the spec's input tensors, by the gateway's rule: one ``[n, k]`` matrix when the
    spec has one input of all ``k`` features, else one ``[n, 1]`` tensor per column, in order."""
    inputs, n = spec.inputs, len(spec.features)
    if len(inputs) == 1 and inputs[0].shape[-1] == n:
        return {inputs[0].name: frame.to_numpy().astype(NUMPY[inputs[0].dtype])}
    if len(inputs) != n:
        raise ContractError(f"model {spec.name}: {n} features but inputs {[t.name for t in inputs]}; the columns "
                            f"become one [-1, {n}] input or one [-1, 1] input per column")
    return {t.name: np.asarray(frame[f.name].to_numpy(), dtype=NUMPY[t.dtype]).reshape(-1, 1)
            for f, t in zip(spec.features, inputs, strict=True)}
