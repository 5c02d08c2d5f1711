"""Triton python-backend model: runs ``model.onnx`` of its version folder with onnxruntime, any signature.

Copied as ``<model>/<version>/model.py`` by modelops.serving.spec_files for a model published from
its model spec (``modelops.modelspec``) when the server has no onnxruntime backend
(``MODELOPS_TRITON_BACKEND=python``, the embedded stack). Unlike ``onnx_model.py`` (the reference
recommender's steps, FP32 only) it keeps every input's own dtype (FP32, FP64, INT32, INT64, BOOL,
BYTES) as the config declares it, takes any number of named inputs and answers every declared
output. One onnxruntime call per dynamic batch, split back per request.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

_NUMPY = {"TYPE_FP32": np.float32, "TYPE_FP64": np.float64, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
          "TYPE_BOOL": np.bool_, "TYPE_STRING": np.object_}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            os.path.join(folder, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [(t["name"], _NUMPY[t["data_type"]]) for t in config["input"]]
        self.outputs = [(t["name"], _NUMPY[t["data_type"]]) for t in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        if not self.batched:  # no batch dimension: each request is one call
            return [self._response(self._run([request]), slice(None)) for request in requests]
        results = self._run(requests)
        responses, offset = [], 0
        for request in requests:
            size = pb_utils.get_input_tensor_by_name(request, self.inputs[0][0]).as_numpy().shape[0]
            responses.append(self._response(results, slice(offset, offset + size)))
            offset += size
        return responses

    def _run(self, requests):
        feeds = {name: np.concatenate([pb_utils.get_input_tensor_by_name(r, name).as_numpy() for r in requests])
                 .astype(dtype, copy=False) for name, dtype in self.inputs}
        return self.session.run([name for name, _ in self.outputs], feeds)

    def _response(self, results, rows):
        tensors = [pb_utils.Tensor(name, np.ascontiguousarray(np.asarray(value[rows]).astype(dtype, copy=False)))
                   for (name, dtype), value in zip(self.outputs, results, strict=True)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
