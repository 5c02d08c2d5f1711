"""The gateway's edge for models served from their spec: the tabular form and the Open Inference Protocol v2.

A mixin of :class:`modelops.gateway.app.Gateway`, on the compiled specs of the routed versions
(:mod:`modelops.gateway.protocol.specs`); a version without a spec is the reference recommender, served by its
feature-lookup path and, on the Open Inference Protocol, by its spec (FP32 ``features`` in, ``score`` out).

The version that serves a request is chosen first (by the spec's routing key, the value of the
first row; a model without one is split by request id, not sticky), and **that version's contract
judges the request**: during a release whose canary changed its signature, a caller routed to the
canary is judged by the canary's contract. A rejected request never reaches Triton.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from modelops.documents.routes import Routes, VersionRef, choose_version, routed_versions, user_hash
from modelops.gateway.delay import RequestTiming, origin
from modelops.gateway.explain.spec import explain_problem, explain_rows
from modelops.gateway.feedback.outcomes import prediction_columns
from modelops.gateway.feedback.tokens import TokenClaims, issue_token
from modelops.gateway.http import HTTPError, Send, error, respond, respond_json
from modelops.gateway.logs.eventlog import model_sample_record, prediction_record
from modelops.gateway.logs.spool import SpoolFull
from modelops.gateway.metrics import ScoreWindow
from modelops.gateway.protocol.forms import (
    BadInput,
    EdgeModel,
    Inputs,
    predictions,
    sample_features,
    summary,
    tabular_inputs,
)
from modelops.gateway.protocol.oip import infer_answer, model_metadata, parse_infer
from modelops.gateway.protocol.specs import RoutedSpecs
from modelops.gateway.triton.inference import TritonFailed, TritonUnavailable
from modelops.serving.spec_reconcile import spec_key

log = logging.getLogger(__name__)
T = TypeVar("T")
OIP_MODEL = re.compile(r"^/v2/models/([A-Za-z0-9_.-]{1,128})(/ready|/infer)?$")
_JSON_ENCODE = msgspec.json.Encoder().encode
_JSON_DECODE = msgspec.json.Decoder().decode


class EdgeServing(RoutedSpecs):
    """Spec-served models at the edge (mixed into the Gateway; the attributes are the Gateway's)."""

    store: Any
    routes: dict[str, Routes]
    routes_loaded: bool
    triton: Any
    secret: bytes
    logs: Any
    windows: dict[tuple[str, int], ScoreWindow]
    options: Any
    contract: Any
    sampling: Any
    m_requests: Any
    m_errors: Any
    m_latency: Any
    m_latency_origin: Any
    _access: Callable[..., None]
    _deadline_s: Callable[[dict[str, str]], float]
    _unavailable: Callable[[str, str], HTTPError]
    _mirror_tensors: Callable[..., None]  # modelops.gateway.shadow.mirror: after the answer, to a shadow version

    # ------------------------------------------------------------------ the tabular form
    async def _predict_tabular(self, path: str, routes: Routes, document: Any, size: int, headers: dict[str, str],
                               request_id: str, send: Send, timing: RequestTiming, query_string: bytes = b"") -> None:
        model = routes.model
        stable = self._edge_of(model, routes.stable)
        key_value = _routing_value(stable, document)
        version = choose_version(routes, key_value if key_value is not None else request_id)
        edge = self._edge_of(model, version)
        labels = (("model", model), ("version", str(version.version)))
        try:
            violation = edge.check(document, "$")
            if violation is not None:
                raise HTTPError(400, violation.to_body())
            query = self._query_options(edge, query_string)
            try:
                inputs, rows, key_value = tabular_inputs(edge, document)
            except BadInput as exc:
                raise HTTPError(400, exc.violation.to_body()) from exc
            deadline_s = self._deadline_s(headers)
        except HTTPError:
            self.m_errors.inc((("model", model), ("version", "none"), ("class", "contract")))
            raise
        outputs = await self._infer(routes, version, labels, inputs, edge.output_names, deadline_s, timing)
        stable_call_s = timing.inference_s  # before any explanation's calls: the shadow's pair
        explanations = None
        if query["explain"]:  # the same version, within the same deadline
            explanations = await self._explain_tabular(edge, version, labels, inputs, outputs, int(query["top_k"]),
                                                       request_id, deadline_s, timing)
        token, variant = await self._log_prediction(routes, version, labels, key_value, rows, outputs, request_id,
                                                    timing)
        self._sample(edge, version, inputs, outputs, request_id)
        answer = {"predictions": predictions(outputs), "request_id": request_id, "model": model,
                  "model_version": version.version, "model_id": version.label, "variant": variant,
                  "feedback_token": token}
        if explanations is not None:
            answer["explanations"] = explanations
        await respond(send, 200, _JSON_ENCODE(answer), request_id, self._answer_headers(version, token, timing))
        self._mirror_tensors(routes, version, edge, request_id, inputs, outputs, stable_call_s)
        self._answered(path, request_id, labels, version, variant, timing, size, rows)

    def _query_options(self, edge: EdgeModel, query_string: bytes) -> dict[str, Any]:
        """The predict query options (``explain``, ``top_k``: the platform's query contract), checked."""
        query: dict[str, Any] = {"explain": False, "top_k": 5}
        if query_string and self.contract.query is not None:
            query, violation = self.contract.query.parse(query_string)
            if violation is not None:
                raise HTTPError(400, violation.to_body())
        problem = explain_problem(edge) if query["explain"] else None
        if problem is not None:
            raise error(400, "not_explainable", problem)
        return query

    async def _explain_tabular(self, edge: EdgeModel, version: VersionRef, labels: tuple[tuple[str, str], ...],
                               inputs: Inputs, outputs: Mapping[str, npt.NDArray[Any]], top_k: int, request_id: str,
                               deadline_s: float, timing: RequestTiming) -> list[dict[str, Any]]:
        return await self._within_deadline(explain_rows(
            self.triton, edge, version.version, inputs[0][1], np.asarray(outputs[edge.output_names[0]]), top_k,
            request_id, n_permutations=self.options.explain_permutations,
            concurrency=self.options.explain_concurrency), labels, deadline_s, timing)

    # ------------------------------------------------------------------ the Open Inference Protocol
    async def _oip(self, method: str, path: str, headers: dict[str, str], request_id: str,
                   read_body: Callable[[], Any], send: Send) -> None:
        if path in ("/v2/health/live", "/v2/health/ready"):
            ready = path.endswith("live") or self.routes_loaded
            await respond(send, 200 if ready else 503, b"", request_id, content_type=b"text/plain")
            return
        if path == "/v2":
            await respond_json(send, 200, {"name": "modelops-gateway", "version": "1", "extensions": [
                "binary_tensor_data"]}, request_id)
            return
        match = OIP_MODEL.match(path)
        if match is None:
            raise HTTPError(404, {"error": f"no such endpoint: {path}"})
        model, tail = match.group(1), match.group(2) or ""
        routes = self.routes.get(model)
        if routes is None:
            if not self.routes_loaded:
                raise HTTPError(503, {"error": "routes not loaded yet (object store unreachable)"})
            raise HTTPError(404, {"error": f"unknown model {model!r}: no routes document routes/{model}.json"})
        if tail == "/ready" and method == "GET":
            await respond(send, 200, b"", request_id, content_type=b"text/plain")
        elif tail == "" and method == "GET":
            versions = sorted(routed_versions(routes))
            await respond_json(send, 200, model_metadata(self._edge_of(model, routes.stable).spec, versions),
                               request_id)
        elif tail == "/infer" and method == "POST":
            timing = RequestTiming()
            try:
                await self._oip_infer(path, routes, headers, request_id, await read_body(), send, timing)
            except HTTPError as exc:
                exc.headers.extend(timing.headers(timing.parts()))
                raise
        else:
            raise HTTPError(405, {"error": f"{method} is not allowed on {path}"})

    async def _oip_infer(self, path: str, routes: Routes, headers: dict[str, str], request_id: str,
                         body: bytes, send: Send, timing: RequestTiming) -> None:
        model = routes.model
        try:
            if headers.get("content-encoding", "identity") != "identity":
                raise HTTPError(415, {"error": f"Content-Encoding {headers['content-encoding']!r} is not "
                                               "accepted; send the body uncompressed"})
            document, binary = _oip_body(headers, body)
            stable = self._edge_of(model, routes.stable)
            first = parse_infer(stable, document, binary)
            version = choose_version(routes, first.key_value if first.key_value is not None else request_id)
            edge = self._edge_of(model, version)
            request = first if edge is stable else parse_infer(edge, document, binary)
            deadline_s = self._deadline_s(headers)
        except BadInput as exc:
            self.m_errors.inc((("model", model), ("version", "none"), ("class", "contract")))
            raise HTTPError(400, {"error": exc.violation.message}) from exc
        except HTTPError as exc:
            self.m_errors.inc((("model", model), ("version", "none"), ("class", "contract")))
            raise HTTPError(exc.status, {"error": exc.body.get("message") or exc.body.get("error", "")},
                            exc.headers) from exc
        labels = (("model", model), ("version", str(version.version)))
        try:
            outputs = await self._infer(routes, version, labels, request.inputs, tuple(n for n, _ in request.outputs),
                                        deadline_s, timing)
        except HTTPError as exc:
            raise HTTPError(exc.status, {"error": exc.body.get("message", "")}, exc.headers) from exc
        token, variant = await self._log_prediction(routes, version, labels, request.key_value, request.rows,
                                                    outputs, request_id, timing)
        self._sample(edge, version, request.inputs, outputs, request_id)
        body_out, header_length = infer_answer(model, version.version, request, outputs, {
            "request_id": request_id, "model_id": version.label, "variant": variant, "feedback_token": token})
        extra = self._answer_headers(version, token, timing)
        if header_length is None:
            await respond(send, 200, body_out, request_id, extra)
        else:
            await respond(send, 200, body_out, request_id,
                          [(b"inference-header-content-length", str(header_length).encode()), *extra],
                          content_type=b"application/octet-stream")
        self._mirror_tensors(routes, version, edge, request_id, request.inputs, outputs, timing.inference_s)
        self._answered(path, request_id, labels, version, variant, timing, len(body), request.rows)

    # ------------------------------------------------------------------ shared by both forms
    async def _infer(self, routes: Routes, version: VersionRef, labels: tuple[tuple[str, str], ...],
                     inputs: Inputs, outputs: tuple[str, ...], deadline_s: float,
                     timing: RequestTiming) -> dict[str, npt.NDArray[Any]]:
        self._check_spool(labels)
        answer: dict[str, npt.NDArray[Any]] = await self._within_deadline(
            self.triton.infer_tensors(routes.model, version.version, inputs, outputs), labels, deadline_s, timing)
        return answer

    async def _within_deadline(self, call: Awaitable[T], labels: tuple[tuple[str, str], ...], deadline_s: float,
                               timing: RequestTiming) -> T:
        """Await Triton ``call`` within what is left of the request's deadline; its time counts as inference."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(max(deadline_s - timing.total_s(), 1e-6)):
                return await call
        except (TimeoutError, TritonUnavailable, TritonFailed) as exc:
            raise self._triton_error(exc, labels, deadline_s) from exc
        finally:
            timing.inference_s += time.perf_counter() - started

    def _check_spool(self, labels: tuple[tuple[str, str], ...]) -> None:
        """503 (counted) before any work when the prediction log's spool is over its budget."""
        try:
            self.logs.committers["predictions"].check_budget()
        except SpoolFull as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("spool_full", str(exc)) from exc

    def _triton_error(self, exc: BaseException, labels: tuple[tuple[str, str], ...], deadline_s: float) -> HTTPError:
        """The answer to a failed Triton call (504 deadline, 503 unavailable, 502 refused), counted."""
        if isinstance(exc, TimeoutError):
            self.m_errors.inc((*labels, ("class", "timeout")))
            return error(504, "inference_timeout", f"no answer from Triton within {deadline_s * 1000:.0f} ms",
                         deadline_ms=round(deadline_s * 1000, 3))
        self.m_errors.inc((*labels, ("class", "upstream")))
        if isinstance(exc, TritonUnavailable):
            return self._unavailable("triton_unavailable", str(exc))
        return error(502, "triton_failed", str(exc))

    async def _log_prediction(self, routes: Routes, version: VersionRef, labels: tuple[tuple[str, str], ...],
                              key_value: str | None, rows: int, outputs: Mapping[str, npt.NDArray[Any]],
                              request_id: str, timing: RequestTiming) -> tuple[str, str]:
        """The feedback token and variant; the prediction record on disk before the answer (as the recommender's)."""
        now = time.time()
        model = routes.model
        token = issue_token(self.secret, TokenClaims(request_id, model, version.version, version.sha256[:12], now))
        variant = "canary" if routes.canary is not None and version == routes.canary else "stable"
        n, total, squares, peak, std = summary(outputs)
        logged = timing.parts()
        prediction, probabilities = prediction_columns(self._edge_of(model, version).spec, outputs, rows)
        try:
            await self.logs.committers["predictions"].append(prediction_record(
                request_id=request_id, feedback_token=token, ts=now, model=model, model_version=version.version,
                model_sha256=version.sha256, user_hash=user_hash(key_value) if key_value is not None else "",
                n_items=rows, score_mean=total / n if n else 0.0, score_max=peak, score_std=std,
                latency_ms=sum(logged.values()) * 1000.0, delay_origin=origin(logged), prediction=prediction,
                probabilities=probabilities))
        except SpoolFull as exc:
            self.m_errors.inc((*labels, ("class", "unavailable")))
            raise self._unavailable("spool_full", str(exc)) from exc
        if n:
            window = self.windows.get((model, version.version))
            if window is None:
                window = self.windows[(model, version.version)] = ScoreWindow(self.options.score_window_s)
            window.add(now, int(n), total, squares, peak)
        return token, variant

    def _sample(self, edge: EdgeModel, version: VersionRef, inputs: Inputs, outputs: Mapping[str, npt.NDArray[Any]],
                request_id: str) -> None:
        """Queue the request's rows for the model-samples log (sampled as the recommender's scored samples)."""
        if not edge.spec.features or not edge.output_names or not self.sampling.take(request_id, time.monotonic()):
            return  # a tensor model has no columns to log; the features are copied only for a sampled request
        features = sample_features(edge, inputs)
        if features is None:
            return
        self.logs.committers["model_samples"].append_nowait(model_sample_record(
            request_id=request_id, ts=time.time(), model=edge.spec.name, model_version=version.version,
            spec=spec_key(edge.spec.name, version.version), features=features,
            outputs=np.asarray(outputs[edge.output_names[0]])))

    def _answer_headers(self, version: VersionRef, token: str, timing: RequestTiming) -> list[tuple[bytes, bytes]]:
        return [(b"x-model-version", version.label.encode()),
                (b"x-inference-latency", f"{timing.inference_s * 1000.0:.3f}".encode()),
                (b"x-feedback-token", token.encode()), *timing.headers(timing.parts())]

    def _answered(self, path: str, request_id: str, labels: tuple[tuple[str, str], ...], version: VersionRef,
                  variant: str, timing: RequestTiming, size: int, rows: int) -> None:
        total_s = timing.total_s()
        self.m_requests.inc((*labels, ("code", "200")))
        self.m_latency.observe((*labels, ("source", "online")), total_s)
        delay_origin = origin(timing.parts())
        self.m_latency_origin.observe((labels[0], ("origin", delay_origin)), total_s)
        self._access(request_id, "POST", path, 200, model=labels[0][1], version=version.version, model_id=version.label,
                     variant=variant, inference_time_ms=round(timing.inference_s * 1000, 3),
                     latency_ms=round(total_s * 1000, 3), input_size_bytes=size, n_items=rows,
                     delay_origin=delay_origin)


def _routing_value(edge: EdgeModel, document: Any) -> str | None:
    """The routing key's value in the first row of a tabular body, before any other check (None: none)."""
    key = edge.spec.routing_key
    if key is None or not isinstance(document, Mapping) or len(document) != 1:
        return None
    ((form, body),) = document.items()
    if form == "dataframe_split" and isinstance(body, Mapping):
        columns, data = body.get("columns"), body.get("data")
        if isinstance(columns, list) and key in columns and isinstance(data, list) and data \
                and isinstance(data[0], list) and len(data[0]) == len(columns):
            return str(data[0][columns.index(key)])
        return None
    if isinstance(body, list) and body and isinstance(body[0], Mapping) and key in body[0]:
        return str(body[0][key])
    if isinstance(body, Mapping) and isinstance(body.get(key), list) and body[key]:
        return str(body[key][0])
    return None


def _oip_body(headers: dict[str, str], body: bytes) -> tuple[Any, bytes]:
    """The JSON header and the binary tensors of an infer body (binary only with the extension's header)."""
    raw = headers.get("inference-header-content-length")
    if raw is None:
        json_part, binary = body, b""
    else:
        if not raw.isdigit() or int(raw) > len(body):
            raise HTTPError(400, {"error": f"Inference-Header-Content-Length {raw!r} must be a length within the "
                                           f"body of {len(body)} bytes"})
        json_part, binary = body[:int(raw)], body[int(raw):]
    try:
        return _JSON_DECODE(json_part), binary
    except (msgspec.DecodeError, ValueError) as exc:
        raise HTTPError(400, {"error": f"the inference request is not valid JSON: {exc}"}) from exc
