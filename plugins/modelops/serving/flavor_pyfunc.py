"""The ``pyfunc`` path: Triton's python backend running the MLflow model itself (``mlflow.pyfunc.load_model``).

Served this way: a model whose only servable flavor is MLflow's ``python_function`` (a
``mlflow.pyfunc.PythonModel``, a custom flavor), and a ``sklearn``/``lightgbm``/``xgboost`` model whose
ONNX conversion fails (cannot be built, or misses its parity check in both FP32 and FP64): instead of
being refused it is served by the model MLflow loads, never by the graph that answers differently
(:func:`modelops.serving.mlflow_models.prepare_model` decides; the spec's ``flavor`` becomes
``pyfunc`` and the reason is kept in the publish's notes).

:func:`prepare_pyfunc`, before anything reaches Triton:

1. the model's ``requirements.txt`` and Python against the serving environment
   (:func:`modelops.serving.model_requirements.require_environment`): a package missing or of another
   version is refused, named;
2. ``mlflow.pyfunc.load_model`` here, in the same environment the python backend loads it in; an
   error is refused naming the flavor and MLflow's message (no stack trace);
3. the evaluation sample as the spec's input tensors (the gateway's column rule,
   :func:`modelops.serving.prepared.column_tensors`), fed back through the runner template's own
   :func:`model_input` (``model_repository/templates/pyfunc_model.py``) and the model's ``predict`` (or
   ``predict_fn``): the expected answers, mapped to the spec's outputs by the template's
   :func:`output_tensors`. Triton, running the same template on the same tensors, must answer the same.

The payload is the MLflow model directory as logged (every file, under ``mlflow_model/`` of the
version folder, :mod:`modelops.serving.spec_files`).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from modelops.errors import ContractError, ServingError
from modelops.modelspec.spec import ModelSpec
from modelops.serving.model_requirements import require_environment
from modelops.serving.pbtxt import TEMPLATES_DIR
from modelops.serving.prepared import PreparedModel, column_tensors, feature_frame, input_tensors
from modelops.serving.spec_files import PYFUNC_TEMPLATE

PREDICT_FN = "predict_fn"
"""The spec parameter (and config parameter) naming the method the runner calls instead of ``predict``."""


@functools.cache
def runner(templates_dir: Path = TEMPLATES_DIR) -> ModuleType:
    """The pyfunc runner template as a module (its pure functions; it imports Triton's utilities only when there).

    Raises:
        ServingError: the template is missing or does not import.
    """
    path = templates_dir / PYFUNC_TEMPLATE
    spec = importlib.util.spec_from_file_location("modelops_pyfunc_runner", path)
    if spec is None or spec.loader is None:
        raise ServingError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (OSError, ImportError, SyntaxError) as exc:
        raise ServingError(f"{path}: does not import ({exc})") from exc
    return module


def model_files(model_dir: Path) -> dict[str, bytes]:
    """Every file of the MLflow model directory, by its POSIX path relative to it (sorted)."""
    return {p.relative_to(model_dir).as_posix(): p.read_bytes()
            for p in sorted(model_dir.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def load_pyfunc(model_dir: Path, what: str) -> Any:
    """``mlflow.pyfunc.load_model`` of ``model_dir``; any failure refused naming MLflow's message."""
    import mlflow.pyfunc

    try:
        return mlflow.pyfunc.load_model(str(model_dir))
    except Exception as exc:  # MLflow's loaders raise anything the model's own code raises
        raise ContractError(f"{what}: MLflow cannot load it as a python_function model here "
                            f"({type(exc).__name__}: {exc}); nothing was sent to Triton") from exc


def pyfunc_answers(model: Any, spec: ModelSpec, sample: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """The model's answers on the input tensors ``sample``, as the spec's outputs (through the runner's functions).

    Raises:
        ContractError: the model fails on the sample, or its answer does not fit the spec's outputs.
    """
    run = runner()
    doc = spec.to_dict()
    what = f"model {spec.name} (pyfunc)"
    try:
        predict = run.predictor(model, spec.parameters.get(PREDICT_FN))
        prediction = predict(run.model_input(doc, dict(sample)))
    except Exception as exc:  # the user's predict may raise anything
        raise ContractError(f"{what}: predicting the evaluation sample failed ({type(exc).__name__}: {exc})") from exc
    try:
        tensors = run.output_tensors(prediction, doc["outputs"], rows)
    except ValueError as exc:
        raise ContractError(f"{what}: the answer on the evaluation sample does not fit the spec's outputs: {exc}; "
                            "log the model with a signature of its outputs (infer_signature(X, model.predict(X))) "
                            "or declare outputs in modelops.yaml") from exc
    return {o.name: np.asarray(t) for o, t in zip(spec.outputs, tensors, strict=True)}


def prepare_pyfunc(model_dir: Path, spec: ModelSpec, raw: Any, source: str, *, flavors: Mapping[str, Any],
                   predict_fn: str | None = None, notes: tuple[str, ...] = ()) -> PreparedModel:
    """The pyfunc version of the MLflow model in ``model_dir`` (see the module docstring).

    Args:
        spec: the derived spec (any flavor; served as ``pyfunc``).
        raw / source: the evaluation sample and where it came from.
        flavors: the ``MLmodel``'s flavors.
        predict_fn: the method to call instead of ``predict`` (``predict_proba``), kept in the spec's parameters.
        notes: why the model is served this way (a failed conversion), carried into the result.

    Raises:
        ContractError: before Triton: no ``python_function`` flavor, unmet requirements, a model MLflow cannot
            load or that fails on the sample, a sample that breaks the contract.
    """
    what = f"model {spec.name} (pyfunc)"
    if "python_function" not in flavors:
        raise ContractError(f"{what}: the MLmodel has no python_function flavor (it has {sorted(flavors)}); log it "
                            "with mlflow.<flavor>.log_model, which adds one, or mlflow.pyfunc.log_model")
    parameters = dict(spec.parameters)
    if predict_fn and predict_fn != "predict":
        parameters[PREDICT_FN] = predict_fn
    spec = ModelSpec.from_dict({**spec.to_dict(), "flavor": "pyfunc", "backend": None, "parameters": parameters})
    require_environment(model_dir, what, flavors)
    if spec.features:
        sample = column_tensors(spec, feature_frame(spec, raw, source))
    else:
        sample = input_tensors(spec.inputs, raw, source)
    rows = int(next(iter(sample.values())).shape[0])
    expected = pyfunc_answers(load_pyfunc(model_dir, what), spec, sample, rows)
    return PreparedModel(spec, b"", sample, expected, None, rows, source, notes, model_files(model_dir), "model")
