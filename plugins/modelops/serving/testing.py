"""Tiny ONNX artifacts with the serving contract's tensor names, for tests and benchmarks.

``preprocess.onnx``: ``features`` float32 [-1, 128] → ``scaled`` float32 [-1, 128]
(impute with the mean, standard-scale); ``model.onnx``: ``scaled`` → ``score`` float32
[-1, 1] (a linear model). Different seeds give different weights, hence different sha256.
The reference model of ``modelops.example`` replaces these outside tests.
"""

from __future__ import annotations

import json
from typing import Any

from modelops.serving.builder import Artifacts

N_FEATURES = 128


def fixture_artifacts(seed: int, *, variant: dict[str, Any] | None = None, n_rows: int = 256) -> Artifacts:
    """Train and convert the two tiny models.

    Args:
        seed: random seed of the training data (distinct seeds → distinct files).
        variant: written as ``variant.json`` when given (e.g. ``{"variant": "slow", "slowdown": 3.0}``).
        n_rows: training rows.
    """
    import numpy as np
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, N_FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=N_FEATURES)).astype(np.float32)
    prep = Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]).fit(x)
    model = Ridge().fit(prep.transform(x), y)
    prep_onnx = convert_sklearn(
        prep,
        initial_types=[("features", FloatTensorType([None, N_FEATURES]))],
        final_types=[("scaled", FloatTensorType([None, N_FEATURES]))],
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    model_onnx = convert_sklearn(
        model,
        initial_types=[("scaled", FloatTensorType([None, N_FEATURES]))],
        final_types=[("score", FloatTensorType([None, 1]))],
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    return Artifacts(
        prep_onnx.SerializeToString(),
        model_onnx.SerializeToString(),
        None if variant is None else json.dumps(variant, sort_keys=True).encode(),
    )


def broken_artifacts(seed: int) -> Artifacts:
    """Artifacts whose ``model.onnx`` is not a valid ONNX file (loading it must fail)."""
    good = fixture_artifacts(seed)
    return Artifacts(good.preprocess_onnx, b"not an onnx model " + str(seed).encode(), None)
