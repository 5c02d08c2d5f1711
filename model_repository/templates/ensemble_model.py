"""Triton python-backend pipeline NAME, version N: features -> NAME_preprocess vN -> NAME_model vN.

Copied as ``NAME/<N>/model.py`` by modelops.serving.builder. Version N calls version N of both
steps explicitly (BLS), so a stable and a canary version can be served side by side — a Triton
ensemble cannot do that, because its one config pins the step versions for all its versions.
Step names and tensor names come from the config's parameters. A failed step raises, so the
failure counts against this model too.

``explain=true`` (the gateway's Shapley sampling) sends the items with two optional inputs:
``explain_baseline`` (the baseline, repeated per item) and ``explain_ranks`` (the permutations as
ranks, ``[p * d]`` per item: feature ``f`` switches from the baseline to the item's value at step
``ranks[k, f] + 1`` of path ``k``). Such a request is answered with ``path_score``: per item the
``p * (d + 1)`` scores of its paths (the layout of ``modelops.gateway.explain.shapley.path_inputs``). The
path rows (5,160 x 128 floats for 20 items) never cross HTTP or shared memory: they are built here
and run through this version's own step files, ``preprocess.onnx`` and ``model.onnx`` (byte copies
of the steps' ``model.onnx``, written beside this file by the builder), with onnxruntime as the
steps run them. Without those files (a version published before, or one whose model step carries
a ``variant.json`` that these copies would not honour) such a request fails with "no in-model
explanation", and the gateway scores the paths through the pipeline instead.
"""

from __future__ import annotations

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

EXPLAIN_INPUTS = ("explain_baseline", "explain_ranks")


def path_rows(x, baseline, ranks):
    """``[n * p * (d + 1), d]`` float32: row (i, k, j) is ``x[i]`` where ``ranks[k] < j``, else the baseline."""
    n, d = x.shape
    p = ranks.shape[0]
    switched = np.arange(d + 1)[None, :, None] > ranks[:, None, :]  # [p, d + 1, d]
    rows = np.where(switched[None, :, :, :], x[:, None, None, :], baseline[None, None, None, :])
    return np.ascontiguousarray(rows.reshape(n * p * (d + 1), d), dtype=np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.version = int(args["model_version"])
        self.folder = os.path.join(args["model_repository"], args["model_version"])
        self.steps = [
            (params["preprocess_model"], params["preprocess_input"], params["preprocess_output"]),
            (params["model_model"], params["model_input"], params["model_output"]),
        ]
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.sessions = None  # the step files for explanations, opened on the first one

    def execute(self, requests):
        explain = [any(pb_utils.get_input_tensor_by_name(r, n) is not None for n in EXPLAIN_INPUTS)
                   for r in requests]
        plain = [r for r, e in zip(requests, explain, strict=True) if not e]
        scored = iter(self._score(plain) if plain else [])
        return [self._explain(r) if e else next(scored) for r, e in zip(requests, explain, strict=True)]

    def _score(self, requests):
        parts = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        sizes = [p.shape[0] for p in parts]
        value = np.concatenate(parts)
        for model_name, input_name, output_name in self.steps:
            step = pb_utils.InferenceRequest(
                model_name=model_name,
                model_version=self.version,
                requested_output_names=[output_name],
                inputs=[pb_utils.Tensor(input_name, value)],
            )
            response = step.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(
                    f"{model_name} version {self.version}: {response.error().message()}"
                )
            value = pb_utils.get_output_tensor_by_name(response, output_name).as_numpy()
        responses = []
        offset = 0
        for size in sizes:
            out = pb_utils.Tensor(self.output_name, np.ascontiguousarray(value[offset:offset + size]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            offset += size
        return responses

    def _explain(self, request):
        try:
            x = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            found = [pb_utils.get_input_tensor_by_name(request, n) for n in EXPLAIN_INPUTS]
            if any(t is None for t in found):
                raise ValueError(f"an explanation needs both inputs {list(EXPLAIN_INPUTS)}")
            baseline, ranks = (t.as_numpy() for t in found)
            n, d = x.shape
            if baseline.shape != (n, d) or ranks.ndim != 2 or ranks.shape[0] != n or ranks.shape[1] % d:
                raise ValueError(f"shapes {self.input_name} {x.shape}, explain_baseline {baseline.shape}, "
                                 f"explain_ranks {ranks.shape}: need [n, d], [n, d], [n, p * d]")
            value = path_rows(x, baseline[0], ranks[0].reshape(-1, d).astype(np.int64))
            for (_, input_name, output_name), session in zip(self.steps, self._sessions(), strict=True):
                value = session.run([output_name], {input_name: value})[0]
            scores = np.ascontiguousarray(value.reshape(n, -1), dtype=np.float32)
            return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("path_score", scores)])
        except (OSError, ValueError, ImportError, RuntimeError) as exc:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(f"version {self.version}: no in-model explanation: {exc}"))

    def _sessions(self):
        if self.sessions is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            self.sessions = [
                ort.InferenceSession(os.path.join(self.folder, f), options, providers=["CPUExecutionProvider"])
                for f in ("preprocess.onnx", "model.onnx")
            ]
        return self.sessions
