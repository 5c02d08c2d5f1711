"""The gateway's background work and metrics: routes and feature polling, Triton statistics, the
event loop's lag, the prediction-collapse watch, and the metric families they and the handlers feed.

A mixin of :class:`modelops.gateway.app.Gateway` (which owns the state declared below); kept apart
so the request path in ``app.py`` stays readable. Every loop survives any error of one round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from modelops.config import Settings
from modelops.documents.routes import ROUTES_PREFIX, Routes, load_routes, model_from_key
from modelops.errors import ContractError, ModelopsError, ObjectStoreError
from modelops.gateway.delay import LoopLag, TritonDelays, parse_stats
from modelops.gateway.logs.eventlog import EventLogs
from modelops.gateway.logs.sampling import ScoredSampling
from modelops.gateway.lookup.onlinefeatures import OnlineFeatures
from modelops.gateway.metrics import CollapseWatch, Registry, ScoreWindow, route_weights
from modelops.gateway.options import GatewayOptions
from modelops.gateway.triton.pool import TritonPool
from modelops.objectstore import ObjectStore

log = logging.getLogger("modelops.gateway.app")


class GatewayPollers:
    """Background loops and metric families of the gateway (state owned by the Gateway)."""

    cfg: Settings
    options: GatewayOptions
    store: ObjectStore
    features: OnlineFeatures
    logs: EventLogs
    triton: TritonPool
    routes: dict[str, Routes]
    routes_applied_at: dict[str, str]
    routes_loaded: bool
    windows: dict[tuple[str, int], ScoreWindow]
    watch: CollapseWatch
    sampling: ScoredSampling
    loop_lag: LoopLag
    triton_delays: TritonDelays
    triton_called: dict[tuple[str, int], float]
    registry: Registry

    # ------------------------------------------------------------------ metrics
    def _init_metrics(self) -> None:
        r = self.registry = Registry()
        self.m_requests = r.counter("modelops_gateway_requests_total",
                                    "Answered predictions by model, Triton version and status code.")
        self.m_errors = r.counter("modelops_gateway_errors_total",
                                  "Failed predictions by model, version ('none' before routing) and class "
                                  "(contract, upstream, timeout, unavailable).")
        self.m_latency = r.histogram("modelops_gateway_request_duration_seconds",
                                     "Prediction latency inside the gateway by model, version and source "
                                     "(online: scored by Triton; precomputed: from a snapshot).")
        self.m_latency_origin = r.histogram("modelops_gateway_request_duration_by_origin_seconds",
                                            "Prediction latency by model and delay origin (the part with the "
                                            "most time: gateway, feature_lookup, triton_queue, triton_compute).")
        self.m_delay = r.histogram("modelops_gateway_delay_seconds",
                                   "Time of each prediction spent in each delay origin, by model and origin.")
        self.m_feedback = r.counter("modelops_gateway_feedback_events_total",
                                    "Accepted feedback events by model, version and action.")
        self.m_feedback_rejected = r.counter("modelops_gateway_feedback_rejected_total",
                                             "Refused feedback by reason.")
        self.m_std = r.gauge("ml_prediction_std", "Rolling std of prediction scores by model and version.")
        self.m_max = r.gauge("ml_prediction_max", "Rolling max of prediction scores by model and version.")
        self.m_collapse = r.gauge("ml_prediction_collapse",
                                  "1 while a version's score std stays below the collapse threshold.")
        self.m_feature_age = r.gauge("modelops_gateway_feature_snapshot_age_seconds",
                                     "Seconds since the loaded feature snapshot was published.")
        self.m_feature_errors = r.gauge("modelops_gateway_feature_reload_errors",
                                        "Failed feature snapshot reloads since start.")
        self.m_routes_revision = r.gauge("modelops_gateway_routes_revision", "Applied routes revision by model.")
        self.m_route_weight = r.gauge("modelops_gateway_route_weight",
                                      "Share of traffic the applied routes send to a model version, by variant.")
        self.m_routes_errors = r.counter("modelops_gateway_routes_errors_total",
                                         "Unreadable, invalid or stale routes documents by model.")
        self.m_backlog_bytes = r.gauge("modelops_gateway_spool_backlog_bytes",
                                       "Bytes of event-log segments not yet uploaded.")
        self.m_backlog_segments = r.gauge("modelops_gateway_spool_backlog_segments",
                                          "Event-log segments not yet uploaded.")
        self.m_upload_failures = r.gauge("modelops_gateway_spool_upload_failures",
                                         "Failed event-log upload passes since start.")
        self.m_sample_share = r.gauge("modelops_gateway_scored_sample_share",
                                      "Share of answered requests whose scored items are logged now "
                                      "(MODELOPS_SCORED_SAMPLE_SHARE, lowered above MODELOPS_SCORED_SAMPLE_MAX_PER_S).")
        self.m_triton_retries = r.counter("modelops_gateway_triton_retries_total",
                                          "Triton calls sent again to another server, by reason (unreachable: "
                                          "refused, reset or lost connection or HTTP 503; not_served: the version "
                                          "is not loaded on the first server; lost: the server failed its health "
                                          "check while the call was in flight, so the call was sent elsewhere; hedged: "
                                          "unanswered after 0.5 s, also sent to the next server).")

    def _refresh_gauges(self, now: float) -> None:
        self.m_feature_age.set((), self.features.age_s(now))
        self.m_feature_errors.set((), float(self.features.errors))
        self.m_backlog_bytes.set((), float(self.logs.backlog_bytes))
        self.m_backlog_segments.set((), float(self.logs.backlog_segments))
        self.m_upload_failures.set((), float(self.logs.upload_failures))
        self.m_sample_share.set((), self.sampling.current)
        self.m_triton_retries.values = {(("reason", reason),): float(n) for reason, n in self.triton.retries.items()}
        for (model, version), window in self.windows.items():
            labels = (("model", model), ("version", str(version)))
            _n, std, peak = window.stats(now)
            self.m_std.set(labels, std)
            self.m_max.set(labels, peak)
            self.m_collapse.set(labels, 1.0 if self.watch.flagged(f"{model}/{version}") else 0.0)

    # ------------------------------------------------------------------ background loops
    async def _every(self, interval_s: float, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(work)
            except Exception:  # a poller must never die
                log.exception("background %s failed", getattr(work, "__name__", work))

    def _read_routes(self) -> dict[str, Routes] | None:
        """The routes table as the store holds it now (None: the store is unreachable, keep the last good)."""
        try:
            keys = list(self.store.list_keys(ROUTES_PREFIX))
        except ObjectStoreError as exc:
            self.m_routes_errors.inc((("model", "*"),))
            log.warning("routes poll failed (keeping the last good routes): %s", exc)
            return None
        updated = dict(self.routes)
        seen: set[str] = set()
        for key in keys:
            model = model_from_key(key)
            if model is None:
                continue
            seen.add(model)
            try:
                routes = load_routes(self.store.get_bytes(key))
                if routes.model != model:
                    raise ContractError(f"routes.model={routes.model!r} differs from its key {key!r}")
            except (ContractError, ObjectStoreError) as exc:
                self.m_routes_errors.inc((("model", model),))
                log.warning("routes %s unusable (keeping revision %s): %s", key,
                            updated[model].revision if model in updated else "none", exc)
                continue
            current = updated.get(model)
            if current is None or routes.revision > current.revision:
                updated[model] = routes
            elif routes.revision < current.revision or routes != current:
                self.m_routes_errors.inc((("model", model),))  # stale or changed without a new revision
        for model in set(updated) - seen:
            del updated[model]  # the document was deleted: the model is no longer served
        return updated

    def _apply_routes(self, updated: dict[str, Routes]) -> None:
        """Serves ``updated`` from now on (each model's new revision logged with the time it was applied)."""
        for model, routes in updated.items():
            current = self.routes.get(model)
            if current is None or routes.revision != current.revision:
                self.routes_applied_at[model] = datetime.now(UTC).isoformat()
                log.info("routes %s revision %d applied", model, routes.revision)
        self.routes = updated  # one assignment: requests see the old or the new table, never half
        self.routes_loaded = True
        for model, routes in updated.items():
            self.m_routes_revision.set((("model", model),), float(routes.revision))
        self.m_route_weight.values = route_weights(updated.values())  # one assignment, like the table

    async def _loop_lag_probe(self, interval_s: float = 0.02) -> None:
        """How late a fixed sleep wakes up: the loop's lag, the gateway's part of a late Triton answer."""
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(interval_s)
            now = time.perf_counter()
            self.loop_lag.add(now, now - asked - interval_s)

    async def _triton_stats_loop(self) -> None:
        """Reads Triton's statistics of each version called in the last minute (the delay origin's split)."""
        while True:
            await asyncio.sleep(self.options.triton_stats_poll_s)
            now = time.monotonic()
            for (model, version), last in list(self.triton_called.items()):
                if now - last > 60.0:
                    del self.triton_called[(model, version)]
                    self.triton_delays.forget(model, version)
                    continue
                try:
                    async with asyncio.timeout(max(1.0, self.options.triton_stats_poll_s)):
                        reading = parse_stats(await self.triton.version_stats(model, version), version)
                except (ModelopsError, ValueError, TimeoutError) as exc:
                    log.debug("Triton statistics of %s v%d unreadable: %s", model, version, exc)
                    continue
                except Exception:  # the delay split must not die with one odd answer
                    log.exception("Triton statistics of %s v%d failed", model, version)
                    continue
                if reading is not None:
                    self.triton_delays.observe(model, version, reading)

    async def _watch_loop(self) -> None:
        from modelops.notify.apprise_notifier import AppriseNotifier
        from modelops.notify.message import Message as Note

        notifier = AppriseNotifier(self.cfg.notify_url_list)
        while True:
            await asyncio.sleep(1.0)
            now = time.time()
            self._refresh_gauges(now)
            for (model, version), window in list(self.windows.items()):
                n, std, peak = window.stats(now)
                key = f"{model}/{version}"
                if self.watch.observe(key, n, std, now):
                    self.m_collapse.set((("model", model), ("version", str(version))), 1.0)
                    note = Note(
                        title=f"Prediction collapse: {model} version {version}",
                        body=(f"The score std of {model} v{version} stayed below {self.watch.threshold} for "
                              f"{self.watch.hold_s:.0f} s: the model answers (almost) the same for everyone."),
                        severity="warning", key=f"collapse:{key}",
                        facts={"model": model, "version": str(version), "std": f"{std:.6f}",
                               "max": f"{peak:.6f}", "scores in window": str(n)})
                    try:
                        await asyncio.to_thread(notifier.send, note)
                    except ModelopsError as exc:
                        log.warning("collapse notification failed: %s", exc)
                    except Exception:  # an apprise defect must not end the collapse watch
                        log.exception("collapse notification failed")
                    log.warning("prediction collapse %s: std %.6f", key, std)
