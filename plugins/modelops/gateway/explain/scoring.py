"""``explain=true`` against Triton: the Shapley sampling of :mod:`modelops.gateway.explain.shapley`, every path
scored by the Triton version that scored the request.

Two ways to score the paths, chosen per version from its config:

- **inside the pipeline** (a release's pipeline declares the optional inputs ``explain_baseline`` and
  ``explain_ranks``): the gateway sends the items, the baseline and the permutations' ranks, and the
  pipeline version builds the path rows and runs them through its own step files
  (``templates/ensemble_model.py``). One call per ``max_batch_size`` items; the 5,160 path rows of 20
  items never cross HTTP or Triton's shared memory.
- **as batched calls** of the path rows, ``max_batch_size`` rows each: any other model behind the
  contract, and a pipeline version published before the pipeline could explain or with a run-time
  variant (its call answers "no in-model explanation" once; the version is then explained this way,
  with a warning in the log). A passing failure of the call inside, or path scores that miss the
  request's score by more than the tolerance (the copies ran on another engine than the steps, e.g. a
  GPU), make that one request score its paths this way; only then is a miss a 502.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.gateway.explain.shapley import (
    ADDITIVITY_TOLERANCE,
    additivity_error,
    contributions,
    path_inputs,
    permutations,
    ranks_of,
    top_features,
    top_reason,
)
from modelops.gateway.triton.inference import TritonFailed, TritonHTTP
from modelops.gateway.triton.pool import TritonPool
from modelops.serving.pbtxt import EXPLAIN_BASELINE, EXPLAIN_RANKS, PATH_SCORE

log = logging.getLogger(__name__)
_NO_IN_MODEL = "no in-model explanation"
"""What ``templates/ensemble_model.py`` answers when its version has no step copies to explain with."""


@dataclass
class ExplainPlan:
    """How one (model, version) is explained: its ``max_batch_size`` (0: no limit) and whether inside it."""

    max_batch: int
    in_model: bool


async def explain_items(triton: TritonHTTP | TritonPool, plans: dict[tuple[str, int], ExplainPlan],
                        baseline: npt.NDArray[np.float32], names: Sequence[str], model: str, version: int,
                        item_ids: list[str], features: npt.NDArray[np.float32], scores: npt.NDArray[np.float32],
                        top_k: int, request_id: str, *, n_permutations: int,
                        concurrency: int) -> list[dict[str, Any]]:
    """Per item: score, baseline score, the ``top_k`` contributions, the rest's sum and a ``top_reason``.

    ``plans`` caches each version's :class:`ExplainPlan` across requests.

    Raises:
        TritonFailed: a call failed, or the contributions miss the score by more than the tolerance.
    """
    plan = await _plan(triton, plans, model, version)
    perms = permutations(features.shape[1], n_permutations,
                         int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big"))
    limit = asyncio.Semaphore(concurrency)
    found = None
    if plan.in_model:
        try:
            found = contributions(await _inside(triton, plan, model, version, features, baseline, perms, limit),
                                  len(item_ids), perms)
        except TritonFailed as exc:
            if _cannot_explain_inside(str(exc)):  # published before pipelines explained, or a variant
                plan.in_model = False
                log.warning("%s v%s explains by scoring its paths from now on: %s", model, version, exc)
            else:  # a failure of this call only: this request scores its paths
                log.warning("%s v%s: explanation inside failed, scoring the paths: %s", model, version, exc)
        if found is not None and additivity_error(found, scores) > ADDITIVITY_TOLERANCE:
            found = None  # the copies' engine differs from the steps' (e.g. a GPU step): the steps decide
    if found is None:
        found = contributions(
            await _by_paths(triton, plan, model, version, path_inputs(features, baseline, perms), limit),
            len(item_ids), perms)
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


def _cannot_explain_inside(message: str) -> bool:
    """Whether a failed call inside says the version can never explain inside (not a passing failure)."""
    return any(hint in message for hint in (_NO_IN_MODEL, PATH_SCORE, "malformed answer"))


async def _plan(triton: TritonHTTP | TritonPool, plans: dict[tuple[str, int], ExplainPlan], model: str,
                version: int) -> ExplainPlan:
    key = (model, version)
    if key not in plans:
        config = await triton.version_config(model, version)
        inputs = {str(t.get("name")) for t in config.get("input", [])}
        plans[key] = ExplainPlan(int(config.get("max_batch_size", 0) or 0),
                                 {EXPLAIN_BASELINE, EXPLAIN_RANKS} <= inputs)
    return plans[key]


async def _inside(triton: TritonHTTP | TritonPool, plan: ExplainPlan, model: str, version: int,
                  features: npt.NDArray[np.float32], baseline: npt.NDArray[np.float32],
                  perms: npt.NDArray[np.int64], limit: asyncio.Semaphore) -> npt.NDArray[np.float32]:
    """The path scores, computed by the pipeline version itself, ``max_batch`` items per call."""
    n, d = features.shape
    ranks = ranks_of(perms).reshape(1, -1).astype(np.int64)
    per_item = perms.shape[0] * (d + 1)
    step = plan.max_batch or n

    async def call(items: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        m = len(items)
        inputs = (("features", np.ascontiguousarray(items, dtype=np.float32)),
                  (EXPLAIN_BASELINE, np.repeat(baseline.astype(np.float32)[None, :], m, axis=0)),
                  (EXPLAIN_RANKS, np.repeat(ranks, m, axis=0)))
        async with limit:
            found = await triton.infer_output(model, version, inputs, PATH_SCORE)
        if found.shape[0] != m * per_item:
            raise TritonFailed(f"Triton {model} v{version}: {found.shape[0]} path scores for {m} items "
                               f"({per_item} each)")
        return found

    parts = await asyncio.gather(*(call(features[i:i + step]) for i in range(0, n, step)))
    return np.concatenate(parts)


async def _by_paths(triton: TritonHTTP | TritonPool, plan: ExplainPlan, model: str, version: int,
                    rows: npt.NDArray[np.float32], limit: asyncio.Semaphore) -> npt.NDArray[np.float32]:
    """The path scores as batched calls of the path rows (at most ``max_batch`` rows each)."""
    step = plan.max_batch or len(rows)

    async def score(chunk: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        async with limit:
            return await triton.infer_scores(model, version, chunk)

    parts = await asyncio.gather(*(score(rows[i:i + step]) for i in range(0, len(rows), step)))
    return np.concatenate(parts)
