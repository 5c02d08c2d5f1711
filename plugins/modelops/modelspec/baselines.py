"""The explain baseline of a model served from its spec: one reference value per feature column (pure).

``explain=true`` measures each feature's contribution along paths from the baseline row to the
request's row (:mod:`modelops.gateway.explain.shapley`). The recommender's baseline is the mean row of the
loaded feature snapshot; a model published from its spec carries its own in the spec, one
``baseline`` per feature: the value the user declared (``modelops.yaml`` / tags), else the mean of
the evaluation sample it was published with (:func:`with_baselines`, at publish, so the baseline is
part of the version's identity and never changes under a served version).

Only a model whose features are the columns of one input tensor ``[-1, k]`` is explained this way
(:func:`feature_matrix`); a model with one tensor per column or raw tensors is not (the gateway says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from modelops.modelspec.spec import ModelSpec, Tensor


def feature_matrix(spec: ModelSpec) -> Tensor | None:
    """The one input tensor that carries every feature as a column, or None."""
    if len(spec.inputs) != 1 or not spec.features:
        return None
    tensor = spec.inputs[0]
    numeric = tensor.dtype in ("FP32", "FP64", "INT32", "INT64")
    return tensor if numeric and tensor.shape[-1] == len(spec.features) else None


def baseline_row(spec: ModelSpec) -> np.ndarray[Any, Any] | None:
    """The features' baselines as one float64 row, or None when a feature has none."""
    values = [f.baseline for f in spec.features]
    if not values or any(v is None for v in values):
        return None
    return np.array(values, dtype=np.float64)


def with_baselines(spec: ModelSpec, sample: Mapping[str, np.ndarray[Any, Any]]) -> ModelSpec:
    """``spec`` with each undeclared feature baseline set to its column mean over ``sample`` (NaNs ignored).

    A spec without a feature matrix, or a sample without that tensor, is returned as it is; a column
    with no value at all keeps no baseline.
    """
    tensor = feature_matrix(spec)
    matrix = None if tensor is None else sample.get(tensor.name)
    if matrix is None or matrix.ndim != 2 or matrix.shape[1] != len(spec.features) or not matrix.shape[0]:
        return spec
    values = np.asarray(matrix, dtype=np.float64)
    counts = np.sum(~np.isnan(values), axis=0)
    means = np.where(counts > 0, np.nansum(values, axis=0) / np.maximum(counts, 1), np.nan)
    features = tuple(f if f.baseline is not None or np.isnan(m) else msgspec.structs.replace(f, baseline=float(m))
                     for f, m in zip(spec.features, means, strict=True))
    return msgspec.structs.replace(spec, features=features)
