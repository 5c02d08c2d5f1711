"""Triton python-backend model: runs ``model.onnx`` of its version folder with onnxruntime.

Copied as ``<model>/<version>/model.py`` by modelops.serving.builder for the preprocess and
model steps when ``MODELOPS_TRITON_BACKEND=python``. Triton's python stub imports onnxruntime
from the stack's environment. ``variant.json`` beside ``model.onnx`` (optional) changes the
behaviour, for canary demonstrations:

- ``{"variant": "faulty-errors", "error_rate": 0.05}``: ``execute()`` raises for that share of
  batches (each request of a failed batch fails; only exceptions count as Triton failures).
- ``{"variant": "slow", "slowdown": 3.0}``: sleeps so each batch takes ``slowdown`` times as long
  (at least ``base_ms``, default 2 ms, is used as the base, since the model itself takes µs).
- ``{"variant": "permuted"}``: each request's output rows are returned in reverse order (the item
  scores of a ranked request swapped around): the same errors, latency and score spread as ``good``,
  answers that differ per item, as a model fed its inputs in the wrong order would give (a
  *silently different* model: only comparing its answers with the stable's on the same requests
  tells it).
- ``good`` / ``collapsed``: nothing to do (a collapsed model already outputs a constant).
"""

from __future__ import annotations

import json
import os
import random
import time

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


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
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]
        variant_path = os.path.join(folder, "variant.json")
        self.variant = {"variant": "good"}
        if os.path.exists(variant_path):
            with open(variant_path) as handle:
                self.variant = json.load(handle)
        self.kind = str(self.variant.get("variant", "good"))
        self.error_rate = float(self.variant.get("error_rate", 0.0))
        self.slowdown = float(self.variant.get("slowdown", 1.0))
        self.base_s = float(self.variant.get("base_ms", 2.0)) / 1000.0
        self.rng = random.Random()

    def execute(self, requests):
        started = time.perf_counter()
        if self.kind == "faulty-errors" and self.rng.random() < self.error_rate:
            raise pb_utils.TritonModelException(
                f"variant faulty-errors: injected failure (rate {self.error_rate})"
            )
        # One onnxruntime call for the whole dynamic batch, split back per request.
        arrays = {name: [] for name in self.input_names}
        sizes = []
        for request in requests:
            for name in self.input_names:
                arrays[name].append(pb_utils.get_input_tensor_by_name(request, name).as_numpy())
            sizes.append(arrays[self.input_names[0]][-1].shape[0])
        feeds = {name: np.concatenate(parts).astype(np.float32, copy=False) for name, parts in arrays.items()}
        results = self.session.run(self.output_names, feeds)
        responses = []
        offset = 0
        for size in sizes:
            rows = slice(offset + size - 1, offset - 1 if offset else None, -1) if self.kind == "permuted" \
                else slice(offset, offset + size)
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(value[rows]))
                for name, value in zip(self.output_names, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            offset += size
        if self.kind == "slow" and self.slowdown > 1.0:
            elapsed = max(time.perf_counter() - started, self.base_s)
            time.sleep(elapsed * (self.slowdown - 1.0))
        return responses
