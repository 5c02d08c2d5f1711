"""The serving gateway: a raw ASGI application (uvicorn), no framework on the hot path.

Endpoints: ``POST /v1/models/{model}/predict``, ``POST /v1/feedback``, ``GET /v1/routes``,
``GET /healthz``, ``GET /metrics``, ``GET /openapi.json``. The order of checks for a
prediction: unknown model (404) -> content type (415) -> declared or streamed size
(413, before the body is read whole) -> JSON and contract (400) -> ``Inference-Timeout``
header (400) -> spool budget (503) -> features (503) -> Triton with the version the
routes give this user (503 unreachable / 504 deadline / 502 refused). A rejected
request never reaches Triton.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from modelops.config import Settings, settings
from modelops.documents.routes import (
    Routes,
    VersionRef,
    choose_version,
    routes_to_dict,
    user_hash,
)
from modelops.features import feature_names, load_features
from modelops.gateway.accesslog import BufferedLineHandler, direct_sink
from modelops.gateway.contract import RequestContract, load_contract
from modelops.gateway.delay import LoopLag, RequestTiming, TritonDelays, origin
from modelops.gateway.edge import EdgeServing
from modelops.gateway.eventlog import (
    EventLogs,
    SpoolConfig,
    explanation_record,
    prediction_record,
    scored_record,
)
from modelops.gateway.explaining import ExplainPlan, explain_items
from modelops.gateway.feedback import FeedbackServing
from modelops.gateway.http import (
    HTTPError,
    Receive,
    Scope,
    Send,
    error,
    headers_of,
    json_line,
    new_request_id,
    respond,
    respond_json,
)
from modelops.gateway.inference import TritonFailed, TritonUnavailable
from modelops.gateway.metrics import CollapseWatch, Labels, ScoreWindow
from modelops.gateway.onlinefeatures import FeaturesUnavailable, OnlineFeatures
from modelops.gateway.openapi import add_model_paths, build_openapi
from modelops.gateway.options import GatewayOptions
from modelops.gateway.pollers import GatewayPollers
from modelops.gateway.pool import TritonPool
from modelops.gateway.precomputed import SOURCE_HEADER, PrecomputedScores
from modelops.gateway.sampling import ScoredSampling
from modelops.gateway.shadow import ShadowMirroring
from modelops.gateway.spool import SpoolFull
from modelops.gateway.tokens import TokenClaims, issue_token, resolve_secret
from modelops.objectstore import ObjectStore

log = logging.getLogger(__name__)
access_log = logging.getLogger("modelops.gateway.access")

_PREDICT = re.compile(r"^/v1/models/([A-Za-z0-9_.-]{1,128})/(?:predict|invocations)$")
_REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_KNOWN_PATHS = frozenset({"/v1/feedback", "/metrics", "/healthz", "/v1/routes", "/openapi.json"})
_JSON_ENCODE = msgspec.json.Encoder().encode
_JSON_DECODE = msgspec.json.Decoder().decode


class Gateway(GatewayPollers, EdgeServing, FeedbackServing, ShadowMirroring):
    """The ASGI application. Build with :func:`create_app`."""

    def __init__(self, cfg: Settings, options: GatewayOptions) -> None:
        self.cfg = cfg
        self.options = options
        self.contract: RequestContract = load_contract()
        self.names = feature_names(load_features())
        self.secret = resolve_secret(cfg.feedback_secret, cfg.home)
        self.store = ObjectStore.from_settings(cfg)
        self.features = OnlineFeatures(self.store, self.names)
        self.precomputed = PrecomputedScores(self.store, cfg.precomputed_max_age_s)
        spool_root = Path(options.spool_dir) if options.spool_dir else cfg.home / "gateway" / "spool"
        self.logs = EventLogs(spool_root, self.store, self.names, SpoolConfig(
            max_segment_bytes=options.segment_max_bytes, max_segment_age_s=options.segment_max_age_s,
            budget_bytes=options.spool_budget_bytes, sync=cfg.spool_sync))
        self.triton = TritonPool(cfg.triton_http_url)  # every server of a dns+http:// name, or the one URL
        self.routes: dict[str, Routes] = {}
        self.routes_applied_at: dict[str, str] = {}
        self.routes_loaded = False
        self.openapi_base = build_openapi(self.contract.schema, max_body_bytes=options.max_body_bytes)
        self.openapi = _JSON_ENCODE(self.openapi_base)
        self.started_at = datetime.now(UTC).isoformat()
        self.windows: dict[tuple[str, int], ScoreWindow] = {}
        self.triton_delays = TritonDelays()
        self.triton_called: dict[tuple[str, int], float] = {}  # (model, version) -> last call (monotonic)
        self.loop_lag = LoopLag()
        self.explain_plans: dict[tuple[str, int], ExplainPlan] = {}  # (model, version) -> how it is explained
        self.triton_in_flight: dict[tuple[str, int], int] = {}
        self.sampling = ScoredSampling(cfg.sample_share, cfg.sample_max_per_s)
        self.watch = CollapseWatch(options.collapse_threshold, options.collapse_hold_s, options.collapse_min_scores)
        self._tasks: list[asyncio.Task[None]] = []
        self._init_edge()
        self._init_feedback()
        self._init_metrics()
        self._init_shadow()
        self.precomputed.register(self.registry)

    # ------------------------------------------------------------------ lifecycle
    async def startup(self) -> None:
        await self.logs.start()
        await self.triton.start()
        await asyncio.to_thread(self.features.refresh)
        await asyncio.to_thread(self._poll_routes_and_specs)
        await asyncio.to_thread(self._refresh_precomputed)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.options.routes_poll_s, self._poll_routes_and_specs), name="routes"),
            loop.create_task(self._every(self.options.features_poll_s, self.features.refresh), name="features"),
            loop.create_task(self._every(self.cfg.precomputed_poll_s, self._refresh_precomputed), name="precomputed"),
            loop.create_task(self._watch_loop(), name="collapse-watch"),
            loop.create_task(self._triton_stats_loop(), name="triton-stats"),
            loop.create_task(self._loop_lag_probe(), name="loop-lag"),
        ]

    def _poll_routes_and_specs(self) -> None:
        updated = self._read_routes()
        if updated is None:
            return
        before = set(self.edge_models)
        self._apply_routes(self._with_specs(updated))  # specs first (modelops.gateway.edge), then the routes
        if self._forget_unrouted(before):
            self.openapi = _JSON_ENCODE(add_model_paths(self.openapi_base, self._tabular_schemas(),
                                                        max_body_bytes=self.options.max_body_bytes))

    def _refresh_precomputed(self) -> None:
        self.precomputed.refresh(list(self.routes.values()))  # the routed versions' newest snapshots

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._shadow_close()
        await self.triton.close()
        await self.logs.close()

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path, method = scope["path"], scope["method"]
        headers = headers_of(scope)
        request_id = headers.get("x-request-id", "")
        if not _REQUEST_ID.match(request_id):
            request_id = new_request_id()
        try:
            if method == "POST" and path.startswith("/v1/models/"):
                await self._predict(path, headers, request_id, receive, send, scope.get("query_string", b""))
            elif path == "/v2" or path.startswith("/v2/"):  # the Open Inference Protocol (gateway.edge)
                await self._oip(method, path, headers, request_id, lambda: self._read_body(headers, receive), send)
            elif path == "/v1/feedback" and method == "POST":
                await self._feedback(headers, request_id, receive, send)
            elif method == "GET" and path == "/metrics":
                self._refresh_gauges(time.time())
                self.precomputed.refresh_gauges(time.time())
                await respond(send, 200, self.registry.render().encode(), request_id,
                               content_type=b"text/plain; version=0.0.4; charset=utf-8")
            elif method == "GET" and path == "/healthz":
                await respond_json(send, 200, self._health(), request_id)
            elif method == "GET" and path == "/v1/routes":
                await respond_json(send, 200, self._routes_view(), request_id)
            elif method == "GET" and path == "/openapi.json":
                await respond(send, 200, self.openapi, request_id)
            elif path in _KNOWN_PATHS or _PREDICT.match(path):
                raise error(405, "method_not_allowed", f"{method} is not allowed on {path}")
            else:
                raise error(404, "not_found", f"no such endpoint: {path}")
        except HTTPError as exc:
            await respond_json(send, exc.status, exc.body, request_id, exc.headers)
            if path.startswith("/v1/"):
                self._access(request_id, method, path, exc.status, error=exc.body.get("error", ""))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("gateway start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _access(self, request_id: str, method: str, path: str, status: int, **fields: Any) -> None:
        sink = direct_sink(access_log)  # the buffered stdout handler alone (create_app): no LogRecord
        if sink is None and not access_log.isEnabledFor(logging.INFO):
            return
        line = json_line({"ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                          "request_id": request_id, "method": method, "path": path, "status": status, **fields})
        if sink is not None:
            sink(line)
        else:
            access_log.info(line)

    def _health(self) -> dict[str, Any]:
        current = self.features.current
        return {"status": "ok", "pid": os.getpid(), "started_at": self.started_at,
                "routes_loaded": self.routes_loaded, "models": sorted(self.routes),
                "feature_snapshot": current.snapshot if current else None,
                "spool_backlog_bytes": self.logs.backlog_bytes, "object_store_ok": self.logs.store_ok}

    def _routes_view(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "routes_loaded": self.routes_loaded,
                "models": {name: {**routes_to_dict(r), "applied_at": self.routes_applied_at.get(name, "")}
                           for name, r in sorted(self.routes.items())}}

    # ------------------------------------------------------------------ handlers
    async def _read_json(self, headers: dict[str, str], receive: Receive) -> tuple[Any, int]:
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json" and not (content_type.startswith("application/")
                                                       and content_type.endswith("+json")):
            raise error(415, "unsupported_media_type",
                         f"content type must be application/json, got {content_type or 'none'!r}")
        body = await self._read_body(headers, receive)
        try:
            return _JSON_DECODE(body), len(body)
        except (msgspec.DecodeError, ValueError) as exc:
            raise error(400, "invalid_json", f"body is not valid JSON: {exc}", field="$", rule="json") from exc

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes:
        """The whole body, refused (413) as soon as its declared or streamed size passes the limit."""
        limit = self.options.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise error(400, "bad_request", "Content-Length must be a non-negative integer")
            if int(declared) > limit:
                raise error(413, "payload_too_large", f"body of {declared} bytes exceeds the limit of {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise error(400, "bad_request", "client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise error(413, "payload_too_large", f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _deadline_s(self, headers: dict[str, str]) -> float:
        maximum = self.options.max_deadline_ms
        raw = headers.get("inference-timeout")
        if raw is None:
            return maximum / 1000.0
        try:
            requested = float(raw)
        except ValueError:
            requested = math.nan
        if not math.isfinite(requested) or requested <= 0:
            raise error(400, "contract_violation", "Inference-Timeout must be a positive number of milliseconds",
                         field="Inference-Timeout", rule="positive milliseconds", value=raw[:64])
        return min(requested, maximum) / 1000.0

    def _unavailable(self, error: str, message: str) -> HTTPError:
        return HTTPError(503, {"error": error, "message": message},
                         [(b"retry-after", str(self.options.retry_after_s).encode())])

    async def _predict(self, path: str, headers: dict[str, str], request_id: str, receive: Receive,
                       send: Send, query_string: bytes = b"") -> None:
        timing = RequestTiming()
        try:
            await self._route(path, headers, request_id, receive, send, timing, query_string)
        except HTTPError as exc:  # every predict answer says where its time went, errors too
            exc.headers.extend(timing.headers(timing.parts()))
            raise

    async def _route(self, path: str, headers: dict[str, str], request_id: str, receive: Receive, send: Send,
                     timing: RequestTiming, query_string: bytes) -> None:
        match = _PREDICT.match(path)
        model = match.group(1) if match else ""
        routes = self.routes.get(model)
        if routes is None:
            if not self.routes_loaded:
                raise self._unavailable("routes_unavailable", "routes not loaded yet (object store unreachable)")
            raise error(404, "unknown_model", f"unknown model {model or path!r}: no routes document "
                                               f"routes/{model}.json")
        labels_model = (("model", model),)
        if self._spec_routed(routes):  # a model served from its spec: the tabular form (gateway.edge)
            try:
                document, size = await self._read_json(headers, receive)
            except HTTPError:
                self.m_errors.inc((*labels_model, ("version", "none"), ("class", "contract")))
                raise
            await self._predict_tabular(path, routes, document, size, headers, request_id, send, timing,
                                        query_string)
            return
        try:
            document, size = await self._read_json(headers, receive)
            violation = self.contract.validate(document)
            if violation is not None:
                raise HTTPError(400, violation.to_body())
            query: dict[str, Any] = {"explain": False}
            if query_string and self.contract.query is not None:
                query, violation = self.contract.query.parse(query_string)
                if violation is not None:
                    raise HTTPError(400, violation.to_body())
            deadline_s = self._deadline_s(headers)
        except HTTPError as exc:
            unrouted = (*labels_model, ("version", "none"))  # rejected before a version was chosen
            if exc.status in {400, 413, 415}:
                self.m_errors.inc((*unrouted, ("class", "contract")))
            raise
        version = choose_version(routes, document["user_id"])
        labels = (*labels_model, ("version", str(version.version)))
        # requests_total counts answered requests; a routed failure is in errors_total with its version
        # (the canary's error rate is errors / (answered + errors)).
        await self._answer(path, routes, version, labels, document, size, request_id, timing, deadline_s, send,
                           query)

    async def _answer(self, path: str, routes: Routes, version: VersionRef, labels: Labels,
                      document: dict[str, Any], size: int, request_id: str, timing: RequestTiming, deadline_s: float,
                      send: Send, query: dict[str, Any]) -> None:
        """Features, Triton, answer, logs and metrics for a request that kept the contract."""
        model = routes.model
        user_id: str = document["user_id"]
        item_ids: list[str] = document["item_ids"]
        self._check_spool(labels)
        started = time.perf_counter()
        try:
            if self.options.drill_feature_delay_ms > 0:
                await asyncio.sleep(self.options.drill_feature_delay_ms / 1000.0)
            features = self.features.matrix(user_id, item_ids)
        except FeaturesUnavailable as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("features_unavailable", str(exc)) from exc
        finally:
            timing.features_s = time.perf_counter() - started
        # Precomputed predictions: only a snapshot of exactly the routed version, on the served features
        # (modelops.gateway.precomputed); explain=true and anything not covered is scored online.
        current = self.features.current  # read once: the snapshot the lookup checks is the one just used
        hit, why_online = (None, "explain") if query["explain"] else self.precomputed.lookup(
            model, version, user_id, item_ids, current.snapshot if current else None, time.time())
        remaining = deadline_s - timing.total_s()
        explanations: list[dict[str, Any]] = []
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
        now = time.time()
        token = issue_token(self.secret, TokenClaims(request_id, model, version.version, version.sha256[:12], now))
        variant = "canary" if routes.canary is not None and version == routes.canary else "stable"
        answer = {"request_id": request_id, "model": model, "model_version": version.version,
                  "model_id": version.label, "variant": variant, "scores": scores.tolist(), "feedback_token": token}
        if query["explain"]:
            answer["explanations"] = explanations
        body = _JSON_ENCODE(answer)
        inference_ms = timing.inference_s * 1000.0
        scores64 = scores.astype(np.float64)
        n = len(scores64)
        total, squares, peak = float(scores64.sum()), float(np.dot(scores64, scores64)), float(scores64.max())
        mean = total / n
        std = math.sqrt(max(0.0, squares / n - mean * mean))  # numpy's mean/std cost ~50 us more
        logged = timing.parts()  # the record's latency and origin are those up to its log write
        # A 200 means the request's prediction record is on disk: its batch (shared by every request of
        # the same group commit) is written and fsynced before the answer, so kill -9 loses no prediction
        # that was acknowledged, and its feedback token always finds its prediction in the join. The scored
        # sample (a statistical sample for the drift job, not a record anyone joins on) is queued for the
        # next timed group write (within 50 ms) without holding the answer: a second fsync hand-off per
        # request cost ~0.3 ms at concurrency 1, and kill -9 can lose only the last 50 ms of samples.
        writes = [self.logs.committers["predictions"].append(prediction_record(
            request_id=request_id, feedback_token=token, ts=now, model=model, model_version=version.version,
            model_sha256=version.sha256, user_hash=user_hash(user_id), n_items=n, score_mean=mean,
            score_max=peak, score_std=std, latency_ms=sum(logged.values()) * 1000.0,
            delay_origin=origin(logged)))]
        if self.sampling.take(request_id, time.monotonic()):  # a share, capped per second (gateway.sampling)
            self.logs.committers["scored_samples"].append_nowait(scored_record(
                request_id=request_id, ts=now, model=model, model_version=version.version, scores=scores,
                features=features))
            if query["explain"]:  # logged with the prediction, sampled like the scored samples
                writes.append(self.logs.committers["explanations"].append(explanation_record(
                    request_id=request_id, ts=now, model=model, model_version=version.version,
                    explanations_json=_JSON_ENCODE(explanations).decode())))
        try:
            await (writes[0] if len(writes) == 1 else asyncio.gather(*writes))
        except SpoolFull as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("spool_full", str(exc)) from exc
        parts = timing.parts()
        await respond(send, 200, body, request_id, [
            (b"x-model-version", version.label.encode()),
            (b"x-inference-latency", f"{inference_ms:.3f}".encode()),
            (SOURCE_HEADER, b"online" if hit is None else b"precomputed"),
            *timing.headers(parts),
        ])
        # Answered: now (never before) the same request to a shadow version, if the routes name one.
        self._mirror_scores(routes, version, request_id, features, scores,
                            timing.inference_s if hit is None and not query["explain"] else None)
        total_s = timing.total_s()
        self.m_requests.inc((*labels, ("code", "200")))
        self.precomputed.count(model, version.version, "online" if hit is None else "precomputed", why_online)
        self.m_latency.observe((*labels, ("source", "online" if hit is None else "precomputed")), total_s)
        delay_origin = origin(parts)
        self.m_latency_origin.observe((("model", model), ("origin", delay_origin)), total_s)
        for name, seconds in parts.items():
            self.m_delay.observe((("model", model), ("origin", name)), seconds)
        window = self.windows.get((model, version.version))
        if window is None:
            window = self.windows[(model, version.version)] = ScoreWindow(self.options.score_window_s)
        window.add(now, n, total, squares, peak)
        self._access(request_id, "POST", path, 200, model=model, version=version.version,
                     model_id=version.label, variant=variant, inference_time_ms=round(inference_ms, 3),
                     feature_lookup_ms=round(timing.features_s * 1000, 3), latency_ms=round(total_s * 1000, 3),
                     input_size_bytes=size, n_items=n, delay_origin=delay_origin,
                     prediction_source="online" if hit is None else "precomputed", online_reason=why_online,
                     triton_queue_ms=round(parts["triton_queue"] * 1000, 3),
                     triton_compute_ms=round(parts["triton_compute"] * 1000, 3))

    async def _explain(self, model: str, version: int, item_ids: list[str], features: npt.NDArray[np.float32],
                       scores: npt.NDArray[np.float32], top_k: int, request_id: str) -> list[dict[str, Any]]:
        """Shapley sampling (modelops.gateway.explaining) scored by Triton ``version``, inside it or in batches."""
        current = self.features.current
        if current is None:  # the lookup just succeeded, so a snapshot is loaded; never None here
            raise FeaturesUnavailable("no feature snapshot loaded (the explanation's baseline)")
        return await explain_items(self.triton, self.explain_plans, current.baseline, self.names, model, version,
                                   item_ids, features, scores, top_k, request_id,
                                   n_permutations=self.options.explain_permutations,
                                   concurrency=self.options.explain_concurrency)


def create_app(cfg: Settings | None = None, options: GatewayOptions | None = None) -> Gateway:
    """The ASGI app (uvicorn factory): settings from the environment, options from ``serve``.

    Each uvicorn worker process calls this, so logging (one JSON line per request on
    stdout, written in batches: modelops.gateway.accesslog) is set up here rather than in
    the ``serve`` command.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
        if not access_log.handlers:
            buffered = BufferedLineHandler(sys.stdout)
            buffered.setFormatter(logging.Formatter("%(message)s"))
            access_log.addHandler(buffered)
            access_log.propagate = False
    return Gateway(cfg or settings(), options or GatewayOptions.from_env())
