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

from modelops.config import Settings, settings
from modelops.documents.routes import (
    Routes,
    choose_version,
    routes_to_dict,
)
from modelops.gateway.delay import LoopLag, RequestTiming, TritonDelays
from modelops.gateway.edge import EdgeServing
from modelops.gateway.explain.scoring import ExplainPlan
from modelops.gateway.feedback.endpoint import FeedbackServing
from modelops.gateway.feedback.tokens import resolve_secret
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
from modelops.gateway.logs.accesslog import BufferedLineHandler, direct_sink
from modelops.gateway.logs.eventlog import (
    EventLogs,
    SpoolConfig,
)
from modelops.gateway.logs.sampling import ScoredSampling
from modelops.gateway.lookup.answer import LookupServing
from modelops.gateway.lookup.onlinefeatures import OnlineFeatures
from modelops.gateway.lookup.precomputed import PrecomputedScores
from modelops.gateway.metrics import CollapseWatch, ScoreWindow
from modelops.gateway.options import GatewayOptions
from modelops.gateway.pollers import GatewayPollers
from modelops.gateway.protocol.contract import RequestContract, compile_contract
from modelops.gateway.protocol.openapi import add_model_paths, build_openapi
from modelops.gateway.shadow.mirror import ShadowMirroring
from modelops.gateway.triton.pool import TritonPool
from modelops.modelspec.recommender import recommender_contract, recommender_feature_names
from modelops.objectstore import ObjectStore

log = logging.getLogger(__name__)
access_log = logging.getLogger("modelops.gateway.access")

_PREDICT = re.compile(r"^/v1/models/([A-Za-z0-9_.-]{1,128})/(?:predict|invocations)$")
_REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_KNOWN_PATHS = frozenset({"/v1/feedback", "/metrics", "/healthz", "/v1/routes", "/openapi.json"})
_JSON_ENCODE = msgspec.json.Encoder().encode
_JSON_DECODE = msgspec.json.Decoder().decode


class Gateway(GatewayPollers, LookupServing, EdgeServing, FeedbackServing, ShadowMirroring):
    """The ASGI application. Build with :func:`create_app`."""

    def __init__(self, cfg: Settings, options: GatewayOptions) -> None:
        self.cfg = cfg
        self.options = options
        # The feature-lookup form is the recommender's: its contract and feature order come from its spec.
        self.contract: RequestContract = compile_contract(recommender_contract())
        self.names = list(recommender_feature_names())
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
        self._apply_routes(self._with_specs(updated))  # specs first (modelops.gateway.protocol.specs), then the routes
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


def create_app(cfg: Settings | None = None, options: GatewayOptions | None = None) -> Gateway:
    """The ASGI app (uvicorn factory): settings from the environment, options from ``serve``.

    Each uvicorn worker process calls this, so logging (one JSON line per request on
    stdout, written in batches: modelops.gateway.logs.accesslog) is set up here rather than in
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
