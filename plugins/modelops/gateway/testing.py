"""Test fixtures of the gateway that need no server: a tiny Triton model and small feature tables.

Used by the gateway tests, ``bench/gateway.py`` and ``bench/prometheus.py``.
The model is a python-backend Triton model with input ``features`` FP32 ``[n, 128]`` and
output ``score`` FP32 ``[n, 1]`` (the ensemble contract): a sigmoid of a fixed weighted
sum, different per version; the ``delay_s`` parameter makes it slow and ``flat`` makes it
answer 0.5 for everything (a collapsed model); ``focus`` (a feature index) makes the score
depend mostly on that one feature, through a steep sigmoid (explain's tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from modelops.modelspec.recommender import recommender_feature_names

MODEL_PY = '''
import json, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.delay_s = float(params.get("delay_s", "0"))
        self.flat = params.get("flat", "0") == "1"
        self.focus = int(params.get("focus", "-1"))
        j = np.arange(128)
        self.w = ((((j * 7 + self.version) % 11) - 5) / 25.0).astype(np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "features").as_numpy()
            z = np.nan_to_num(x, nan=0.0) @ self.w
            if self.focus >= 0:
                z = 8.0 * (np.nan_to_num(x[:, self.focus], nan=0.5) - 0.5) + 0.05 * z
            s = np.full_like(z, 0.5) if self.flat else 1.0 / (1.0 + np.exp(-z))
            if self.delay_s:
                time.sleep(self.delay_s)
            out = pb_utils.Tensor("score", s.reshape(-1, 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
version_policy: {{ all {{ }} }}
input [ {{ name: "features" data_type: TYPE_FP32 dims: [ -1, 128 ] }} ]
output [ {{ name: "score" data_type: TYPE_FP32 dims: [ -1, 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters: {{ key: "delay_s" value: {{ string_value: "{delay_s}" }} }}
parameters: {{ key: "flat" value: {{ string_value: "{flat}" }} }}
parameters: {{ key: "focus" value: {{ string_value: "{focus}" }} }}
'''


def write_test_model(repository: Path, name: str, versions: Sequence[int], *, delay_s: float = 0.0,
                     flat: bool = False, focus: int = -1) -> None:
    """A python-backend model ``name`` with the given versions in a Triton repository folder."""
    folder = repository / name
    for version in versions:
        (folder / str(version)).mkdir(parents=True, exist_ok=True)
        (folder / str(version) / "model.py").write_text(MODEL_PY)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, delay_s=delay_s, flat="1" if flat else "0",
                                                           focus=focus))


def feature_tables(seed: int = 7, n_users: int = 60, n_items: int = 120) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Small users/items tables with every feature of the recommender, values in [0, 1), a few NaN."""
    rng = np.random.default_rng(seed)
    names = list(recommender_feature_names())
    user_cols = [n for n in names if n.startswith("user_")]
    item_cols = [n for n in names if n.startswith("item_")]
    users = pd.DataFrame(rng.random((n_users, len(user_cols))), columns=user_cols)
    users.iloc[3, 5] = np.nan
    users.insert(0, "user_id", [f"u_{k:04d}" for k in range(n_users)])
    items = pd.DataFrame(rng.random((n_items, len(item_cols))), columns=item_cols)
    items.insert(0, "item_id", [f"i_{k:04d}" for k in range(n_items)])
    return users, items
