"""Triton python-backend model: runs the MLflow model shipped in its version folder, any flavor MLflow loads.

Copied as ``<model>/<version>/model.py`` by modelops.serving.spec_files for a version served as
``pyfunc`` (an MLflow ``python_function`` model, or a converted flavor whose ONNX graph failed its
parity check). The version folder holds the MLflow model directory as logged (``mlflow_model/``) and
the model spec (``model-spec.json``); ``initialize`` loads the model with ``mlflow.pyfunc.load_model``
(MLflow's own loading, its ``code/`` paths included) in the serving environment.

Tensors in, the model's input out (:func:`model_input`), the inverse of the gateway's column rule: a
model with column features gets a DataFrame with the spec's column names (spaces allowed) in order,
read from its one ``[n, k]`` input matrix, or from one ``[n, 1]`` tensor per column; a tensor model
gets its one array, or a mapping of input name to array. The prediction becomes the spec's outputs
(:func:`output_tensors`). The config's ``predict_fn`` parameter names another method than ``predict``
(``predict_proba`` for a classifier served in place of its ONNX graph), called on the model MLflow
loaded (``get_raw_model()``). One call per dynamic batch, split back per request.

The functions above the class are pure (numpy, pandas): the platform imports this file to compute
the answers it verifies Triton's against, and its unit tests call them directly.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton, for the pure functions
    pb_utils = None

MODEL_DIR = "mlflow_model"
SPEC_FILE = "model-spec.json"
NUMPY = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
         "BYTES": np.object_}


def _column(values, dtype):
    if dtype == "BYTES":
        return np.array([v.decode() if isinstance(v, bytes) else v for v in values], dtype=object)
    return np.asarray(values).astype(NUMPY[dtype], copy=False)


def model_input(spec, arrays):
    """Triton's input tensors (name → array, rows first) as the MLflow model's input (see the module docstring).

    Args:
        spec: the model spec as a mapping (``model-spec.json``): ``features``, ``inputs``.
        arrays: each input tensor of the spec by name.
    """
    features, inputs = spec.get("features") or [], spec["inputs"]
    if not features:
        if len(inputs) == 1:
            return arrays[inputs[0]["name"]]
        return {t["name"]: arrays[t["name"]] for t in inputs}
    if len(inputs) == 1 and inputs[0]["shape"][-1] == len(features):
        matrix = np.asarray(arrays[inputs[0]["name"]]).reshape(-1, len(features))
        columns = {f["name"]: _column(matrix[:, i], f["dtype"]) for i, f in enumerate(features)}
    elif len(inputs) == len(features):
        columns = {f["name"]: _column(np.asarray(arrays[t["name"]]).reshape(-1), f["dtype"])
                   for f, t in zip(features, inputs, strict=False)}
    else:
        raise ValueError(f"{len(features)} features but inputs {[t['name'] for t in inputs]}: expected one "
                         f"[n, {len(features)}] input or one [n, 1] input per feature")
    return pd.DataFrame(columns)


def tensor_name(column):
    """An output column's tensor name, as the spec derives it (``modelops.modelspec.derive``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(column))
    return name if re.match(r"^[A-Za-z_]", name) else f"_{name}"


def _shaped(values, output, rows):
    name, shape = output["name"], list(output["shape"])
    array = np.asarray(values)
    target = [rows, *shape[1:]] if shape and shape[0] == -1 else shape
    try:
        if target.count(-1) <= 1:
            array = array.reshape(target)
        elif array.ndim != len(target) or array.shape[0] != rows:
            raise ValueError
        if output["dtype"] == "BYTES":
            return np.array([v.encode() if isinstance(v, str) else v for v in array.ravel()],
                            dtype=object).reshape(array.shape)
        return np.ascontiguousarray(array.astype(NUMPY[output["dtype"]]))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"output {name} {shape} {output['dtype']}: the model answered {array.dtype} of shape "
                         f"{list(array.shape)} for {rows} rows ({exc or 'does not fit'})") from None


def output_tensors(prediction, outputs, rows):
    """The model's prediction as the spec's output tensors, in the spec's order.

    A mapping or DataFrame is read by output name (a DataFrame's columns by their tensor names); with
    one output, an array, a Series, a list or a DataFrame of other columns is that output.

    Raises:
        ValueError: an output is missing, or the answer does not fit its shape or dtype (named).
    """
    if isinstance(prediction, pd.DataFrame):
        by_name = {tensor_name(c): prediction[c].to_numpy() for c in prediction.columns}
        if len(outputs) == 1 and outputs[0]["name"] not in by_name:
            return [_shaped(prediction.to_numpy(), outputs[0], rows)]
    elif isinstance(prediction, dict):
        by_name = {tensor_name(k): v for k, v in prediction.items()}
    elif len(outputs) == 1:
        values = prediction.to_numpy() if isinstance(prediction, pd.Series) else prediction
        return [_shaped(values, outputs[0], rows)]
    else:
        raise ValueError(f"the model answered {type(prediction).__name__}; {len(outputs)} outputs "
                         f"{[o['name'] for o in outputs]} need a mapping or DataFrame with those names")
    missing = [o["name"] for o in outputs if o["name"] not in by_name]
    if missing:
        raise ValueError(f"outputs {missing} missing from the model's answer (it has {sorted(by_name)})")
    return [_shaped(by_name[o["name"]], o, rows) for o in outputs]


def predictor(model, predict_fn):
    """The callable answering for ``model`` (a loaded ``PyFuncModel``): ``predict``, or ``predict_fn`` of the
    model MLflow loaded (``get_raw_model()``)."""
    if not predict_fn or predict_fn == "predict":
        return model.predict
    return getattr(model.get_raw_model(), predict_fn)


class TritonPythonModel:
    def initialize(self, args):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # the serving process calls nobody
        import mlflow.pyfunc

        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, SPEC_FILE)) as f:
            self.spec = json.load(f)
        self.model = mlflow.pyfunc.load_model(os.path.join(folder, MODEL_DIR))
        parameters = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        self.predict = predictor(self.model, parameters.get("predict_fn"))
        self.inputs = [t["name"] for t in config["input"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        if not self.batched:  # no batch dimension: each request is one call
            return [self._responses([request])[0] for request in requests]
        return self._responses(requests)

    def _responses(self, requests):
        got = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.inputs}
               for r in requests]
        sizes = [g[self.inputs[0]].shape[0] for g in got]
        arrays = {name: np.concatenate([g[name] for g in got]) for name in self.inputs}
        rows = sum(sizes)
        outputs = output_tensors(self.predict(model_input(self.spec, arrays)), self.spec["outputs"], rows)
        responses, offset = [], 0
        for size in sizes:
            tensors = [pb_utils.Tensor(o["name"], value[offset:offset + size] if self.batched else value)
                       for o, value in zip(self.spec["outputs"], outputs, strict=False)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            offset += size
        return responses
