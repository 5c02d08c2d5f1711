"""LightGBM and XGBoost models, saved with MLflow's own functions, converted with onnxmltools and parity-checked.

Small real models (30 trees on diabetes, 442 rows, or breast cancer, 569 rows; columns with spaces), saved
with ``mlflow.lightgbm.save_model`` / ``mlflow.xgboost.save_model`` into a temporary folder: no server.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from modelops.errors import ContractError
from modelops.modelspec import convert
from modelops.modelspec.convert import PROBABILITY_TOLERANCE, REGRESSION_TOLERANCE
from modelops.modelspec.convert_boosters import convert_booster, describe_booster
from modelops.serving.mlflow_models import prepare_model

TREES = 30


@pytest.fixture(scope="module")
def cancer() -> tuple[pd.DataFrame, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    return data.data, data.target.to_numpy()


@pytest.fixture(scope="module")
def diabetes() -> tuple[pd.DataFrame, np.ndarray]:
    from sklearn.datasets import load_diabetes

    data = load_diabetes(as_frame=True)
    frame = data.data.rename(columns=lambda c: f"{c} value")  # columns with spaces, like the cancer set's
    return frame, data.target.to_numpy()


def _save(flavor: str, model: Any, path: Path, x: pd.DataFrame, answers: Any) -> Path:
    import mlflow.lightgbm
    import mlflow.xgboost
    from mlflow.models import infer_signature

    save = mlflow.lightgbm.save_model if flavor == "lightgbm" else mlflow.xgboost.save_model
    # pip_requirements: MLflow infers them in a subprocess otherwise (seconds per model)
    save(model, str(path), signature=infer_signature(x, answers), input_example=x.iloc[:20],
         pip_requirements=[flavor])
    return path


def _lgbm(classifier: bool, x: pd.DataFrame, y: np.ndarray) -> Any:
    import lightgbm as lgb

    cls = lgb.LGBMClassifier if classifier else lgb.LGBMRegressor
    return cls(n_estimators=TREES, num_leaves=8, verbose=-1).fit(x, y)


def _xgb(classifier: bool, x: pd.DataFrame, y: np.ndarray) -> Any:
    import xgboost as xgb

    cls = xgb.XGBClassifier if classifier else xgb.XGBRegressor
    return cls(n_estimators=TREES, max_depth=3, n_jobs=1).fit(x, y)


@pytest.mark.parametrize("flavor", ["lightgbm", "xgboost"])
def test_a_booster_classifier_is_converted_and_parity_checked_against_its_own_probabilities(
    tmp_path: Path, cancer: tuple[pd.DataFrame, np.ndarray], flavor: str,
) -> None:
    x, y = cancer
    model = (_lgbm if flavor == "lightgbm" else _xgb)(True, x, y)
    prepared = prepare_model(_save(flavor, model, tmp_path / "m", x, model.predict_proba(x)), "cancer")
    spec = prepared.spec
    assert spec.flavor == flavor and [f.name for f in spec.features][:2] == ["mean radius", "mean texture"]
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("input", "FP32", (-1, 30))]
    assert [(t.name, t.shape) for t in spec.outputs] == [("probabilities", (-1, 2))]
    assert prepared.parity is not None and prepared.parity.passed and prepared.parity.kind == "probabilities"
    assert prepared.parity.max_abs_diff <= PROBABILITY_TOLERANCE and prepared.sample_rows == 20
    assert prepared.sample["input"].shape == (20, 30)
    np.testing.assert_allclose(prepared.expected["probabilities"], model.predict_proba(x.iloc[:20]), rtol=1e-6)


@pytest.mark.parametrize("flavor", ["lightgbm", "xgboost"])
def test_a_booster_regressor_is_converted_and_parity_checked_against_its_own_predictions(
    tmp_path: Path, diabetes: tuple[pd.DataFrame, np.ndarray], flavor: str,
) -> None:
    x, y = diabetes
    model = (_lgbm if flavor == "lightgbm" else _xgb)(False, x, y)
    prepared = prepare_model(_save(flavor, model, tmp_path / "m", x, model.predict(x)), "diabetes")
    spec = prepared.spec
    assert spec.flavor == flavor and [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("input", "FP32",
                                                                                          (-1, 10))]
    assert [(t.name, t.shape) for t in spec.outputs] == [("variable", (-1, 1))]
    assert prepared.parity is not None and prepared.parity.passed and prepared.parity.kind == "prediction"
    assert prepared.parity.max_rel_diff <= REGRESSION_TOLERANCE
    np.testing.assert_allclose(prepared.expected["variable"].ravel(), model.predict(x.iloc[:20]), rtol=1e-6)


def test_raw_boosters_from_train_are_classified_by_their_objective(
    tmp_path: Path, cancer: tuple[pd.DataFrame, np.ndarray],
) -> None:
    """``mlflow.<flavor>.load_model`` gives a ``Booster`` for ``lgb.train`` / ``xgb.train`` models."""
    import lightgbm as lgb
    import xgboost as xgb

    x, y = cancer
    lgb_booster = lgb.train({"objective": "binary", "num_leaves": 8, "verbose": -1}, lgb.Dataset(x, y), TREES)
    xgb_booster = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(x, y), TREES)
    positive = {"lightgbm": lgb_booster.predict(x), "xgboost": xgb_booster.predict(xgb.DMatrix(x))}
    for flavor, booster in (("lightgbm", lgb_booster), ("xgboost", xgb_booster)):
        answers = np.column_stack([1 - positive[flavor], positive[flavor]])
        prepared = prepare_model(_save(flavor, booster, tmp_path / flavor, x, answers), f"raw_{flavor}")
        assert prepared.spec.flavor == flavor and prepared.parity is not None and prepared.parity.passed
        assert [(t.name, t.shape) for t in prepared.spec.outputs] == [("probabilities", (-1, 2))]
        np.testing.assert_allclose(prepared.expected["probabilities"][:, 1], positive[flavor][:20], rtol=1e-6)


def test_the_same_booster_converts_to_the_same_bytes(cancer: tuple[pd.DataFrame, np.ndarray]) -> None:
    """onnxmltools names graphs with a random uuid: publishing one version twice must give one Triton version."""
    x, y = cancer
    for flavor, model in (("lightgbm", _lgbm(True, x, y)), ("xgboost", _xgb(True, x, y))):
        booster = describe_booster(flavor, model)
        assert convert_booster(booster, 30) == convert_booster(booster, 30)


def test_a_ranking_booster_is_refused_naming_its_objective(
    tmp_path: Path, diabetes: tuple[pd.DataFrame, np.ndarray],
) -> None:
    import lightgbm as lgb

    x, y = diabetes
    ranker = lgb.train({"objective": "lambdarank", "verbose": -1}, lgb.Dataset(x, (y > 150).astype(int),
                                                                               group=[len(x)]), 5)
    path = _save("lightgbm", ranker, tmp_path / "rank", x, ranker.predict(x))
    with pytest.raises(ContractError, match=r"lightgbm model Booster: objective 'lambdarank' is not converted to "
                                            r"ONNX; supported: classification \['binary'"):
        prepare_model(path, "ranker")


def test_a_booster_that_misses_the_tolerance_in_both_precisions_is_served_by_pyfunc_or_else_refused(
    tmp_path: Path, diabetes: tuple[pd.DataFrame, np.ndarray], monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y = diabetes
    model = _lgbm(False, x, y)
    path = _save("lightgbm", model, tmp_path / "m", x, model.predict(x))
    monkeypatch.setattr(convert, "REGRESSION_TOLERANCE", 1e-15)  # LightGBM's graph answers in float32
    prepared = prepare_model(path, "diabetes")
    assert (prepared.spec.flavor, prepared.served_as, prepared.graph, prepared.spec.parameters) == (
        "pyfunc", "pyfunc", b"", {})  # a regressor: the runner calls predict
    assert re.search(r"model diabetes \(lightgbm LGBMRegressor, objective regression\): the ONNX conversion does not "
                     r"reproduce the model \(FP32: parity FAILED.*FP64: parity FAILED.*served by the python backend "
                     r"running the MLflow model instead", prepared.notes[0])
    np.testing.assert_allclose(prepared.expected["prediction"].ravel(), model.predict(x.iloc[:20]), rtol=1e-12)
    assert "MLmodel" in prepared.files and prepared.sample["input"].shape == (20, 10)
    # when the pyfunc path cannot serve it either (a requirement the serving environment lacks): refused
    (path / "requirements.txt").write_text("lightgbm\ndefinitely-not-installed-pkg==1.0\n")
    with pytest.raises(ContractError, match=r"(?s)FP64: parity FAILED.*and the pyfunc path refuses it too: .*"
                                            r"definitely-not-installed-pkg==1.0: not installed.*it is refused rather "
                                            r"than served wrong"):
        prepare_model(path, "diabetes")


def test_an_lgbm_estimator_logged_with_the_sklearn_flavor_alone_or_in_a_pipeline_is_converted(
    tmp_path: Path, cancer: tuple[pd.DataFrame, np.ndarray],
) -> None:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = cancer
    bare = _lgbm(True, x, y)
    pipeline = make_pipeline(StandardScaler(), _lgbm(True, x, y)).fit(x, y)
    trusted = ["collections.OrderedDict", "lightgbm.basic.Booster", "lightgbm.sklearn.LGBMClassifier"]
    for label, model in (("bare", bare), ("pipeline", pipeline)):
        path = tmp_path / label
        mlflow.sklearn.save_model(model, str(path), signature=infer_signature(x, model.predict_proba(x)),
                                  input_example=x.iloc[:20], pip_requirements=["scikit-learn", "lightgbm"],
                                  skops_trusted_types=trusted)
        prepared = prepare_model(path, f"sk_{label}")
        assert prepared.spec.flavor == "sklearn" and prepared.parity is not None and prepared.parity.passed
        assert [(t.name, t.shape) for t in prepared.spec.outputs] == [("probabilities", (-1, 2))]
