"""Feature contributions by Shapley sampling over permutations, scored by the served model itself.

For one item with features ``x`` and the baseline ``b`` (the mean feature vector of the
loaded snapshot), a permutation ``p`` of the features gives a path of ``d + 1`` inputs
from ``b`` to ``x``: step 0 is ``b``, step ``j`` has the first ``j`` features of ``p``
switched to ``x``'s values. Feature ``p[j-1]``'s contribution along that path is
``f(step j) - f(step j-1)``; the contributions of one path telescope to
``f(x) - f(b)`` exactly, so their average over any number of permutations does too (up
to float32 rounding of the scores: :data:`ADDITIVITY_TOLERANCE`). The average over
random permutations is an unbiased estimate of the Shapley values; permutations come in
antithetic pairs (``p`` and its reverse), which halves the variance for additive parts.

The scores ``f`` are the served model's own (batched Triton calls on the version that
scored the request), so the method is faithful for any model behind the contract; the
gateway never re-implements a model. Pure numpy; the calls are the gateway's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ADDITIVITY_TOLERANCE = 1e-4
"""|baseline_score + sum(contributions) - score| stays below this (float32 scores, float64 sums)."""

Floats = npt.NDArray[np.float32]


def permutations(n_features: int, n_permutations: int, seed: int) -> npt.NDArray[np.int64]:
    """``n_permutations`` permutations of the feature indices: random ones, each followed by its reverse.

    Raises:
        ValueError: fewer than one permutation or feature.
    """
    if n_permutations < 1 or n_features < 1:
        raise ValueError(f"need at least one permutation and one feature, got {n_permutations}, {n_features}")
    rng = np.random.default_rng(seed)
    out = np.empty((n_permutations, n_features), dtype=np.int64)
    for k in range(n_permutations):
        out[k] = out[k - 1][::-1] if k % 2 else rng.permutation(n_features)
    return out


def ranks_of(perms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``[p, d]``: ``ranks[k, f]`` is feature ``f``'s position in permutation ``k`` (it switches at step rank + 1)."""
    p, d = perms.shape
    ranks = np.empty_like(perms)
    ranks[np.arange(p)[:, None], perms] = np.arange(d)[None, :]
    return ranks


def path_inputs(x: Floats, baseline: Floats, perms: npt.NDArray[np.int64], dtype: type = np.float32) -> Floats:
    """The inputs to score: ``[n_items * n_permutations * (d + 1), d]``, item-major, then permutation, then step.

    Args:
        x: ``[n_items, d]`` the items' features (NaN where unknown, as scored).
        baseline: ``[d]`` the reference input.
        perms: ``[n_permutations, d]``.
        dtype: the rows' dtype (the model's input tensor's; float32 for the recommender).
    """
    n, d = x.shape
    p = perms.shape[0]
    # switched[k, j, f]: is feature f switched to x's value at step j of permutation k
    switched = np.arange(d + 1)[None, :, None] > ranks_of(perms)[:, None, :]  # [p, d + 1, d]
    rows = np.where(switched[None, :, :, :], x[:, None, None, :], baseline[None, None, None, :])
    return np.ascontiguousarray(rows.reshape(n * p * (d + 1), d), dtype=dtype)


@dataclass(frozen=True)
class Contributions:
    """Per item: the model's score at the baseline and at ``x`` (on the paths) and each feature's contribution."""

    baseline_scores: npt.NDArray[np.float64]  # [n]
    path_scores: npt.NDArray[np.float64]  # [n] f(x) as scored on the paths
    values: npt.NDArray[np.float64]  # [n, d]


def contributions(scores: Floats, n_items: int, perms: npt.NDArray[np.int64]) -> Contributions:
    """Average per-feature score differences along the paths of :func:`path_inputs`.

    Raises:
        ValueError: ``scores`` does not have one score per path input.
    """
    p, d = perms.shape
    if scores.shape[0] != n_items * p * (d + 1):
        raise ValueError(f"{scores.shape[0]} scores for {n_items} items x {p} permutations x {d + 1} steps")
    s = scores.astype(np.float64).reshape(n_items, p, d + 1)
    steps = np.diff(s, axis=2)  # [n, p, d]: the change when feature perms[k, j] switched
    values = np.zeros((n_items, d), dtype=np.float64)
    for k in range(p):
        values[:, perms[k]] += steps[:, k, :]
    return Contributions(baseline_scores=s[:, :, 0].mean(axis=1), path_scores=s[:, :, d].mean(axis=1),
                         values=values / p)


def additivity_error(c: Contributions, scores: Floats) -> float:
    """The largest |baseline_score + sum(contributions) - score| over the items."""
    total = c.baseline_scores + c.values.sum(axis=1)
    return float(np.max(np.abs(total - scores.astype(np.float64)))) if len(total) else 0.0


@dataclass(frozen=True)
class Contribution:
    feature: str
    value: float  # the item's feature value (NaN when unknown)
    baseline: float
    contribution: float


def top_features(values: npt.NDArray[np.float64], x: Floats, baseline: Floats, names: Sequence[str],
                 k: int) -> list[Contribution]:
    """The ``k`` features with the largest |contribution| of one item, largest first (ties: feature order)."""
    order = np.lexsort((np.arange(len(values)), -np.abs(values)))[:k]
    return [Contribution(names[i], float(x[i]), float(baseline[i]), float(values[i])) for i in order]


def top_reason(top: Sequence[Contribution]) -> str:
    """One line naming the strongest feature, its value and the baseline's: ``f=0.82 (baseline 0.45)``."""
    if not top:
        return "no feature contributes"
    first = top[0]
    return f"{first.feature}={_short(first.value)} (baseline {_short(first.baseline)})"


def _short(value: float) -> str:
    return "missing" if math.isnan(value) else f"{value:.4g}"
