"""Triton python-backend pipeline NAME, version N: features -> NAME_preprocess vN -> NAME_model vN.

Copied as ``NAME/<N>/model.py`` by modelops.serving.builder. Version N calls version N of both
steps explicitly (BLS), so a stable and a canary version can be served side by side — a Triton
ensemble cannot do that, because its one config pins the step versions for all its versions.
Step names and tensor names come from the config's parameters. A failed step raises, so the
failure counts against this model too.
"""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.version = int(args["model_version"])
        self.steps = [
            (params["preprocess_model"], params["preprocess_input"], params["preprocess_output"]),
            (params["model_model"], params["model_input"], params["model_output"]),
        ]
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]

    def execute(self, requests):
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
