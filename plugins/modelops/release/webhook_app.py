"""The receiver of MLflow's release webhook, mounted by the plugin on Airflow's API server.

``POST /modelops-webhooks/mlflow``: a delivery of ``model_version_alias.created`` that sets
``challenger`` starts that version's ``model_release`` run (:func:`start_alias_release`),
within the request, so the answer says what happened:

====  =======================================================================================
201   started (``dag_run_id`` in the answer)
200   already started, or nothing to do (another event or alias, the platform staged it …)
400   malformed, stale (timestamp outside MODELOPS_RELEASE_WEBHOOK_MAX_AGE_S) or replayed
401   unsigned, or a signature that does not match the secret
404   webhooks are off (MODELOPS_RELEASE_WEBHOOKS=off)
422   a model name the platform cannot release (the rule is in the answer)
503   MLflow or Airflow failed: MLflow retries the delivery (same id, let through again)
====  =======================================================================================

Every answer is counted in ``modelops_release_webhook_deliveries_total{outcome}``, served at
``GET /modelops-webhooks/metrics`` (per API-server process).

Why here: the receiver's only job is to start an Airflow run, and the API server is the
process that takes those; it is already running and reachable from MLflow (the Airflow URL),
so there is no further port, process, health check or compose service to keep. MLflow's
HMAC signature authenticates the caller (Airflow does not authenticate a plugin's app); the
run is triggered through Airflow's REST API as the platform's admin, so it is recorded and
authorized like any other trigger.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from modelops.airflow_client import AirflowClient, AirflowError
from modelops.config import Settings
from modelops.errors import ModelopsError
from modelops.names import model_name_problem
from modelops.registry.lifecycle import CHALLENGER
from modelops.release.autostart import RELEASE_DAG, Registry, Releases, start_alias_release
from modelops.release.webhooks import ALIAS_CREATED, Refused, ReplayGuard, alias_event, check_delivery, parse_event

PREFIX = "/modelops-webhooks"
OUTCOMES = ("started", "already_started", "skipped", "ignored", "error", "refused_disabled", "refused_unsigned",
            "refused_forged", "refused_stale", "refused_replayed", "refused_malformed", "refused_overloaded",
            "refused_model_name")

METRICS = CollectorRegistry()
DELIVERIES = Counter("modelops_release_webhook_deliveries", "MLflow webhook deliveries received, by outcome "
                     "(refused_* were not acted on)", ["outcome"], registry=METRICS)
for _outcome in OUTCOMES:
    DELIVERIES.labels(_outcome)


@dataclass
class AirflowReleases:
    """:class:`Releases` through Airflow's REST API (a run id that exists already is not an error)."""

    client: AirflowClient

    def exists(self, run_id: str) -> bool:
        try:
            self.client.request("GET", f"/api/v2/dags/{RELEASE_DAG}/dagRuns/{run_id}")
        except AirflowError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    def start(self, run_id: str, conf: Mapping[str, Any]) -> bool:
        note = f"started by MLflow's webhook: alias {CHALLENGER} set on {conf['model']} v{conf['version']}"
        try:
            self.client.trigger(RELEASE_DAG, conf, run_id=run_id, note=note)
        except AirflowError:
            if self.exists(run_id):  # 409: two deliveries of one event, or the poll was first
                return False
            raise
        return True


def _warm_up() -> None:
    import mlflow.tracking  # noqa: F401  (MlflowClient and its REST stores)


def _answer(outcome: str, status: int, detail: str, **extra: Any) -> JSONResponse:
    DELIVERIES.labels(outcome).inc()
    return JSONResponse({"outcome": outcome, "detail": detail, **extra}, status_code=status)


def create_app(cfg: Settings | None = None, *, registry: Callable[[], Registry] | None = None,
               releases: Callable[[], Releases] | None = None, clock: Callable[[], float] = time.time) -> FastAPI:
    """The receiver app; ``registry`` / ``releases`` / ``clock`` replace MLflow, Airflow and time in tests."""
    from modelops.config import settings

    def current() -> Settings:
        return cfg or settings()

    def make_registry() -> Registry:
        from modelops.registry.mlflow_registry import MlflowRegistry

        return registry() if registry else MlflowRegistry.from_settings(current())

    def make_releases() -> Releases:
        from modelops.credentials import airflow_password

        if releases:
            return releases()
        c = current()
        return AirflowReleases(AirflowClient(c.airflow_api_url, c.airflow_user, airflow_password(c)))

    guard = ReplayGuard(current().release_webhook_max_age_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if current().release_webhooks == "on" and registry is None:
            # MLflow's client takes seconds to import on a busy machine: not on the first delivery's clock.
            threading.Thread(target=_warm_up, name="modelops-webhook-warm-up", daemon=True).start()
        yield

    app = FastAPI(title="modelops MLflow webhook receiver", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(METRICS), media_type=CONTENT_TYPE_LATEST)

    @app.post("/mlflow")
    async def receive(request: Request) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        from modelops.registry.webhooks import accepted_secrets

        body = await request.body()
        c = current()
        if c.release_webhooks == "off":
            return _answer("refused_disabled", 404, "release webhooks are off (MODELOPS_RELEASE_WEBHOOKS=off); "
                                                    "release_on_staging's poll starts releases")
        try:
            delivery = check_delivery(request.headers, body, accepted_secrets(c), guard, clock())
            event, data = parse_event(body)
            if event != ALIAS_CREATED:
                return _answer("ignored", 200, f"event {'.'.join(event)}: only {'.'.join(ALIAS_CREATED)} "
                                               "starts a release")
            alias = alias_event(data)
        except Refused as exc:
            return _answer(f"refused_{exc.reason}", exc.status, str(exc))
        if alias.alias != CHALLENGER:
            return _answer("ignored", 200, f"alias {alias.alias}: only {CHALLENGER} starts a release")
        problem = model_name_problem(alias.model, "data.name")
        if problem:
            return _answer("refused_model_name", 422, problem)
        try:
            result = await run_in_threadpool(start_alias_release, make_registry(), make_releases(), alias.model,
                                             alias.version)
        except (ModelopsError, OSError) as exc:  # requests' errors are OSErrors
            guard.forget(delivery.delivery_id)  # MLflow retries a 503 with the same delivery id
            return _answer("error", 503, f"{alias.model} v{alias.version}: {exc}")
        return _answer(result.outcome, 201 if result.outcome == "started" else 200,
                       result.detail or f"{alias.model} v{result.version}: {result.outcome.replace('_', ' ')}",
                       model=result.model, version=result.version, dag_run_id=result.run_id)

    return app
