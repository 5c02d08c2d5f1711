"""Mirroring to a shadow version: after the stable version answered, the same request to the candidate.

A mixin of :class:`modelops.gateway.app.Gateway`. When a model's routes name a ``shadow``
(:class:`modelops.documents.routes.Shadow`), each request the routes send to the stable version is,
with probability ``share``, mirrored to the shadow **after its answer was sent**: the handler calls
:meth:`ShadowMirroring._mirror_scores` (the recommender) or :meth:`ShadowMirroring._mirror_tensors`
(the tabular form and the Open Inference Protocol) once ``respond`` has written the answer, and those
only start a task; the Triton call, the comparison (:mod:`modelops.gateway.shadow.divergence`) and the
bookkeeping run after the handler returned. A user's answer never waits for the shadow, and a shadow
that hangs only holds its own calls.

Bounded: at most ``shadow_max_in_flight`` mirrored calls per process run at once (each ends within
``shadow_timeout_ms``); a request that would exceed it is not mirrored and is counted
(``modelops_gateway_shadow_dropped_total{reason="budget"}``), never queued. A shadow whose inputs
differ from the stable's (another signature) is not called (``reason="signature"``).

What is kept, per model and shadow version (``version`` is the shadow's):

=================================================================  ===========================================
``modelops_gateway_shadow_mirrored_total``                         mirrored calls started
``modelops_gateway_shadow_dropped_total{reason}``                  not mirrored: budget, signature
``modelops_gateway_shadow_answers_total{outcome}``                 ok, upstream, timeout, mismatch (shape)
``modelops_gateway_shadow_call_seconds{role}``                     Triton call time, candidate and stable, on
                                                                   the mirrored requests
``modelops_gateway_shadow_divergence{measure}``                    |Δ| per score (``abs``), relative |Δ| per
                                                                   row of a regressor (``rel``)
``modelops_gateway_shadow_compared_total{measure}``                ranked requests (``topk``), classified rows
``modelops_gateway_shadow_disagreements_total{measure}``           (``class``) compared / whose order or class
                                                                   changed
=================================================================  ===========================================

and one row per mirrored request in the shadow log (``logs/shadow``, :data:`modelops.records.SHADOW`),
with the stable answer's ``request_id``; the prediction log keeps only answers users got.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import numpy as np
import numpy.typing as npt

from modelops.documents.routes import Routes, Shadow, VersionRef
from modelops.errors import ModelopsError
from modelops.gateway.logs.eventlog import shadow_record
from modelops.gateway.logs.spool import SpoolFull
from modelops.gateway.metrics import Labels
from modelops.gateway.protocol.forms import EdgeModel, Inputs
from modelops.gateway.shadow.divergence import (
    DIVERGENCE_BUCKETS,
    Comparison,
    answer_kind,
    compare_ranked,
    compare_rows,
    first_output,
)
from modelops.modelspec.scores import row_scores

log = logging.getLogger("modelops.gateway.app")


class ShadowMirroring:
    """Mirrored calls to a shadow version (mixed into the Gateway; the attributes are the Gateway's)."""

    triton: Any
    options: Any
    registry: Any
    logs: Any
    _edge_of: Callable[[str, VersionRef], EdgeModel]

    def _init_shadow(self) -> None:
        r = self.registry
        self.m_shadow_mirrored = r.counter("modelops_gateway_shadow_mirrored_total",
                                           "Requests answered by the stable version and mirrored to the shadow "
                                           "version (label version) after the answer, by model and version.")
        self.m_shadow_dropped = r.counter("modelops_gateway_shadow_dropped_total",
                                          "Requests drawn for mirroring but not mirrored, by model, shadow version "
                                          "and reason (budget: the in-flight budget was spent; signature: the "
                                          "shadow takes other inputs).")
        self.m_shadow_answers = r.counter("modelops_gateway_shadow_answers_total",
                                          "Mirrored calls ended, by model, shadow version and outcome (ok, upstream, "
                                          "timeout, mismatch: an answer of another shape).")
        self.m_shadow_call = r.histogram("modelops_gateway_shadow_call_seconds",
                                         "Triton call time on the mirrored requests, by model, shadow version and "
                                         "role (candidate: the shadow; stable: the same request's stable call).")
        self.m_shadow_divergence = r.histogram("modelops_gateway_shadow_divergence",
                                               "|shadow - stable| per score (measure abs) and a regressor's relative "
                                               "|delta| per row (measure rel), by model and shadow version.",
                                               DIVERGENCE_BUCKETS)
        self.m_shadow_compared = r.counter("modelops_gateway_shadow_compared_total",
                                           "Ranked requests (measure topk) and classified rows (measure class) "
                                           "compared, by model and shadow version.")
        self.m_shadow_disagreements = r.counter("modelops_gateway_shadow_disagreements_total",
                                                "Compared ranked requests whose top-k order changed (topk) and rows "
                                                "whose predicted class changed (class), by model and shadow version.")
        self.shadow_in_flight = 0
        self._shadow_tasks: set[asyncio.Task[None]] = set()
        self._shadow_draw = random.Random().random

    # ------------------------------------------------------------------ hooks (called after the answer)
    def _shadow_of(self, routes: Routes, version: VersionRef) -> tuple[Shadow, Labels] | None:
        """The shadow this request is mirrored to, or None (no shadow, not the stable's, not drawn, over budget)."""
        shadow = routes.shadow
        if shadow is None or version != routes.stable:  # a canary's users are not mirrored
            return None
        if shadow.share < 1.0 and self._shadow_draw() >= shadow.share:
            return None
        labels = (("model", routes.model), ("version", str(shadow.version.version)))
        if self.shadow_in_flight >= self.options.shadow_max_in_flight:
            self.m_shadow_dropped.inc((*labels, ("reason", "budget")))
            return None
        return shadow, labels

    def _mirror_scores(self, routes: Routes, version: VersionRef, request_id: str, features: npt.NDArray[Any],
                       scores: npt.NDArray[Any], stable_call_s: float | None) -> None:
        """The recommender's request (its looked-up features) to the shadow, compared with ``scores``."""
        found = self._shadow_of(routes, version)
        if found is None:
            return
        shadow, labels = found

        async def call() -> npt.NDArray[Any]:
            answer: npt.NDArray[Any] = await self.triton.infer_scores(routes.model, shadow.version.version, features)
            return answer

        def compare(answer: Any) -> Comparison | None:
            return compare_ranked(scores, answer, shadow.top_k)

        self._spawn(self._mirrored(routes.model, version.version, shadow, labels, request_id, call, compare,
                                   stable_call_s, len(scores)))

    def _mirror_tensors(self, routes: Routes, version: VersionRef, edge: EdgeModel, request_id: str, inputs: Inputs,
                        outputs: dict[str, npt.NDArray[Any]], stable_call_s: float | None) -> None:
        """A tabular or OIP request's tensors to the shadow, compared on the first output."""
        found = self._shadow_of(routes, version)
        if found is None:
            return
        shadow, labels = found
        candidate = self._edge_of(routes.model, shadow.version)
        names = tuple(outputs)
        if [(t.name, t.dtype) for t in candidate.spec.inputs] != [(t.name, t.dtype) for t in edge.spec.inputs] \
                or not set(names) <= set(candidate.output_names):
            self.m_shadow_dropped.inc((*labels, ("reason", "signature")))
            return
        stable_first = outputs[names[0]]
        label = edge.spec.outcomes.label
        kind = answer_kind(stable_first, label.kind if label is not None else None)

        async def call() -> dict[str, npt.NDArray[Any]]:
            answer: dict[str, npt.NDArray[Any]] = await self.triton.infer_tensors(
                routes.model, shadow.version.version, inputs, names)
            return answer

        def compare(answer: Any) -> Comparison | None:
            return compare_rows(stable_first, answer[names[0]], kind)

        self._spawn(self._mirrored(routes.model, version.version, shadow, labels, request_id, call, compare,
                                   stable_call_s, int(np.asarray(stable_first).shape[0])))

    # ------------------------------------------------------------------ the mirrored call
    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.shadow_in_flight += 1
        task = asyncio.get_running_loop().create_task(work)
        self._shadow_tasks.add(task)  # a strong reference until it ends (the loop keeps only weak ones)
        task.add_done_callback(self._shadow_done)

    def _shadow_done(self, task: asyncio.Task[None]) -> None:
        self.shadow_in_flight -= 1
        self._shadow_tasks.discard(task)

    async def _mirrored(self, model: str, stable_version: int, shadow: Shadow, labels: Labels, request_id: str,
                        call: Callable[[], Awaitable[Any]], compare: Callable[[Any], Comparison | None],
                        stable_call_s: float | None, n_items: int) -> None:
        self.m_shadow_mirrored.inc(labels)
        started = time.perf_counter()
        outcome, comparison, answer = "ok", None, None
        try:
            async with asyncio.timeout(self.options.shadow_timeout_ms / 1000.0):
                answer = await call()
        except TimeoutError:
            outcome = "timeout"
        except ModelopsError:  # TritonFailed, TritonUnavailable and the pool's errors: the shadow failed
            outcome = "upstream"
        except Exception:  # a defect here must not look like the shadow's fault, nor end silently
            log.exception("mirrored call of %s failed unexpectedly", labels)
            self.m_shadow_dropped.inc((*labels, ("reason", "internal")))
            return
        call_s = time.perf_counter() - started
        if answer is not None:
            comparison = compare(answer)
            if comparison is None:
                outcome = "mismatch"
        self.m_shadow_answers.inc((*labels, ("outcome", outcome)))
        self.m_shadow_call.observe((*labels, ("role", "candidate")), call_s)
        if stable_call_s is not None:
            self.m_shadow_call.observe((*labels, ("role", "stable")), stable_call_s)
        if comparison is not None:
            self.m_shadow_divergence.observe_many((*labels, ("measure", "abs")), comparison.abs_diffs)
            if comparison.rel_diffs is not None:
                self.m_shadow_divergence.observe_many((*labels, ("measure", "rel")), comparison.rel_diffs)
            if comparison.measure:
                measure = (*labels, ("measure", comparison.measure))
                self.m_shadow_compared.inc(measure, comparison.compared)
                self.m_shadow_disagreements.inc(measure, comparison.disagreed)
        self._shadow_log(model, stable_version, shadow, request_id, outcome, n_items, stable_call_s, call_s,
                         answer, comparison)

    def _shadow_log(self, model: str, stable_version: int, shadow: Shadow, request_id: str, outcome: str,
                    n_items: int, stable_call_s: float | None, call_s: float, answer: Any,
                    comparison: Comparison | None) -> None:
        """One row of the shadow log (queued for the next timed write; skipped when the spool is over budget)."""
        committer = self.logs.committers["shadow"]
        try:
            committer.check_budget()
        except SpoolFull:
            return
        # Plain Python over a request's few values: numpy's per-call overhead cost ~100 us here (5 calls).
        scores: list[float] = row_scores(first_output(answer) if isinstance(answer, dict) else answer).tolist() \
            if answer is not None and outcome != "mismatch" else []
        diffs: list[float] = sorted(comparison.abs_diffs.tolist()) if comparison is not None else []
        nan = math.nan
        mean = sum(scores) / len(scores) if scores else nan
        committer.append_nowait(shadow_record(
            request_id=request_id, ts=time.time(), model=model, stable_version=stable_version,
            shadow_version=shadow.version.version, outcome=outcome, n_items=n_items,
            stable_latency_ms=None if stable_call_s is None else stable_call_s * 1000.0,
            shadow_latency_ms=call_s * 1000.0, score_mean=mean,
            score_std=math.sqrt(max(0.0, sum(x * x for x in scores) / len(scores) - mean * mean)) if scores else nan,
            abs_diff_median=statistics.median(diffs) if diffs else nan, abs_diff_max=diffs[-1] if diffs else nan,
            compared=comparison.compared if comparison is not None else 0,
            disagreed=comparison.disagreed if comparison is not None else 0))

    async def _shadow_close(self) -> None:
        """Let the mirrored calls in flight end (each is bounded by ``shadow_timeout_ms``) before the logs close."""
        if self._shadow_tasks:
            await asyncio.wait(set(self._shadow_tasks), timeout=self.options.shadow_timeout_ms / 1000.0 + 1.0)
