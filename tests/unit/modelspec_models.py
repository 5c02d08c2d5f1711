"""Real MLflow models saved to local directories, for the modelspec tests (no tracking server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# skops or pickle, either way MLflow infers pip requirements in a subprocess unless told them: say them.
_REQUIREMENTS = ["scikit-learn"]


def breast_cancer_frame(rows: int = 120) -> tuple[Any, Any]:
    """30 double columns whose names hold spaces ("mean radius"), a binary target."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(as_frame=True, return_X_y=True)
    return x.iloc[:rows], y.iloc[:rows]


def save_sklearn_classifier(path: Path) -> tuple[Any, Any]:
    """A LogisticRegression logged with ``infer_signature(X, predict_proba(X))`` and an input example."""
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = breast_cancer_frame()
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x, y)
    mlflow.sklearn.save_model(model, str(path), signature=infer_signature(x, model.predict_proba(x)),
                              input_example=x.iloc[:3], pip_requirements=_REQUIREMENTS,
                              serialization_format="pickle")
    return model, x


def save_sklearn_regressor(path: Path) -> tuple[Any, Any]:
    """A Ridge regressor on a small frame, logged with ``infer_signature(X, predict(X))``."""
    import mlflow.sklearn
    from mlflow.models import infer_signature
    from sklearn.linear_model import Ridge

    x, _ = breast_cancer_frame()
    x = x.iloc[:, :5]
    target = x.iloc[:, 0] * 2.0 + x.iloc[:, 1]
    model = Ridge().fit(x, target)
    mlflow.sklearn.save_model(model, str(path), signature=infer_signature(x, model.predict(x)),
                              pip_requirements=_REQUIREMENTS, serialization_format="pickle")
    return model, x


def two_input_onnx() -> Any:
    """An ONNX graph: ``dense`` FP32 [N, 8] and ``bucket`` INT64 [N, 1] → ``score`` FP32 [N, 1], ``bucket_out``."""
    from onnx import TensorProto, helper

    weights = helper.make_tensor("w", TensorProto.FLOAT, [8, 1], np.linspace(0.1, 0.8, 8).tolist())
    nodes = [
        helper.make_node("MatMul", ["dense", "w"], ["mm"]),
        helper.make_node("Cast", ["bucket"], ["bucket_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["mm", "bucket_f"], ["score"]),
        helper.make_node("Identity", ["bucket"], ["bucket_out"]),
    ]
    graph = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("bucket", TensorProto.INT64, ["N", 1])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N", 1]),
         helper.make_tensor_value_info("bucket_out", TensorProto.INT64, ["N", 1])],
        initializer=[weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save_onnx_two_inputs(path: Path, *, signature: bool = True) -> None:
    """:func:`two_input_onnx` saved with ``mlflow.onnx.save_model`` (tensor signature unless told not to)."""
    import mlflow.onnx
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    sig = None
    if signature:
        sig = ModelSignature(
            inputs=Schema([TensorSpec(np.dtype("float32"), (-1, 8), "dense"),
                           TensorSpec(np.dtype("int64"), (-1, 1), "bucket")]),
            outputs=Schema([TensorSpec(np.dtype("float32"), (-1, 1), "score"),
                            TensorSpec(np.dtype("int64"), (-1, 1), "bucket_out")]),
        )
    mlflow.onnx.save_model(two_input_onnx(), str(path), signature=sig, pip_requirements=["onnx"])
