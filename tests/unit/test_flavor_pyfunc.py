"""The pyfunc path: the runner template's tensor ↔ DataFrame mapping, pyfunc models, the parity fallback.

The runner's functions are called as the platform calls them (the template imported as a module,
:func:`modelops.serving.flavor_pyfunc.runner`). The models are real MLflow models saved into a
temporary folder: a ``PythonModel`` logged from code (``mlflow.models.set_model``, MLflow's
recommended form: no pickled class), and a scikit-learn classifier whose ``predict_proba`` is
tempered (``softmax(decision / 2)``), which skl2onnx converts as a plain logistic regression once its
converter is registered: its graph misses the parity check in both precisions. No server here.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from modelops.errors import ContractError
from modelops.serving.flavor_pyfunc import runner
from modelops.serving.mlflow_models import prepare_model

SCORER_SOURCE = '''"""Two outputs from three columns, one with a space in its name."""
import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel


class Scorer(PythonModel):
    def predict(self, context, model_input, params=None):
        x = model_input
        return pd.DataFrame({"score": x["mean radius"] * 2 + x["mean texture"] - x["area"] / 100,
                             "flag": (x["mean radius"] > 15).astype("int64")})


mlflow.models.set_model(Scorer())
'''
TEMPERED_SOURCE = '''"""A logistic regression whose probabilities are tempered: softmax(decision / 2)."""
import numpy as np
from sklearn.linear_model import LogisticRegression


class TemperedLogistic(LogisticRegression):
    def predict_proba(self, X):
        d = self.decision_function(X) / 2.0
        d = np.column_stack([-d, d]) / 2.0 if d.ndim == 1 else d
        e = np.exp(d - d.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
'''


def scorer_frame(rows: int = 20) -> pd.DataFrame:
    """Columns of the cancer set's scale, as the scorer's input."""
    rng = np.random.default_rng(7)
    return pd.DataFrame({"mean radius": rng.uniform(6, 28, rows), "mean texture": rng.uniform(9, 40, rows),
                         "area": rng.uniform(140, 2500, rows)})


def log_scorer(tmp_dir: Path, *, requirements: list[str] | None = None, save_to: Path | None = None) -> Any:
    """Log (or save to ``save_to``) the scorer as a models-from-code pyfunc with a column signature."""
    import mlflow.pyfunc
    from mlflow.models import infer_signature

    code = tmp_dir / "scorer.py"
    code.write_text(SCORER_SOURCE)
    x = scorer_frame()
    y = pd.DataFrame({"score": x["mean radius"] * 2 + x["mean texture"] - x["area"] / 100,
                      "flag": (x["mean radius"] > 15).astype("int64")})
    options = {"python_model": str(code), "signature": infer_signature(x, y), "input_example": x,
               "pip_requirements": requirements or ["mlflow", "pandas"]}
    if save_to is not None:
        mlflow.pyfunc.save_model(str(save_to), **options)
        return save_to
    return mlflow.pyfunc.log_model(name="model", **options)


def tempered_module(tmp_dir: Path, name: str) -> ModuleType:
    """The tempered estimator's module, written to ``tmp_dir/<name>.py`` and imported (ship it as a code path)."""
    (tmp_dir / f"{name}.py").write_text(TEMPERED_SOURCE)
    sys.path.insert(0, str(tmp_dir))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_dir))


def test_the_runner_maps_tensors_to_the_signatures_columns_and_back() -> None:
    run = runner()
    spec = {"features": [{"name": "mean radius", "dtype": "FP64"}, {"name": "n", "dtype": "INT64"}],
            "inputs": [{"name": "input", "dtype": "FP64", "shape": [-1, 2]}]}
    frame = run.model_input(spec, {"input": np.array([[1.5, 2.0], [3.5, 4.0]])})
    assert list(frame.columns) == ["mean radius", "n"] and frame["n"].dtype == np.int64
    assert frame["mean radius"].tolist() == [1.5, 3.5]
    per_column = {"features": [{"name": "mean radius", "dtype": "FP32"}, {"name": "city", "dtype": "BYTES"}],
                  "inputs": [{"name": "mean_radius", "dtype": "FP32", "shape": [-1, 1]},
                             {"name": "city", "dtype": "BYTES", "shape": [-1, 1]}]}
    frame = run.model_input(per_column, {"mean_radius": np.array([[1.0], [2.0]], np.float32),
                                         "city": np.array([[b"Lyon"], [b"Graz"]], dtype=object)})
    assert frame.to_dict("list") == {"mean radius": [1.0, 2.0], "city": ["Lyon", "Graz"]}
    tensors = {"features": [], "inputs": [{"name": "x", "shape": [-1, 3]}, {"name": "ids", "shape": [-1, 1]}]}
    assert set(run.model_input(tensors, {"x": np.zeros((2, 3)), "ids": np.zeros((2, 1))})) == {"x", "ids"}
    outputs = [{"name": "score", "dtype": "FP64", "shape": [-1, 1]},
               {"name": "flag", "dtype": "INT64", "shape": [-1, 1]}]
    got = run.output_tensors(pd.DataFrame({"score": [0.5, 1.5], "flag": [1, 0]}), outputs, 2)
    assert [a.shape for a in got] == [(2, 1), (2, 1)] and got[1].dtype == np.int64
    one = [{"name": "probabilities", "dtype": "FP32", "shape": [-1, 2]}]
    assert run.output_tensors(np.array([[0.2, 0.8], [0.6, 0.4]]), one, 2)[0].dtype == np.float32
    assert run.output_tensors(pd.Series([1.0, 2.0]), [{"name": "prediction", "dtype": "FP64", "shape": [-1, 1]}],
                              2)[0].shape == (2, 1)
    with pytest.raises(ValueError, match=r"output probabilities \[-1, 2\] FP32: the model answered float64 of shape "
                                         r"\[3\] for 3 rows"):
        run.output_tensors(np.array([0.1, 0.2, 0.3]), one, 3)
    with pytest.raises(ValueError, match=r"outputs \['flag'\] missing from the model's answer"):
        run.output_tensors({"score": [1.0]}, outputs, 1)


def test_a_python_model_is_served_by_the_python_backend_with_its_answers(tmp_path: Path) -> None:
    import mlflow.pyfunc

    path = log_scorer(tmp_path, save_to=tmp_path / "scorer")
    prepared = prepare_model(path, "scorer")
    spec = prepared.spec
    assert (spec.flavor, prepared.served_as, spec.triton_backend, prepared.verified_by) == (
        "pyfunc", "pyfunc", "python", "model")
    assert [f.name for f in spec.features] == ["mean radius", "mean texture", "area"]
    assert [(t.name, t.dtype, t.shape) for t in spec.inputs] == [("input", "FP64", (-1, 3))]
    assert [(t.name, t.dtype) for t in spec.outputs] == [("score", "FP64"), ("flag", "INT64")]
    assert {"MLmodel", "scorer.py", "requirements.txt"} <= set(prepared.files) and prepared.graph == b""
    want = mlflow.pyfunc.load_model(str(path)).predict(scorer_frame())
    np.testing.assert_allclose(prepared.expected["score"].ravel(), want["score"], rtol=1e-12)
    np.testing.assert_array_equal(prepared.expected["flag"].ravel(), want["flag"])
    np.testing.assert_array_equal(prepared.sample["input"], scorer_frame().to_numpy())


def test_a_package_the_environment_lacks_is_refused_before_the_model_is_loaded(tmp_path: Path) -> None:
    path = log_scorer(tmp_path, requirements=["mlflow", "definitely-not-installed-pkg==1.0"],
                      save_to=tmp_path / "scorer")
    with pytest.raises(ContractError, match=r"(?s)^model scorer \(pyfunc\): the serving environment .*"
                                            r"definitely-not-installed-pkg==1.0: not installed"):
        prepare_model(path, "scorer")


def test_a_classifier_whose_graph_misses_parity_is_served_by_pyfunc_with_predict_proba(tmp_path: Path) -> None:
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from skl2onnx import update_registered_converter
    from skl2onnx.operator_converters.linear_classifier import convert_sklearn_linear_classifier
    from skl2onnx.shape_calculators.linear_classifier import calculate_linear_classifier_output_shapes
    from sklearn.datasets import load_breast_cancer

    module = tempered_module(tmp_path, "tempered_unit")
    data = load_breast_cancer(as_frame=True)
    x = data.data.iloc[:, :6]
    model = module.TemperedLogistic(max_iter=2000).fit(x, data.target)
    # converted as the plain logistic regression it derives from: a graph that answers otherwise
    update_registered_converter(module.TemperedLogistic, "TemperedLogistic", calculate_linear_classifier_output_shapes,
                                convert_sklearn_linear_classifier, options={"zipmap": [True, False, "columns"],
                                                                            "nocl": [True, False],
                                                                            "raw_scores": [True, False]})
    path = tmp_path / "tempered"
    mlflow.sklearn.save_model(model, str(path), serialization_format="cloudpickle", code_paths=[
        str(tmp_path / "tempered_unit.py")], signature=infer_signature(x, model.predict_proba(x)),
        input_example=x.iloc[:20], pip_requirements=["scikit-learn", "cloudpickle"])
    prepared = prepare_model(path, "tempered")
    assert (prepared.spec.flavor, prepared.served_as, prepared.spec.parameters) == (
        "pyfunc", "pyfunc", {"predict_fn": "predict_proba"})
    assert re.search(r"sklearn TemperedLogistic\): the ONNX conversion does not reproduce the model \(FP32: parity "
                     r"FAILED.*FP64: parity FAILED.*served by the python backend", prepared.notes[0])
    np.testing.assert_allclose(prepared.expected["probabilities"], model.predict_proba(x.iloc[:20]), rtol=1e-12)
    assert prepared.spec.outputs[0].shape == (-1, 2) and prepared.parity is None
