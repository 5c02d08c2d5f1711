"""Prometheus, Pushgateway, Alertmanager and the alert relay against the real stack.

The observability services of :mod:`modelops.stack.observability` (Debian's binaries,
unpacked by ``make prometheus``) start on loopback beside the session stack, scraping a
test gateway (``tests/integration/test_gateway.py``'s: its test models, one of which
answers a constant score, collapse hold 2 s), the stack's Triton and the session's
Pushgateway every second, with the repository's rule files. Under generated traffic, a
routes change (a release step), a release phase pushed through the canary's checkpoint
store, and the real ``feedback_join`` and ``nightly_drift`` DAG runs of the session
(the ``batch_runs`` fixture, shared with test_job_dags.py: their tasks push to the
session Pushgateway as in production):

* every dashboard panel's PromQL (template variables filled: the batch-result panels with
  the model the DAGs ran for, the live panels with the test gateway's model) returns at
  least one series, and the pushed values are those of the runs' documents;
* Airflow's StatsD (sent by Airflow's own logger) reaches Prometheus through the bridge;
* the prediction collapse alert fires in Prometheus for the collapsed model that serves
  traffic, and reaches the platform's notifier through Alertmanager and the relay.

Without the binaries the tests fail when ``CI`` is set and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import requests

from modelops import process
from modelops.canary.machine import start as start_release
from modelops.canary.release_phase import PhasePushingStore
from modelops.canary.runner import Checkpoint, MemoryStatusStore
from modelops.canary.spec import CanarySpec
from modelops.config import Settings, settings
from modelops.documents.routes import routes_key, serialize_routes
from modelops.errors import StackError
from modelops.objectstore import ObjectStore
from modelops.observability.dashboards import DASHBOARDS, fill, queries
from modelops.observability.prometheus import Ports, binary
from modelops.stack.observability import services
from tests.integration.test_gateway import FLAT, MODEL, GatewayProcess, gateway, good_body, predict, routes_doc, served
from tests.support.batch_runs import STORY_TIMEOUT, BatchRuns
from tests.support.receiver import NotificationReceiver

pytestmark = pytest.mark.integration

__all__ = ["gateway", "served"]  # the module fixtures of the gateway tests, reused here

_BASE = int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000"))
# Beside the stack's own observability ports (+600..+603, off in the test stack); the Pushgateway is the
# session's (+617, tests/integration/conftest.py), where the stack's batch DAGs push.
PORTS = Ports(prometheus=_BASE + 610, pushgateway=_BASE + 617, alertmanager=_BASE + 612, relay=_BASE + 613,
              statsd=_BASE + 614, statsd_bridge=_BASE + 615)
PUSHED = ("modelops_drift_", "modelops_feedback_")  # the batch-result panels: filled with the batch model
LABELLED = ("modelops_outcome_",)  # the outcome panels: filled with LABELLED_MODEL (an action and a label)
LABELLED_MODEL = "churn-observed"
INTERVAL_S = 1.0


@dataclass(frozen=True)
class Observability:
    prometheus: str
    pushgateway: str
    home: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = requests.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert body["status"] == "success", f"{expr}: {body}"
        return list(body["data"]["result"])


def _binaries() -> None:
    try:
        for name in ("prometheus", "pushgateway", "alertmanager"):
            binary(name)
    except StackError as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def _wait_ready(url: str, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout_s:.0f} s: {process.tail(log, 20)}")


@pytest.fixture(scope="module")
def observability(stack_settings: Settings, gateway: GatewayProcess, session_pushgateway: str | None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observability]:
    _binaries()
    assert session_pushgateway == f"http://127.0.0.1:{PORTS.pushgateway}", session_pushgateway
    home = tmp_path_factory.mktemp("observability")
    cfg = replace(stack_settings, home=home, gateway_urls=(gateway.url,))
    started = []
    try:
        for service in services(cfg, PORTS, interval_s=INTERVAL_S, alert_group_wait_s=1.0):
            if service.name == "pushgateway":
                continue  # the session's Pushgateway runs already
            if service.prepare is not None:
                service.prepare()
            process.start(service.argv, env=service.env, log_file=service.log_file(home),
                          pid_file=service.pid_file(home))
            started.append(service)
            _wait_ready(service.health_url, service.log_file(home))
        yield Observability(f"http://127.0.0.1:{PORTS.prometheus}", f"http://127.0.0.1:{PORTS.pushgateway}", home)
    finally:
        for service in reversed(started):
            process.stop(service.pid_file(home))


def _airflow_task_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed and a successful task, as Airflow's own StatsD logger reports them (its [metrics] config)."""
    from airflow.observability.metrics.statsd_logger import get_statsd_logger

    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(PORTS.statsd),
                       "STATSD_PREFIX": "airflow", "STATSD_INFLUXDB_ENABLED": "True"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats = get_statsd_logger()
    for stat in ("ti_failures", "ti_successes"):
        stats.incr(stat, tags={"dag_id": "nightly_drift", "task_id": "publish"})


def _traffic(gw: GatewayProcess, seconds: float) -> int:
    """Requests to both versions of MODEL and to the constant-score FLAT model for ``seconds``."""
    sent, k = 0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for model in (MODEL, FLAT):
            response = predict(gw, model, good_body(f"u_{k % 40:04d}", n=5))
            assert response.status_code == 200, response.text
            sent += 1
        k += 1
    return sent


@pytest.mark.timeout(STORY_TIMEOUT)  # its setup runs the session's batch DAG story when no test did yet
def test_every_dashboard_panel_returns_series(observability: Observability, batch_runs: BatchRuns,
                                              gateway: GatewayProcess, object_store: ObjectStore,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A release step (new routes revision: the annotation and the weights) and its phase, pushed by the
    # canary's checkpoint store as the release operator wires it. First Prometheus sees revision 1.
    deadline = time.monotonic() + 30.0
    while not observability.query(f'modelops_gateway_routes_revision{{model="{MODEL}"}} == 1'):
        assert time.monotonic() < deadline, "Prometheus never scraped the gateway's routes revision 1"
        time.sleep(0.5)
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 2, 1, 2, 0.25)))
    monkeypatch.setenv("MODELOPS_PUSHGATEWAY_URL", observability.pushgateway)
    settings.cache_clear()
    try:
        store = PhasePushingStore(MemoryStatusStore())
        status, _actions = start_release(CanarySpec(), MODEL, 1, 2, time.time())
        store.save(Checkpoint(status))
        assert store.pushed_phase == "progressing"
    finally:
        monkeypatch.delenv("MODELOPS_PUSHGATEWAY_URL")
        settings.cache_clear()
    assert predict(gateway, MODEL, {"user_id": "u_0001"}).status_code == 400  # a contract error (the client's)
    _airflow_task_metrics(monkeypatch)
    _traffic(gateway, 8.0)

    labelled = _push_labelled_outcomes(observability.pushgateway)

    def model_of(expr: str) -> str:
        if any(name in expr for name in LABELLED):
            return LABELLED_MODEL
        return batch_runs.model if any(name in expr for name in PUSHED) else MODEL

    expressions = [(where, fill(expr, model_of(expr))) for d in DASHBOARDS for where, expr in queries(d)]
    empty: list[str] = []
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        _traffic(gateway, 1.0)  # the 1m/5m rates need recent samples
        empty = [f"{where}: {expr}" for where, expr in expressions if not observability.query(expr)]
        if not empty:
            break
    assert empty == [], "panels without data:\n" + "\n".join(empty)
    # The recorded P95 is a real latency, the pushed CTR the one of the rows.
    p95 = observability.query(f'model_version:modelops_gateway_request_duration_seconds:p95_5m{{model="{MODEL}"}}')
    assert {s["metric"]["version"] for s in p95} == {"1", "2"}
    assert all(0 < float(s["value"][1]) < 1.0 for s in p95), p95
    # The batch results are those of the real runs: the CTR of feedback_join's ctr_cvr.json, the drift
    # verdict and score of nightly_drift's drift.json (the second run's: the shifted features).
    version = str(batch_runs.triton_version)
    assert batch_runs.feedback_document is not None
    (row,) = [r for r in batch_runs.feedback_document["by_version"] if r["model"] == batch_runs.model]
    ctr = observability.query(f'modelops_feedback_ctr{{model="{batch_runs.model}",version="{version}"}}')
    assert [float(s["value"][1]) for s in ctr] == [pytest.approx(row["ctr"])]
    drift = json.loads(object_store.get_bytes(f"{batch_runs.drift_prefix}/drift.json"))
    selector = f'model="{batch_runs.model}",version="{version}",job="modelops_nightly_drift"'
    assert [float(s["value"][1]) for s in observability.query(f"modelops_drift_detected{{{selector}}}")] == [1.0]
    weighted = observability.query(f"modelops_drift_feature_weighted_score{{{selector}}}")
    assert {s["metric"]["feature"] for s in weighted} == {f["name"] for f in drift["features"]}
    assert observability.query(f'modelops_release_phase{{model="{MODEL}",phase="progressing"}}')
    # The realized performance of a labelled model, as the outcome job's document of the day says.
    auc = observability.query(f'modelops_outcome_performance{{model="{LABELLED_MODEL}",metric="auc"}}')
    assert [float(s["value"][1]) for s in auc] == [pytest.approx(labelled["label"]["metrics"]["auc"])]


def _push_labelled_outcomes(pushgateway: str) -> dict[str, Any]:
    """A labelled model's outcome document of today (the outcome job's builders), pushed as the job pushes it."""
    from datetime import UTC, datetime, timedelta

    from modelops.feedback.outcome_metrics import OutcomeSums, outcome_document, version_entry
    from modelops.observability.pushed import outcome_groups, push_groups

    now = datetime.now(UTC)
    sums = OutcomeSums(LABELLED_MODEL, 2, now.date().isoformat(), impressions=10, acted={"approve": 6}, labelled=4,
                       scored=4, positives=2, correct=3, log_loss_sum=2.0, squared_sum=0.5, auc_sum=3.0,
                       delay_p50_s=60.0, delay_p90_s=600.0)
    entry = version_entry(sums, ("approve",), "binary")
    doc = outcome_document(model=LABELLED_MODEL, day=sums.day, entries=[entry], start=now - timedelta(days=1),
                           end=now, window_hours=24.0)
    assert push_groups(pushgateway, outcome_groups([doc])) == 1
    return entry


def test_prediction_collapse_alert_fires_and_reaches_the_notifier(
        observability: Observability, gateway: GatewayProcess, notifications: NotificationReceiver) -> None:
    deadline = time.monotonic() + 45.0
    firing: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not firing:
        _traffic(gateway, 1.0)
        alerts = requests.get(f"{observability.prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        firing = [a for a in alerts if a["labels"]["alertname"] == "ModelopsPredictionCollapse"
                  and a["state"] == "firing"]
    assert [(a["labels"]["model"], a["labels"]["version"]) for a in firing] == [(FLAT, "1")], firing
    # MODEL serves varied scores: no collapse alert for it.
    assert observability.query(f'ml_prediction_collapse{{model="{MODEL}"}} == 1') == []

    deadline = time.monotonic() + 30.0
    relayed: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not relayed:
        relayed = [m for m in notifications.messages
                   if "ALERT ModelopsPredictionCollapse" in str(m.get("title", "")) and FLAT in str(m)]
        time.sleep(0.5)
    assert relayed, f"no relayed alert among {[m.get('title') for m in notifications.messages][-10:]}"
    assert "Runbook:" in str(relayed[0].get("message", relayed[0]))
