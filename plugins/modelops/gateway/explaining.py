"""``explain=true`` against Triton: the Shapley sampling of :mod:`modelops.gateway.explain`, every path
scored by the Triton version that scored the request, in batched calls of its ``max_batch_size``."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.explain import (
    ADDITIVITY_TOLERANCE,
    additivity_error,
    contributions,
    path_inputs,
    permutations,
    top_features,
    top_reason,
)
from modelops.gateway.inference import TritonFailed, TritonHTTP


async def explain_items(triton: TritonHTTP, max_batch: dict[tuple[str, int], int], baseline: npt.NDArray[np.float32],
                        names: Sequence[str], model: str, version: int, item_ids: list[str],
                        features: npt.NDArray[np.float32], scores: npt.NDArray[np.float32], top_k: int,
                        request_id: str, *, n_permutations: int, concurrency: int) -> list[dict[str, Any]]:
    """Per item: score, baseline score, the ``top_k`` contributions, the rest's sum and a ``top_reason``.

    ``max_batch`` caches each version's ``max_batch_size`` (0: no limit) across requests.

    Raises:
        TritonFailed: a call failed, or the contributions miss the score by more than the tolerance.
    """
    key = (model, version)
    if key not in max_batch:
        config = await triton.version_config(model, version)
        max_batch[key] = int(config.get("max_batch_size", 0) or 0)
    perms = permutations(features.shape[1], n_permutations,
                         int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big"))
    rows = path_inputs(features, baseline, perms)
    step = max_batch[key] or len(rows)
    limit = asyncio.Semaphore(concurrency)

    async def score(chunk: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        async with limit:
            return await triton.infer_scores(model, version, chunk)

    parts = await asyncio.gather(*(score(rows[i:i + step]) for i in range(0, len(rows), step)))
    found = contributions(np.concatenate(parts), len(item_ids), perms)
    error = additivity_error(found, scores)
    if error > ADDITIVITY_TOLERANCE:  # the version answered the same input differently: not explainable
        raise TritonFailed(f"Triton {model} v{version}: contributions miss the score by {error:.3g} "
                           f"(tolerance {ADDITIVITY_TOLERANCE}); the model is not deterministic")
    out = []
    for i, item in enumerate(item_ids):
        top = top_features(found.values[i], features[i], baseline, names, top_k)
        listed = [asdict(t) for t in top]
        out.append({"item_id": item, "score": float(scores[i]), "baseline_score": float(found.baseline_scores[i]),
                    "feature_contributions": listed,
                    "other_features_contribution": float(found.values[i].sum()) - sum(
                        t.contribution for t in top),
                    "top_reason": top_reason(top)})
    return out
