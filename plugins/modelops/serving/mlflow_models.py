"""An MLflow model directory → what Triton serves: the spec, the payload, and the answers to verify it by.

:func:`prepare_model` is the step between "MLflow version exists" and publishing
(:mod:`modelops.serving.spec_publish`). Per flavor (``modelops.modelspec.derive``'s precedence):

* ``onnx``: the user's graph as logged (``MLmodel`` ``flavors.onnx.data``, any named inputs and
  outputs); the spec's tensors must be the graph's (a signature that names other tensors is refused);
* ``sklearn``: converted with ``skl2onnx`` (FP32 input; FP64 when FP32 fails the parity check) and
  parity-checked on the evaluation sample against the estimator's own ``predict_proba`` / ``predict``
  (:mod:`modelops.modelspec.convert`: max abs diff ≤ 1e-5 for probabilities, relative 1e-4 for
  predictions); a model skl2onnx cannot convert, or whose graph fails parity in both precisions, is
  **served by the pyfunc path** below (never by the graph), calling ``predict_proba`` or ``predict`` as
  the parity check did; refused only when that path refuses it too (both reasons named).
  A bare ``LGBM*`` / ``XGB*`` estimator logged with ``mlflow.sklearn`` is converted as the two below,
  LightGBM/XGBoost steps inside a pipeline by skl2onnx with onnxmltools' converters registered;
* ``lightgbm``, ``xgboost``: loaded with ``mlflow.lightgbm.load_model`` / ``mlflow.xgboost.load_model``
  (the scikit-learn API or a raw ``Booster``), converted with ``onnxmltools``
  (:mod:`modelops.modelspec.convert_boosters`; FP32, FP64 when FP32 fails) and parity-checked with the
  same tolerances against the model's own ``predict_proba`` / ``predict`` (a binary raw booster's
  ``predict`` is the positive class's probability); objectives other than classification and
  regression (ranking, raw margins) are **refused**; a failed conversion falls back to pyfunc as above;
* ``pyfunc`` (MLflow's ``python_function``, anything else MLflow loads): Triton's python backend runs
  the MLflow model itself (:mod:`modelops.serving.flavor_pyfunc`), after its ``requirements.txt`` passed
  the dependency rule (:mod:`modelops.serving.model_requirements`);
* ``triton``: the user's Triton model directory (:mod:`modelops.serving.flavor_triton`), its spec read
  from its ``config.pbtxt``.

The evaluation sample and its contract check: :mod:`modelops.serving.prepared`. A model without one is
refused, naming what to log.

**Expected answers** are the framework's own, through MLflow's own loading (``mlflow.pyfunc.load_model``
for ONNX and pyfunc, the estimator's or booster's ``predict_proba``/``predict`` for the converted flavors),
so the check after Triton loads the version compares Triton with the model the user logged, not with the
converted graph; a triton-flavor model is held against the outputs logged with its sample, or else
against itself (:mod:`modelops.serving.flavor_triton`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
from modelops.modelspec.derive import derive_spec, load_mlmodel
from modelops.modelspec.spec import ModelSpec
from modelops.serving.flavor_pyfunc import prepare_pyfunc
from modelops.serving.flavor_triton import prepare_triton, triton_spec
from modelops.serving.prepared import (
    NUMPY,
    ConversionFailed,
    PreparedModel,
    evaluation_data,
    feature_frame,
    input_tensors,
)

PUBLISHED_FLAVORS: tuple[str, ...] = ("onnx", "sklearn", "lightgbm", "xgboost", "pyfunc", "triton")
"""Flavors :func:`prepare_model` publishes."""
_CONVERTED = frozenset({"sklearn", "lightgbm", "xgboost"})
"""Flavors converted to ONNX (and parity-checked) rather than served as logged."""
__all__ = ["PUBLISHED_FLAVORS", "PreparedModel", "prepare_model"]


def _served(spec: ModelSpec, frame: pd.DataFrame, what: str, convert: Callable[[str], bytes],
            check: Callable[[bytes, str], Parity], answers: Callable[[], Any], predict_fn: str) -> PreparedModel:
    """The first of FP32, FP64 whose converted graph passes its parity check (``answers``: ``predict_fn``'s).

    Raises:
        ConversionFailed: the graph cannot be built, or neither precision passes (both named).
    """
    failed: list[str] = []
    for dtype in ("FP32", "FP64"):
        try:
            graph = convert(dtype)
            parity = check(graph, dtype)
        except ContractError as exc:  # skl2onnx/onnxmltools cannot convert it: no precision will do
            raise ConversionFailed(f"model {spec.name} ({what}): the ONNX conversion failed: {exc}",
                                   predict_fn) from exc
        if parity.passed:
            served = spec_for_graph(spec, graph)
            sample = {served.inputs[0].name: frame.to_numpy().astype(NUMPY[dtype])}
            output = served.outputs[0]
            expected = {output.name: np.asarray(answers(), dtype=NUMPY[output.dtype]).reshape(len(frame), -1)}
            return PreparedModel(served, graph, sample, expected, parity, len(frame), notes=tuple(failed))
        failed.append(f"{dtype}: {parity.describe()}")
    raise ConversionFailed(f"model {spec.name} ({what}): the ONNX conversion does not reproduce the model "
                           f"({'; '.join(failed)})", predict_fn)


def _booster_served(spec: ModelSpec, frame: pd.DataFrame, booster: BoosterModel) -> PreparedModel:
    n = len(spec.features)
    return _served(spec, frame, f"{booster.flavor} {booster.type_name}, objective {booster.objective}",
                   lambda dtype: convert_booster(booster, n, dtype=dtype),
                   lambda graph, dtype: check_booster_parity(booster, graph, frame, dtype=dtype),
                   lambda: booster_answers(booster, frame),
                   "predict_proba" if booster.classifier and not booster.raw else "predict")


def _prepare_sklearn(model_dir: Path, spec: ModelSpec, frame: pd.DataFrame) -> PreparedModel:
    import mlflow.sklearn

    model = mlflow.sklearn.load_model(str(model_dir))
    flavor = booster_flavor(model)
    if flavor is not None:  # a bare LGBM*/XGB* estimator logged with mlflow.sklearn: onnxmltools converts it
        return _booster_served(spec, frame, describe_booster(flavor, model))
    register_sklearn_converters()  # LightGBM/XGBoost steps inside a pipeline
    n, opset, classifier = len(spec.features), sklearn_target_opset(model), is_classifier(model)
    return _served(spec, frame, f"sklearn {type(model).__name__}",
                   lambda dtype: convert_sklearn(model, n, dtype=dtype, target_opset=opset),
                   lambda graph, dtype: check_parity(model, graph, frame, dtype=dtype),
                   lambda: model.predict_proba(frame) if classifier else model.predict(frame),
                   "predict_proba" if classifier else "predict")


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
    sample = input_tensors(spec.inputs, raw, source)
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


def _prepare_converted(model_dir: Path, spec: ModelSpec, raw: Any, source: str) -> PreparedModel:
    """Converted to ONNX when its graph reproduces it, else served by pyfunc (see the module docstring)."""
    if not spec.features:
        raise ContractError(f"model {spec.name}: a {spec.flavor} model needs a column signature "
                            "(infer_signature(X_frame, model.predict_proba(X_frame)))")
    frame = feature_frame(spec, raw, source)
    try:
        prepared = (_prepare_sklearn if spec.flavor == "sklearn" else _prepare_booster)(model_dir, spec, frame)
    except ConversionFailed as failed:
        reason = f"{failed}; served by the python backend running the MLflow model instead"
        try:
            return prepare_pyfunc(model_dir, spec, raw, source, flavors=_flavors(model_dir),
                                  predict_fn=failed.predict_fn, notes=(reason,))
        except ContractError as exc:
            raise ContractError(f"{failed}; and the pyfunc path refuses it too: {exc}; it is refused rather than "
                                "served wrong") from exc
    return PreparedModel(prepared.spec, prepared.graph, prepared.sample, prepared.expected, prepared.parity,
                         prepared.sample_rows, source, prepared.notes)


def prepare_model(model_dir: Path, name: str, *, overrides: Mapping[str, Any] | None = None,
                  eval_table: Path | None = None) -> PreparedModel:
    """The spec, payload, evaluation sample and expected answers of the MLflow model in ``model_dir``.

    Raises:
        ContractError: before anything reaches Triton: no signature and no declared tensors, an unknown
            flavor (naming the published ones), no evaluation data (naming what to log), a sample that
            violates the model's own contract, a conversion that fails its parity check where the pyfunc
            path cannot serve the model either, unmet requirements of a python-backend model.
    """
    flavors = _flavors(model_dir)
    if "triton" in flavors:
        raw, source = evaluation_data(model_dir, name, eval_table)
        return prepare_triton(model_dir, name, flavors, overrides=overrides, raw=raw, source=source)
    spec = derive_spec(model_dir, name, overrides)
    if spec.flavor not in PUBLISHED_FLAVORS:
        raise ContractError(f"model {name}: flavor {spec.flavor!r} is not published; published flavors: "
                            f"{list(PUBLISHED_FLAVORS)} (log the model with mlflow.onnx.log_model, mlflow.sklearn, "
                            "mlflow.lightgbm or mlflow.xgboost.log_model, mlflow.pyfunc.log_model, or as a Triton "
                            "model directory with the triton flavor)")
    raw, source = evaluation_data(model_dir, name, eval_table)
    if spec.flavor in _CONVERTED:
        return _prepare_converted(model_dir, spec, raw, source)
    if spec.flavor == "pyfunc":
        return prepare_pyfunc(model_dir, spec, raw, source, flavors=flavors)
    if spec.features and isinstance(raw, pd.DataFrame):
        feature_frame(spec, raw, source)
    return _prepare_onnx(model_dir, spec, raw, source)


def model_spec(model_dir: Path, name: str, *, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """The spec :func:`prepare_model` serves the model with, derived without converting or loading anything.

    The contract gate validates the evaluation sample against it before the publish prepares the model.

    Raises:
        ContractError: as :func:`~modelops.modelspec.derive.derive_spec` (no signature, a malformed override).
    """
    flavors = _flavors(model_dir)
    if "triton" in flavors:
        return triton_spec(model_dir, name, flavors, overrides=overrides)
    return derive_spec(model_dir, name, overrides)


def _flavors(model_dir: Path) -> Mapping[str, Any]:
    """The MLmodel's flavors; a missing or malformed MLmodel is refused as :func:`derive_spec` refuses it."""
    flavors = load_mlmodel(Path(model_dir)).flavors
    return flavors if isinstance(flavors, Mapping) else {}
