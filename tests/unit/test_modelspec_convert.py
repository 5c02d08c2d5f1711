"""sklearn → ONNX conversion and the parity check, on tiny real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from modelops.errors import ContractError
from modelops.modelspec.convert import (
    PROBABILITY_TOLERANCE,
    REGRESSION_TOLERANCE,
    check_parity,
    convert_sklearn,
    onnx_outputs,
    require_parity,
    spec_for_graph,
)
from modelops.modelspec.spec import Tensor
from tests.unit.modelspec_models import breast_cancer_frame


@pytest.fixture(scope="module")
def frame() -> tuple[Any, Any]:
    return breast_cancer_frame(rows=120)


def test_classifier_converts_with_a_probability_tensor_and_passes_parity(frame: tuple[Any, Any]) -> None:
    x, y = frame
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x, y)
    onnx_model = convert_sklearn(model, x.shape[1])
    assert onnx_outputs(onnx_model) == ["label", "probabilities"]
    parity = check_parity(model, onnx_model, x)
    assert parity.passed and parity.kind == "probabilities" and parity.rows == 120
    assert parity.max_abs_diff <= PROBABILITY_TOLERANCE == 1e-5
    assert require_parity(parity) is parity
    assert parity.describe().startswith("parity passed: probabilities over 120 rows")


def test_regressor_parity_in_double_precision(frame: tuple[Any, Any]) -> None:
    x, _ = frame
    x = x.iloc[:, :5]
    model = Ridge().fit(x, x.iloc[:, 0] * 2.0 + x.iloc[:, 1])
    onnx_model = convert_sklearn(model, 5, dtype="FP64")
    parity = check_parity(model, onnx_model, x, dtype="FP64")
    assert parity.passed and parity.kind == "prediction"
    assert parity.max_rel_diff <= REGRESSION_TOLERANCE == 1e-4


def test_a_failed_parity_is_reported_and_refused(frame: tuple[Any, Any]) -> None:
    x, y = frame
    # the graph of one model, checked against another: the check must fail, not pass quietly
    converted = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x, y)
    other = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, C=1e-3)).fit(x, y)
    parity = check_parity(other, convert_sklearn(converted, x.shape[1]), x)
    assert not parity.passed and parity.max_abs_diff > 0.01
    with pytest.raises(ContractError, match=r"does not match the model: parity FAILED: probabilities over 120 rows"):
        require_parity(parity)


def test_unconvertible_model_is_refused() -> None:
    with pytest.raises(ContractError, match=r"skl2onnx cannot convert object"):
        convert_sklearn(object(), 3)
    with pytest.raises(ContractError, match=r"dtype='INT8'"):
        convert_sklearn(Ridge(), 3, dtype="INT8")


def test_the_spec_takes_the_converted_graphs_tensors(tmp_path: Path) -> None:
    from modelops.modelspec import render
    from modelops.modelspec.derive import derive_spec
    from tests.unit.modelspec_models import save_sklearn_classifier

    model, x = save_sklearn_classifier(tmp_path / "clf")
    derived = derive_spec(tmp_path / "clf", "cancer")
    assert derived.inputs[0].dtype == "FP64"  # what the signature says
    onnx_model = convert_sklearn(model, x.shape[1], dtype="FP32")
    require_parity(check_parity(model, onnx_model, x))
    served = spec_for_graph(derived, onnx_model)
    assert served.inputs == (Tensor(name="input", dtype="FP32", shape=(-1, 30)),)
    assert served.outputs == (Tensor(name="probabilities", dtype="FP32", shape=(-1, 2)),)
    assert served.features == derived.features
    text = render.config_pbtxt(served)
    assert "data_type: TYPE_FP32\n    dims: [ 30 ]" in text and "dims: [ 2 ]" in text
