"""An MLflow model directory → what Triton serves: the spec, the ONNX graph, and the model's own answers.

:func:`prepare_model` is the step between "MLflow version exists" and publishing
(:mod:`modelops.serving.spec_publish`). Per flavor (``modelops.modelspec.derive``'s precedence):

* ``onnx``: the user's graph as logged (``MLmodel`` ``flavors.onnx.data``, any named inputs and
  outputs); the spec's tensors must be the graph's (a signature that names other tensors is refused);
* ``sklearn``: converted with ``skl2onnx`` (FP32 input; FP64 when FP32 fails the parity check) and
  parity-checked on the evaluation sample against the estimator's own ``predict_proba`` / ``predict``
  (:mod:`modelops.modelspec.convert`: max abs diff ≤ 1e-5 for probabilities, relative 1e-4 for
  predictions); a model that fails parity in both precisions is **refused** naming the difference.
  A bare ``LGBM*`` / ``XGB*`` estimator logged with ``mlflow.sklearn`` is converted as the two below,
  LightGBM/XGBoost steps inside a pipeline by skl2onnx with onnxmltools' converters registered;
* ``lightgbm``, ``xgboost``: loaded with ``mlflow.lightgbm.load_model`` / ``mlflow.xgboost.load_model``
  (the scikit-learn API or a raw ``Booster``), converted with ``onnxmltools``
  (:mod:`modelops.modelspec.convert_boosters`; FP32, FP64 when FP32 fails) and parity-checked with the
  same tolerances against the model's own ``predict_proba`` / ``predict`` (a binary raw booster's
  ``predict`` is the positive class's probability); objectives other than classification and
  regression (ranking, raw margins) and a model failing parity in both precisions are **refused**;
* ``triton``, ``pyfunc``: refused before Triton, naming the flavor and what is supported (the
  python-backend pyfunc path is not built yet).

The **evaluation sample**, in this order: a table the run logged under ``eval/`` (``*.parquet`` or
``*.csv``, given as ``eval_table``), else the model's input example (``input_example.json``, as
``log_model(..., input_example=X[:5])`` writes it). A model with neither is refused, naming what to log.
The sample is validated against the spec's own contract (:func:`modelops.modelspec.render.gate_expectations`
semantics: the columns exist, values within the declared ``min``/``max``, no nulls where
``not_null_mostly`` forbids them) before anything is converted.

**Expected answers** are the framework's own, through MLflow's own loading (``mlflow.pyfunc.load_model``
for ONNX, the estimator's or booster's ``predict_proba``/``predict`` for the converted flavors), so the
check after Triton loads the version compares Triton with the model the user logged, not with the converted graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from modelops.errors import ContractError
from modelops.modelspec.convert import Parity, check_parity, convert_sklearn, is_classifier, spec_for_graph
from modelops.modelspec.convert_boosters import (
    BoosterModel,
    booster_answers,
    booster_flavor,
    check_booster_parity,
    convert_booster,
    describe_booster,
    register_sklearn_converters,
    sklearn_target_opset,
)
from modelops.modelspec.derive import derive_spec, input_example_path
from modelops.modelspec.spec import ModelSpec, Tensor

Array = np.ndarray[Any, Any]
PUBLISHED_FLAVORS: tuple[str, ...] = ("onnx", "sklearn", "lightgbm", "xgboost")
"""Flavors :func:`prepare_model` publishes today."""
_CONVERTED = frozenset({"sklearn", "lightgbm", "xgboost"})
"""Flavors converted to ONNX (and parity-checked) rather than served as logged."""
_NUMPY = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
          "BYTES": np.object_}
EVAL_HINT = ("log an evaluation sample: mlflow.log_table / mlflow.log_artifact of a parquet or csv file under "
              "eval/ in the model's run (example: mlflow.log_artifact('eval.parquet', 'eval')), or log the model "
              "with input_example=X[:20]")


@dataclass(frozen=True)
class PreparedModel:
    """What one MLflow model is served as.

    Attributes:
        spec: the model spec (tensors those of ``graph``).
        graph: the serialized ONNX graph Triton runs.
        sample: the evaluation sample as input tensors (name → array, the spec's dtypes).
        expected: the framework's own answers on ``sample`` (output tensor name → array).
        parity: the conversion's parity check (None for a graph served as logged).
        sample_rows: rows in the evaluation sample.
        sample_source: where the sample came from (``eval/...`` or ``input_example``).
    """

    spec: ModelSpec
    graph: bytes
    sample: Mapping[str, Array]
    expected: Mapping[str, Array]
    parity: Parity | None = None
    sample_rows: int = 0
    sample_source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def read_eval_table(path: Path) -> pd.DataFrame:
    """A logged evaluation table (``.parquet`` or ``.csv``)."""
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix == ".csv":
            return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ContractError(f"evaluation table {path.name}: unreadable ({exc})") from exc
    raise ContractError(f"evaluation table {path.name}: must be .parquet or .csv (example: eval/sample.parquet)")


def input_example(model_dir: Path) -> Any:
    from mlflow.models import Model

    if input_example_path(model_dir) is None:
        return None
    example = Model.load(str(model_dir)).load_input_example(str(model_dir))
    return example


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


def _frame(spec: ModelSpec, raw: Any, source: str) -> pd.DataFrame:
    frame = raw if isinstance(raw, pd.DataFrame) else pd.DataFrame(raw)
    problems = contract_problems(spec, frame)
    if problems:
        raise ContractError(f"model {spec.name}: the evaluation sample ({source}, {len(frame)} rows) violates the "
                            "model's own contract:\n  " + "\n  ".join(problems))
    return frame[[f.name for f in spec.features]]


def _tensors(inputs: tuple[Tensor, ...], raw: Any, source: str) -> dict[str, Array]:
    if not isinstance(raw, Mapping):
        if len(inputs) != 1:
            raise ContractError(f"evaluation sample ({source}): the model has inputs {[t.name for t in inputs]}; "
                                "give a mapping of input name to array (example: {'x': X, 'ids': ids})")
        raw = {inputs[0].name: raw}
    out = {}
    for t in inputs:
        if t.name not in raw:
            raise ContractError(f"evaluation sample ({source}): no input {t.name!r}; it has {sorted(raw)}")
        array = np.asarray(raw[t.name], dtype=_NUMPY[t.dtype])
        out[t.name] = array.reshape(-1, *t.shape[1:]) if len(t.shape) > 1 and all(d > 0 for d in t.shape[1:]) \
            else array
    return out


def _served(spec: ModelSpec, frame: pd.DataFrame, what: str, convert: Callable[[str], bytes],
            check: Callable[[bytes, str], Parity], answers: Callable[[], Any]) -> PreparedModel:
    """The first of FP32, FP64 whose converted graph passes its parity check; refused when neither does."""
    failed: list[str] = []
    for dtype in ("FP32", "FP64"):
        graph = convert(dtype)
        parity = check(graph, dtype)
        if parity.passed:
            served = spec_for_graph(spec, graph)
            sample = {served.inputs[0].name: frame.to_numpy().astype(_NUMPY[dtype])}
            output = served.outputs[0]
            expected = {output.name: np.asarray(answers(), dtype=_NUMPY[output.dtype]).reshape(len(frame), -1)}
            return PreparedModel(served, graph, sample, expected, parity, len(frame), notes=tuple(failed))
        failed.append(f"{dtype}: {parity.describe()}")
    raise ContractError(f"model {spec.name} ({what}): the ONNX conversion does not reproduce the model "
                        f"({'; '.join(failed)}); it is refused rather than served wrong")


def _booster_served(spec: ModelSpec, frame: pd.DataFrame, booster: BoosterModel) -> PreparedModel:
    n = len(spec.features)
    return _served(spec, frame, f"{booster.flavor} {booster.type_name}, objective {booster.objective}",
                   lambda dtype: convert_booster(booster, n, dtype=dtype),
                   lambda graph, dtype: check_booster_parity(booster, graph, frame, dtype=dtype),
                   lambda: booster_answers(booster, frame))


def _prepare_sklearn(model_dir: Path, spec: ModelSpec, frame: pd.DataFrame) -> PreparedModel:
    import mlflow.sklearn

    model = mlflow.sklearn.load_model(str(model_dir))
    flavor = booster_flavor(model)
    if flavor is not None:  # a bare LGBM*/XGB* estimator logged with mlflow.sklearn: onnxmltools converts it
        return _booster_served(spec, frame, describe_booster(flavor, model))
    register_sklearn_converters()  # LightGBM/XGBoost steps inside a pipeline
    n, opset = len(spec.features), sklearn_target_opset(model)
    return _served(spec, frame, f"sklearn {type(model).__name__}",
                   lambda dtype: convert_sklearn(model, n, dtype=dtype, target_opset=opset),
                   lambda graph, dtype: check_parity(model, graph, frame, dtype=dtype),
                   lambda: model.predict_proba(frame) if is_classifier(model) else model.predict(frame))


def _prepare_booster(model_dir: Path, spec: ModelSpec, frame: pd.DataFrame) -> PreparedModel:
    """A ``lightgbm`` / ``xgboost`` flavor model, loaded with MLflow's own loader of that flavor."""
    if spec.flavor == "lightgbm":
        import mlflow.lightgbm

        model = mlflow.lightgbm.load_model(str(model_dir))
    else:
        import mlflow.xgboost

        model = mlflow.xgboost.load_model(str(model_dir))
    return _booster_served(spec, frame, describe_booster(spec.flavor, model))


def _prepare_onnx(model_dir: Path, spec: ModelSpec, raw: Any, source: str) -> PreparedModel:
    import mlflow.pyfunc
    from mlflow.models import Model

    from modelops.modelspec.convert import graph_tensors

    data = Model.load(str(model_dir)).flavors["onnx"].get("data", "model.onnx")
    graph = (model_dir / str(data)).read_bytes()
    inputs, _outputs = graph_tensors(graph)
    declared = {t.name for t in spec.inputs}
    if declared != {t.name for t in inputs}:
        raise ContractError(f"model {spec.name}: the signature's inputs {sorted(declared)} are not the ONNX graph's "
                            f"{sorted(t.name for t in inputs)}; log the model with the graph's input names")
    if not spec.features and not spec.outputs:
        spec = spec_for_graph(spec, graph)
    sample = _tensors(spec.inputs, raw, source)
    answers = mlflow.pyfunc.load_model(str(model_dir)).predict(dict(sample))
    if not isinstance(answers, Mapping):
        answers = {spec.outputs[0].name: answers}
    expected = {t.name: np.asarray(answers[t.name]) for t in spec.outputs if t.name in answers}
    missing = [t.name for t in spec.outputs if t.name not in expected]
    if missing:
        raise ContractError(f"model {spec.name}: outputs {missing} of the spec are not among the graph's "
                            f"{sorted(answers)}")
    rows = next(iter(sample.values())).shape[0]
    return PreparedModel(spec, graph, sample, expected, None, rows, source)


def prepare_model(model_dir: Path, name: str, *, overrides: Mapping[str, Any] | None = None,
                  eval_table: Path | None = None) -> PreparedModel:
    """The spec, graph, evaluation sample and expected answers of the MLflow model in ``model_dir``.

    Raises:
        ContractError: before anything reaches Triton: no signature and no declared tensors, a flavor not
            published (naming the supported ones), no evaluation data (naming what to log), a sample that
            violates the model's own contract, or a conversion that fails its parity check.
    """
    spec = derive_spec(model_dir, name, overrides)
    if spec.flavor not in PUBLISHED_FLAVORS:
        raise ContractError(f"model {name}: flavor {spec.flavor!r} is not published yet; published flavors: "
                            f"{list(PUBLISHED_FLAVORS)} (log the model with mlflow.onnx.log_model, "
                            "mlflow.sklearn.log_model, mlflow.lightgbm.log_model or mlflow.xgboost.log_model, "
                            "or convert it to ONNX first)")
    if eval_table is not None:
        raw: Any = read_eval_table(eval_table)
        source = f"eval/{eval_table.name}"
    else:
        raw, source = input_example(model_dir), "input_example"
    if raw is None:
        raise ContractError(f"model {name}: no evaluation data to check it with; {EVAL_HINT}")
    if spec.flavor in _CONVERTED:
        if not spec.features:
            raise ContractError(f"model {name}: a {spec.flavor} model needs a column signature "
                                "(infer_signature(X_frame, model.predict_proba(X_frame)))")
        prepare = _prepare_sklearn if spec.flavor == "sklearn" else _prepare_booster
        prepared = prepare(model_dir, spec, _frame(spec, raw, source))
        return PreparedModel(prepared.spec, prepared.graph, prepared.sample, prepared.expected, prepared.parity,
                             prepared.sample_rows, source, prepared.notes)
    if spec.features and isinstance(raw, pd.DataFrame):
        _frame(spec, raw, source)
    return _prepare_onnx(model_dir, spec, raw, source)
