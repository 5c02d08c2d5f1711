"""``explain=true`` for a model served from its spec: Shapley sampling over its own feature columns.

The method is the recommender's (:mod:`modelops.gateway.explain.shapley`): paths from the spec's baseline
row (:mod:`modelops.modelspec.baselines`) to each request row, one feature switched per step, every
path row scored by the Triton version that scored the request, in calls of at most its
``max_batch_size`` rows. The contributions of a row add up to its score minus the baseline's score
(the additivity check, :data:`~modelops.gateway.explain.shapley.ADDITIVITY_TOLERANCE`); a miss is a 502,
never a wrong explanation.

What is explained: the model's first output. A ``[n, k]`` output with ``k > 1`` (a classifier's
probabilities) is explained for each row's highest column, its predicted class (named ``class``
in the answer, its column index); a ``[n, 1]`` output (a regressor's prediction) for that column.
A model whose features are not one input matrix (one tensor per column, raw tensors), or whose spec
has no baseline (published before baselines were recorded), is refused with a 400 that says why.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.explain.shapley import (
    ADDITIVITY_TOLERANCE,
    additivity_error,
    contributions,
    path_inputs,
    permutations,
    top_features,
    top_reason,
)
from modelops.gateway.protocol.forms import EdgeModel
from modelops.gateway.triton.inference import TritonFailed
from modelops.modelspec.baselines import baseline_row, feature_matrix

Array = npt.NDArray[Any]


def explain_problem(model: EdgeModel) -> str | None:
    """Why ``model`` cannot be explained (None: it can)."""
    spec = model.spec
    if feature_matrix(spec) is None:
        return (f"model {spec.name}: explain=true needs the features as the columns of one numeric input "
                f"tensor [-1, k]; this model takes {[t.name for t in spec.inputs]}")
    if baseline_row(spec) is None:
        return (f"model {spec.name}: its spec has no explain baseline for every feature (published before "
                "baselines were recorded, or a column without values in the evaluation sample): publish it again "
                "or declare features.<name>.baseline")
    if not spec.outputs:
        return f"model {spec.name}: its spec declares no output to explain"
    return None


def explained_columns(first_output: Array) -> npt.NDArray[np.int64]:
    """Per row, the column of the first output that is explained: the highest one (0 for one column)."""
    scores = first_output.reshape(first_output.shape[0], -1)
    if scores.shape[1] == 1:
        return np.zeros(scores.shape[0], dtype=np.int64)
    found: npt.NDArray[np.int64] = np.argmax(scores, axis=1).astype(np.int64)
    return found


async def explain_rows(triton: Any, model: EdgeModel, version: int, matrix: Array, first_output: Array,
                       top_k: int, request_id: str, *, n_permutations: int, concurrency: int
                       ) -> list[dict[str, Any]]:
    """Per request row: the explained column, its score, the baseline's, the ``top_k`` contributions.

    ``matrix`` is the row's feature matrix as sent to Triton, ``first_output`` the model's first
    output on it. Raises :class:`~modelops.gateway.triton.inference.TritonFailed` when a call fails or the
    contributions miss the scores by more than the tolerance.
    """
    spec = model.spec
    tensor, baseline = feature_matrix(spec), baseline_row(spec)
    if tensor is None or baseline is None or not spec.outputs:  # explain_problem was asked first
        raise TritonFailed(explain_problem(model) or f"model {spec.name} cannot be explained")
    output = spec.outputs[0].name
    columns = explained_columns(first_output)
    scores = first_output.reshape(first_output.shape[0], -1)[np.arange(len(columns)), columns]
    d = matrix.shape[1]
    perms = permutations(d, n_permutations,
                         int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big"))
    rows = path_inputs(matrix, baseline.astype(matrix.dtype), perms, dtype=matrix.dtype.type)
    limit, step = asyncio.Semaphore(concurrency), model.max_rows if model.batched else len(rows)

    async def score(chunk: Array) -> Array:
        async with limit:
            answer = await triton.infer_tensors(spec.name, version, ((tensor.name, chunk),), (output,))
        return np.asarray(answer[output]).reshape(len(chunk), -1)

    parts = await asyncio.gather(*(score(rows[i:i + step]) for i in range(0, len(rows), step)))
    path_scores = _explained_path_scores(np.concatenate(parts), columns, perms.shape[0] * (d + 1))
    found = contributions(path_scores, len(columns), perms)
    error = additivity_error(found, scores.astype(np.float32))
    if error > ADDITIVITY_TOLERANCE:
        raise TritonFailed(f"Triton {spec.name} v{version}: contributions miss the score by {error:.3g} "
                           f"(tolerance {ADDITIVITY_TOLERANCE}); the model is not deterministic")
    names = [f.name for f in spec.features]
    classes = first_output.reshape(first_output.shape[0], -1).shape[1] > 1
    out = []
    for i in range(len(columns)):
        top = top_features(found.values[i], matrix[i].astype(np.float32), baseline.astype(np.float32), names, top_k)
        entry: dict[str, Any] = {"row": i, "output": output, "score": float(scores[i]),
                                 "baseline_score": float(found.baseline_scores[i]),
                                 "feature_contributions": [asdict(t) for t in top],
                                 "other_features_contribution": float(found.values[i].sum()) - sum(
                                     t.contribution for t in top),
                                 "top_reason": top_reason(top)}
        if classes:
            entry["class"] = int(columns[i])
        out.append(entry)
    return out


def _explained_path_scores(scores: Array, columns: npt.NDArray[np.int64], per_row: int) -> npt.NDArray[np.float32]:
    """Each path row's score in its request row's explained column (path rows are row-major)."""
    which = np.repeat(columns, per_row)
    return np.asarray(scores[np.arange(len(which)), which], dtype=np.float32)
