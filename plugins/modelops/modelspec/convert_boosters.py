"""LightGBM and XGBoost → ONNX with ``onnxmltools``, parity-checked like :mod:`modelops.modelspec.convert`.

The converters are onnxmltools' own public entry points, :func:`onnxmltools.convert_lightgbm` and
:func:`onnxmltools.convert_xgboost` (the maintained way for these libraries: skl2onnx documents them as
the converters to register for LightGBM/XGBoost steps inside a pipeline, which
:func:`register_sklearn_converters` does for the ``sklearn`` flavor). They take both the scikit-learn API
(``LGBMClassifier``/``LGBMRegressor``, ``XGBClassifier``/``XGBRegressor``) and a raw ``Booster`` (what
``mlflow.lightgbm.load_model`` returns for an ``lgb.train`` model, ``mlflow.xgboost.load_model`` for an
``xgb.train`` one).

The graph has one input ``input`` ``[-1, n_features]`` and the names of the sklearn path: a classifier
answers ``label`` ``[N]`` and ``probabilities`` ``[N, k]`` (no ZipMap), a regressor ``variable`` ``[N, 1]``.
It is named ``modelops_<type>`` (onnxmltools names it with a random uuid otherwise), so the same model
converts to the same bytes every time.

Classifier or regressor: the sklearn API says so by its class; a raw booster by its objective
(LightGBM ``dump_model()["objective"]``, XGBoost ``save_config()``'s ``learner.objective.name``). The
model's own answers are ``predict_proba`` / ``predict``; a binary booster's ``predict`` is the positive
class's probability ``p``, compared as ``[1 - p, p]``. Ranking, raw-margin and other objectives are
refused, naming the objective and the supported ones.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelops.errors import ContractError
from modelops.modelspec.convert import INPUT_NAME, Parity, compare, run_graph

BOOSTER_FLAVORS = ("lightgbm", "xgboost")
LIGHTGBM_CLASSIFIERS = frozenset({"binary", "multiclass", "multiclassova"})
LIGHTGBM_REGRESSORS = frozenset({"regression", "regression_l1", "huber", "fair", "poisson", "quantile", "mape",
                                 "gamma", "tweedie"})
XGBOOST_CLASSIFIERS = frozenset({"binary:logistic", "multi:softprob"})
XGBOOST_REGRESSORS = frozenset({"reg:squarederror", "reg:squaredlogerror", "reg:logistic", "reg:pseudohubererror",
                                "reg:absoluteerror", "count:poisson", "reg:gamma", "reg:tweedie"})


@dataclass(frozen=True)
class BoosterModel:
    """A loaded LightGBM/XGBoost model and what it answers.

    Attributes:
        flavor: ``lightgbm`` or ``xgboost``.
        model: the scikit-learn API estimator or the raw ``Booster``, as MLflow loaded it.
        classifier: it answers class probabilities (else one prediction per row).
        objective: the training objective (``binary``, ``reg:squarederror``, ...).
    """

    flavor: str
    model: Any
    classifier: bool
    objective: str

    @property
    def type_name(self) -> str:
        return type(self.model).__name__

    @property
    def raw(self) -> bool:
        """A raw ``Booster`` (no ``predict_proba``), not the scikit-learn API."""
        return type(self.model).__name__ == "Booster"


def booster_flavor(model: Any) -> str | None:
    """``lightgbm`` / ``xgboost`` for a model of those libraries (by its module), else None."""
    root = type(model).__module__.split(".")[0]
    return root if root in BOOSTER_FLAVORS else None


def _lightgbm_objective(model: Any) -> str:
    booster = model if type(model).__name__ == "Booster" else model.booster_
    return str(booster.dump_model(num_iteration=1).get("objective", "")).split(" ")[0]


def _xgboost_objective(model: Any) -> str:
    booster = model if type(model).__name__ == "Booster" else model.get_booster()
    return str(json.loads(booster.save_config())["learner"]["objective"]["name"])


def describe_booster(flavor: str, model: Any) -> BoosterModel:
    """The :class:`BoosterModel` of ``model`` loaded from an MLflow ``flavor`` model.

    Raises:
        ContractError: not a LightGBM/XGBoost model, or an objective that is neither a supported
            classification nor regression one (named, with the supported ones).
    """
    if flavor not in BOOSTER_FLAVORS or booster_flavor(model) != flavor:
        raise ContractError(f"{flavor} model {type(model).__name__}: not a LightGBM/XGBoost model; supported: "
                            "LGBMClassifier, LGBMRegressor, lightgbm.Booster, XGBClassifier, XGBRegressor, "
                            "xgboost.Booster")
    objective = _lightgbm_objective(model) if flavor == "lightgbm" else _xgboost_objective(model)
    classifiers, regressors = ((LIGHTGBM_CLASSIFIERS, LIGHTGBM_REGRESSORS) if flavor == "lightgbm"
                               else (XGBOOST_CLASSIFIERS, XGBOOST_REGRESSORS))
    if objective not in classifiers | regressors:
        raise ContractError(f"{flavor} model {type(model).__name__}: objective {objective!r} is not converted to "
                            f"ONNX; supported: classification {sorted(classifiers)}, regression "
                            f"{sorted(regressors)} (ranking and raw-margin models are refused)")
    return BoosterModel(flavor, model, objective in classifiers, objective)


def _tensor_type(dtype: str, n_features: int) -> Any:
    from onnxmltools.convert.common.data_types import DoubleTensorType, FloatTensorType

    if dtype not in ("FP32", "FP64"):
        raise ContractError(f"convert dtype={dtype!r}: must be one of ['FP32', 'FP64'] (example: FP32)")
    return (FloatTensorType if dtype == "FP32" else DoubleTensorType)([None, n_features])


def _without_feature_names(booster: BoosterModel) -> Any:
    """An XGBoost model onnxmltools can read: its converter only knows features ``f0..fN`` (or none)."""
    if booster.raw:
        raw = booster.model.copy()
        raw.feature_names, raw.feature_types = None, None
        return raw
    model = copy.deepcopy(booster.model)
    model.get_booster().feature_names = None
    model.get_booster().feature_types = None
    return model


def _batch_labels(onx: Any) -> Any:
    """One-dimensional outputs (``label``) get a batch dimension: onnxmltools' LightGBM graph says ``[1]``."""
    for output in onx.graph.output:
        dims = output.type.tensor_type.shape.dim
        if len(dims) == 1 and dims[0].HasField("dim_value"):
            dims[0].dim_param = "N"
    return onx


def convert_booster(booster: BoosterModel, n_features: int, *, dtype: str = "FP32") -> bytes:
    """The serialized ONNX graph of ``booster`` with one input ``input`` ``[-1, n_features]`` (see the docstring).

    Raises:
        ContractError: onnxmltools cannot convert it (named with onnxmltools' reason).
    """
    import onnxmltools

    initial_types = [(INPUT_NAME, _tensor_type(dtype, n_features))]
    name = f"modelops_{booster.flavor}_{booster.type_name}"
    try:
        if booster.flavor == "lightgbm":
            onx = onnxmltools.convert_lightgbm(booster.model, name=name, initial_types=initial_types, zipmap=False)
        else:  # XGBoost's converter adds no ZipMap: probabilities are already a tensor
            onx = onnxmltools.convert_xgboost(_without_feature_names(booster), name=name,
                                              initial_types=initial_types)
    except Exception as exc:  # onnxmltools raises many types (RuntimeError, ValueError, NotImplementedError, ...)
        raise ContractError(f"onnxmltools cannot convert the {booster.flavor} model {booster.type_name} "
                            f"(objective {booster.objective}): {type(exc).__name__}: {exc}") from exc
    data: bytes = _batch_labels(onx).SerializeToString()
    return data


def _xgboost_input(booster: BoosterModel, frame: Any) -> Any:
    """What the XGBoost model predicts on: the frame when it knows feature names, else the bare array."""
    raw = booster.model if booster.raw else booster.model.get_booster()
    data = frame if raw.feature_names is not None and hasattr(frame, "columns") else np.asarray(frame)
    if booster.raw:
        import xgboost

        return xgboost.DMatrix(data)
    return data


def booster_answers(booster: BoosterModel, frame: Any) -> np.ndarray[Any, Any]:
    """The model's own answers on ``frame``: probabilities ``[N, k]`` for a classifier, else predictions ``[N]``."""
    data = _xgboost_input(booster, frame) if booster.flavor == "xgboost" else frame
    model = booster.model
    if not booster.classifier:
        return np.asarray(model.predict(data), dtype=np.float64)
    if not booster.raw:
        return np.asarray(model.predict_proba(data), dtype=np.float64)
    answers = np.asarray(model.predict(data), dtype=np.float64)
    if answers.ndim == 1:  # a binary booster answers the positive class's probability
        answers = np.column_stack([1.0 - answers, answers])
    return answers


def check_booster_parity(booster: BoosterModel, onnx_model: bytes, frame: Any, *, dtype: str = "FP32",
                         tolerance: float | None = None) -> Parity:
    """The graph against the model's own answers on ``frame`` (the tolerances of ``check_parity``)."""
    results = run_graph(onnx_model, frame, dtype)
    want = booster_answers(booster, frame)
    if booster.classifier:
        if "probabilities" not in results:
            raise ContractError(f"ONNX graph of the {booster.flavor} model {booster.type_name} outputs "
                                f"{list(results)}: no 'probabilities'")
        return compare("probabilities", want, results["probabilities"], tolerance=tolerance)
    return compare("prediction", want, next(iter(results.values())), tolerance=tolerance)


ML_OPSET = 3
"""The newest ``ai.onnx.ml`` opset onnxmltools' tree converters write (skl2onnx's default is newer)."""


def sklearn_target_opset(model: Any) -> dict[str, int] | None:
    """skl2onnx's ``target_opset`` for ``model``: ``ai.onnx.ml`` capped when a LightGBM/XGBoost step is inside."""
    from skl2onnx import get_latest_tested_opset_version

    params = model.get_params(deep=True).values() if hasattr(model, "get_params") else ()
    if not any(booster_flavor(step) for step in params):
        return None
    return {"": get_latest_tested_opset_version(), "ai.onnx.ml": ML_OPSET}


def register_sklearn_converters() -> None:
    """Let skl2onnx convert LightGBM/XGBoost estimators inside a pipeline (skl2onnx's documented recipe).

    A library that is not installed is skipped: skl2onnx then refuses such a step by itself.
    """
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )

    options = {"nocl": [True, False], "zipmap": [True, False, "columns"]}
    try:
        from lightgbm import LGBMClassifier, LGBMRegressor
        from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm

        update_registered_converter(LGBMClassifier, "LightGbmLGBMClassifier",
                                    calculate_linear_classifier_output_shapes, convert_lightgbm, options=options)
        update_registered_converter(LGBMRegressor, "LightGbmLGBMRegressor",
                                    calculate_linear_regressor_output_shapes, convert_lightgbm)
    except ImportError:
        pass
    try:
        from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost
        from xgboost import XGBClassifier, XGBRegressor

        update_registered_converter(XGBClassifier, "XGBoostXGBClassifier",
                                    calculate_linear_classifier_output_shapes, convert_xgboost, options=options)
        update_registered_converter(XGBRegressor, "XGBoostXGBRegressor",
                                    calculate_linear_regressor_output_shapes, convert_xgboost)
    except ImportError:
        pass
