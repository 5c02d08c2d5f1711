"""The feature-lookup form: the reference recommender's ``{user_id, item_ids}`` requests.

A mixin of :class:`modelops.gateway.app.Gateway`, for a request that kept the recommender's
contract and was routed to a version: its features from the online snapshot
(:mod:`modelops.gateway.lookup.onlinefeatures`; 503 when none is loaded), its scores from a precomputed
snapshot of exactly that version or from Triton within the deadline (503 unreachable / 504 deadline
/ 502 refused), its prediction record written and fsynced *before* the 200 (so kill -9 loses no
acknowledged prediction), then the shadow mirror, the metrics and the access line. The steps are
methods of their own: :meth:`LookupServing._features`, :meth:`LookupServing._score`,
:meth:`LookupServing._log_scores`, :meth:`LookupServing._lookup_answered`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from modelops.documents.routes import Routes, VersionRef, user_hash
from modelops.gateway.delay import RequestTiming, origin
from modelops.gateway.explain.scoring import explain_items
from modelops.gateway.feedback.tokens import TokenClaims, issue_token
from modelops.gateway.http import HTTPError, Send, respond
from modelops.gateway.logs.eventlog import explanation_record, prediction_record, scored_record
from modelops.gateway.logs.spool import SpoolFull
from modelops.gateway.lookup.onlinefeatures import FeaturesUnavailable
from modelops.gateway.lookup.precomputed import SOURCE_HEADER
from modelops.gateway.metrics import Labels, ScoreWindow
from modelops.gateway.triton.inference import TritonFailed, TritonUnavailable

_JSON_ENCODE = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Scored:
    """A request's scores, where they came from and its explanations (``explain=true``)."""

    scores: npt.NDArray[np.float32]
    explanations: list[dict[str, Any]] | None  # None: not asked for
    online: bool  # False: a precomputed snapshot answered, no Triton call
    why_online: str | None


@dataclass(frozen=True, slots=True)
class ScoreStats:
    """The summary of a request's scores that its prediction record and the score window keep."""

    n: int
    total: float
    squares: float
    peak: float

    @classmethod
    def of(cls, scores: npt.NDArray[np.float32]) -> ScoreStats:
        scores64 = scores.astype(np.float64)
        return cls(len(scores64), float(scores64.sum()), float(np.dot(scores64, scores64)), float(scores64.max()))

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def std(self) -> float:  # numpy's mean/std cost ~50 us more
        return math.sqrt(max(0.0, self.squares / self.n - self.mean * self.mean))


class LookupServing:
    """The recommender's form (the attributes are the Gateway's)."""

    triton: Any
    secret: bytes
    logs: Any
    features: Any
    precomputed: Any
    sampling: Any
    options: Any
    windows: dict[tuple[str, int], ScoreWindow]
    triton_called: dict[tuple[str, int], float]
    triton_in_flight: dict[tuple[str, int], int]
    triton_delays: Any
    loop_lag: Any
    explain_plans: Any
    names: Any
    m_requests: Any
    m_errors: Any
    m_latency: Any
    m_latency_origin: Any
    m_delay: Any
    _access: Callable[..., None]
    _unavailable: Callable[[str, str], HTTPError]
    _check_spool: Callable[[Labels], None]
    _triton_error: Callable[[BaseException, Labels, float], HTTPError]
    _mirror_scores: Callable[..., None]  # modelops.gateway.shadow.mirror: after the answer, to a shadow version

    async def _answer(self, path: str, routes: Routes, version: VersionRef, labels: Labels,
                      document: dict[str, Any], size: int, request_id: str, timing: RequestTiming, deadline_s: float,
                      send: Send, query: dict[str, Any]) -> None:
        """Features, scores, record, answer, mirror and metrics for a request that kept the contract."""
        model = routes.model
        user_id: str = document["user_id"]
        item_ids: list[str] = document["item_ids"]
        self._check_spool(labels)
        features = await self._features(user_id, item_ids, labels, timing)
        scored = await self._score(model, version, labels, user_id, item_ids, features, query, request_id,
                                   deadline_s, timing)
        now = time.time()
        token = issue_token(self.secret, TokenClaims(request_id, model, version.version, version.sha256[:12], now))
        variant = "canary" if routes.canary is not None and version == routes.canary else "stable"
        answer = {"request_id": request_id, "model": model, "model_version": version.version,
                  "model_id": version.label, "variant": variant, "scores": scored.scores.tolist(),
                  "feedback_token": token}
        if scored.explanations is not None:
            answer["explanations"] = scored.explanations
        body = _JSON_ENCODE(answer)
        stats = ScoreStats.of(scored.scores)
        await self._log_scores(model, version, labels, user_id, request_id, token, now, features, scored, stats,
                               timing)
        parts = timing.parts()
        source = b"online" if scored.online else b"precomputed"
        await respond(send, 200, body, request_id, [
            (b"x-model-version", version.label.encode()),
            (b"x-inference-latency", f"{timing.inference_s * 1000.0:.3f}".encode()),
            (SOURCE_HEADER, source),
            *timing.headers(parts),
        ])
        # Answered: now (never before) the same request to a shadow version, if the routes name one.
        self._mirror_scores(routes, version, request_id, features, scored.scores,
                            timing.inference_s if scored.online and not query["explain"] else None)
        self._lookup_answered(path, request_id, model, version, labels, variant, size, now, scored, stats, timing,
                              parts)

    async def _features(self, user_id: str, item_ids: list[str], labels: Labels,
                        timing: RequestTiming) -> npt.NDArray[np.float32]:
        """The request's feature matrix from the online snapshot (503 when none is loaded)."""
        started = time.perf_counter()
        try:
            if self.options.drill_feature_delay_ms > 0:
                await asyncio.sleep(self.options.drill_feature_delay_ms / 1000.0)
            features: npt.NDArray[np.float32] = self.features.matrix(user_id, item_ids)
            return features
        except FeaturesUnavailable as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("features_unavailable", str(exc)) from exc
        finally:
            timing.features_s = time.perf_counter() - started

    async def _score(self, model: str, version: VersionRef, labels: Labels, user_id: str, item_ids: list[str],
                     features: npt.NDArray[np.float32], query: dict[str, Any], request_id: str, deadline_s: float,
                     timing: RequestTiming) -> Scored:
        """The scores of a precomputed snapshot of exactly the routed version, on the served features, or
        of Triton within what is left of the deadline (``explain=true`` is always scored online)."""
        current = self.features.current  # read once: the snapshot the lookup checks is the one just used
        hit, why_online = (None, "explain") if query["explain"] else self.precomputed.lookup(
            model, version, user_id, item_ids, current.snapshot if current else None, time.time())
        remaining = deadline_s - timing.total_s()
        explanations: list[dict[str, Any]] | None = None
        called = (model, version.version)
        online = hit is None
        if online:  # a precomputed answer calls no Triton: no call in flight, no Triton share of its delay
            self.triton_called[called] = time.monotonic()
            timing.share = self.triton_delays.share(*called)
            timing.calls_ahead = self.triton_in_flight.get(called, 0)
            self.triton_in_flight[called] = timing.calls_ahead + 1
        started = time.perf_counter()
        try:
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                scores = hit if hit is not None else await self.triton.infer_scores(model, version.version, features)
                if query["explain"]:  # same version, same deadline
                    explanations = await self._explain(model, version.version, item_ids, features, scores,
                                                       int(query["top_k"]), request_id)
        except (TimeoutError, TritonUnavailable, TritonFailed) as exc:
            raise self._triton_error(exc, labels, deadline_s) from exc
        finally:
            ended = time.perf_counter()
            timing.inference_s = ended - started if online else 0.0
            timing.loop_lag_s = self.loop_lag.current(ended)
            if online:
                self.triton_in_flight[called] -= 1
        return Scored(scores, explanations, online, why_online)

    async def _log_scores(self, model: str, version: VersionRef, labels: Labels, user_id: str, request_id: str,
                          token: str, now: float, features: npt.NDArray[np.float32], scored: Scored,
                          stats: ScoreStats, timing: RequestTiming) -> None:
        """The prediction record written and fsynced (503 when the spool is full); a sampled share queued."""
        logged = timing.parts()  # the record's latency and origin are those up to its log write
        # A 200 means the request's prediction record is on disk: its batch (shared by every request of
        # the same group commit) is written and fsynced before the answer, so kill -9 loses no prediction
        # that was acknowledged, and its feedback token always finds its prediction in the join. The scored
        # sample (a statistical sample for the drift job, not a record anyone joins on) is queued for the
        # next timed group write (within 50 ms) without holding the answer: a second fsync hand-off per
        # request cost ~0.3 ms at concurrency 1, and kill -9 can lose only the last 50 ms of samples.
        writes = [self.logs.committers["predictions"].append(prediction_record(
            request_id=request_id, feedback_token=token, ts=now, model=model, model_version=version.version,
            model_sha256=version.sha256, user_hash=user_hash(user_id), n_items=stats.n, score_mean=stats.mean,
            score_max=stats.peak, score_std=stats.std, latency_ms=sum(logged.values()) * 1000.0,
            delay_origin=origin(logged)))]
        if self.sampling.take(request_id, time.monotonic()):  # a share, capped per second (gateway.logs.sampling)
            self.logs.committers["scored_samples"].append_nowait(scored_record(
                request_id=request_id, ts=now, model=model, model_version=version.version, scores=scored.scores,
                features=features))
            if scored.explanations is not None:  # logged with the prediction, sampled like the scored samples
                writes.append(self.logs.committers["explanations"].append(explanation_record(
                    request_id=request_id, ts=now, model=model, model_version=version.version,
                    explanations_json=_JSON_ENCODE(scored.explanations).decode())))
        try:
            await (writes[0] if len(writes) == 1 else asyncio.gather(*writes))
        except SpoolFull as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("spool_full", str(exc)) from exc

    def _lookup_answered(self, path: str, request_id: str, model: str, version: VersionRef, labels: Labels,
                         variant: str, size: int, now: float, scored: Scored, stats: ScoreStats, timing: RequestTiming,
                         parts: dict[str, float]) -> None:
        """The answered request in the metrics, the score window and the access log."""
        total_s = timing.total_s()
        source = "online" if scored.online else "precomputed"
        self.m_requests.inc((*labels, ("code", "200")))
        self.precomputed.count(model, version.version, source, scored.why_online)
        self.m_latency.observe((*labels, ("source", source)), total_s)
        delay_origin = origin(parts)
        self.m_latency_origin.observe((("model", model), ("origin", delay_origin)), total_s)
        for name, seconds in parts.items():
            self.m_delay.observe((("model", model), ("origin", name)), seconds)
        window = self.windows.get((model, version.version))
        if window is None:
            window = self.windows[(model, version.version)] = ScoreWindow(self.options.score_window_s)
        window.add(now, stats.n, stats.total, stats.squares, stats.peak)
        self._access(request_id, "POST", path, 200, model=model, version=version.version,
                     model_id=version.label, variant=variant, inference_time_ms=round(timing.inference_s * 1000, 3),
                     feature_lookup_ms=round(timing.features_s * 1000, 3), latency_ms=round(total_s * 1000, 3),
                     input_size_bytes=size, n_items=stats.n, delay_origin=delay_origin,
                     prediction_source=source, online_reason=scored.why_online,
                     triton_queue_ms=round(parts["triton_queue"] * 1000, 3),
                     triton_compute_ms=round(parts["triton_compute"] * 1000, 3))

    async def _explain(self, model: str, version: int, item_ids: list[str], features: npt.NDArray[np.float32],
                       scores: npt.NDArray[np.float32], top_k: int, request_id: str) -> list[dict[str, Any]]:
        """Shapley sampling (modelops.gateway.explain.scoring) scored by Triton ``version``, inside it or in batches."""
        current = self.features.current
        if current is None:  # the lookup just succeeded, so a snapshot is loaded; never None here
            raise FeaturesUnavailable("no feature snapshot loaded (the explanation's baseline)")
        return await explain_items(self.triton, self.explain_plans, current.baseline, self.names, model, version,
                                   item_ids, features, scores, top_k, request_id,
                                   n_permutations=self.options.explain_permutations,
                                   concurrency=self.options.explain_concurrency)
