"""feedback_join and nightly_drift run once per test session, as Airflow runs them, on gateway traffic.

:func:`run_batch_story` is the work the ``batch_runs`` session fixture (tests/integration/conftest.py)
does once for every test that needs it: ``test_job_dags.py`` asserts the DAGs' results,
``test_observability.py`` the metrics those real runs pushed to the session's Pushgateway
(:func:`start_pushgateway`; the session stack's Airflow has ``MODELOPS_PUSHGATEWAY_URL`` pointing there).

The story: one Production model version serves through the stack's gateway; simulated users
send requests and feedback; the gateway's spool uploads the logs; ``feedback_join`` runs twice
on the same window (idempotence); ``nightly_drift`` runs on the launch day (baseline), the
feature tables shift in three known features, more traffic, and it runs again (drift).
What each step saw is recorded in :class:`BatchRuns` for the tests to assert.

The story is four DAG runs plus traffic: a test requesting the fixture carries :data:`STORY_TIMEOUT`
(the two job-DAG tests that ran it before each had the default 900 s).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.support.receiver import NotificationReceiver
from tests.support.worlds import publish_tables, release_champion

#: pytest-timeout for a test whose setup may run the whole story (``@pytest.mark.timeout(STORY_TIMEOUT)``).
STORY_TIMEOUT = 1800


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def traffic(cfg: Settings, model: str, n: int, seed: int) -> Any:
    from modelops.traffic.runner import run_traffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    spec = TrafficSpec(model=model, rate=200.0, max_requests=n, max_seconds=120.0, n_users=400, n_items=400,
                       items_per_request=(2, 6), id_width=6, default=Behaviour(0.3, 0.4, 0.2), per_version={},
                       concurrency=8, seed=seed)
    return asyncio.run(run_traffic(spec, cfg.gateway_url, progress=lambda line: None))


def wait_gateway(cfg: Settings, predicate: Any, what: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = requests.get(f"{cfg.gateway_url}/healthz", timeout=5).json()
        if predicate(body):
            return body
        time.sleep(0.5)
    raise AssertionError(f"gateway never reported {what}: {body}")


def count_rows(store: ObjectStore, prefix: str) -> int:
    import pyarrow.parquet as pq

    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, key in enumerate(k for k in store.list_keys(prefix) if k.endswith(".parquet")):
            path = Path(tmp) / f"{i}.parquet"
            path.write_bytes(store.get_bytes(key))
            rows += pq.read_metadata(path).num_rows
    return rows


def wait_logs(store: ObjectStore, prefix: str, min_rows: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    rows = 0
    while time.monotonic() < deadline:
        rows = count_rows(store, prefix)
        if rows >= min_rows:
            return rows
        time.sleep(2)
    raise AssertionError(f"only {rows} rows under {prefix} after {timeout_s:.0f} s (wanted {min_rows})")


@dataclass
class BatchRuns:
    """What the session's batch story did and saw (the tests assert on it)."""

    model: str
    version: str  # MLflow version
    triton_version: int
    day: str
    feedback_report: Any = None  # the traffic report before feedback_join
    feedback_document: dict[str, Any] | None = None  # ctr_cvr.json after the first run
    feedback_rerun_document: dict[str, Any] | None = None  # ... after the same window ran again
    baseline_tags: dict[str, str] | None = None  # the version's MLflow tags after the launch-day run
    shifted_report: Any = None  # the traffic report after the feature shift
    notifications_before_drift: int = 0  # notifications received before the drifting run
    drift_prefix: str = ""  # reports/drift/<model>/v<K>/dt=<day>


def _run(airflow: AirflowClient, dag_id: str, conf: dict[str, Any] | None, prefix: str, timeout_s: float) -> str:
    run_id = airflow.trigger(dag_id, conf or {}, run_id=f"{prefix}-{uuid.uuid4().hex[:6]}")
    state = airflow.wait(dag_id, run_id, timeout_s=timeout_s)
    if state != "success":
        states = {t["task_id"]: t["state"] for t in airflow.task_instances(dag_id, run_id)}
        raise AssertionError(f"{dag_id} run {run_id} ended {state}: {states}")
    return run_id


def run_batch_story(cfg: Settings, store: ObjectStore, airflow: AirflowClient, mlflow_uri: str,
                    notifications: NotificationReceiver) -> BatchRuns:
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.registry.mlflow_registry import MlflowRegistry

    # A Production version of a fresh model, routed 100% stable through the stack's gateway.
    champion = release_champion("jobs", mlflow_uri, "modelops-tests-jobs")
    model, version = champion.model, champion.version
    registry = MlflowRegistry.from_settings()
    # Promoted yesterday: today is the version's first full day, so its samples become the baseline.
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    registry.set_tags(model, version, {"modelops.promoted_at": yesterday})
    snapshot = f"base-{uuid.uuid4().hex[:6]}"
    publish_tables(store, snapshot, shift=False)
    routes = Routes(model=model, revision=1, stable=VersionRef(champion.triton_version, champion.sha256),
                    canary=None, canary_weight=0.0, updated_at=datetime.now(UTC).isoformat(), updated_by="tests")
    store.put_bytes(routes_key(model), serialize_routes(routes))
    # This snapshot, not whichever an earlier test left loaded: the baseline's features come from it.
    wait_gateway(cfg, lambda h: model in h.get("models", []) and h.get("feature_snapshot") == snapshot,
                 f"the routes and the feature snapshot {snapshot}")
    runs = BatchRuns(model=model, version=version, triton_version=champion.triton_version, day=today())

    # feedback_join: traffic with feedback, then a manual run over today (an 11 s window keeps the
    # deferred wait short and still counts every event: the simulated users answer at once, one
    # request after the prediction's answer).
    report = traffic(cfg, model, 300, seed=1)
    ok = report.status.get(200, 0)
    wait_logs(store, f"logs/predictions/dt={runs.day}/", ok)
    wait_logs(store, f"logs/feedback/dt={runs.day}/", sum(report.feedback.values()))
    runs.feedback_report = report
    from modelops.feedback.outputs import current_prefix

    def document() -> dict[str, Any]:  # the current run's ctr_cvr.json, through the output's pointer
        current = current_prefix(store, f"metrics/ctr_cvr/dt={runs.day}")
        return dict(json.loads(store.get_bytes(f"{current}/ctr_cvr.json")))

    _run(airflow, "feedback_join", {"window_hours": 0.003}, "test-fb", 480)
    runs.feedback_document = document()
    _run(airflow, "feedback_join", {"window_hours": 0.003}, "test-fb", 480)
    runs.feedback_rerun_document = document()

    # nightly_drift, first run of the launch day: the day's samples so far become the baseline.
    samples = f"logs/scored_samples/dt={runs.day}/"
    already_logged = count_rows(store, samples)
    report = traffic(cfg, model, 250, seed=2)
    wait_logs(store, samples, already_logged + report.status.get(200, 0))
    _run(airflow, "nightly_drift", None, "test-drift", 600)
    runs.baseline_tags = dict(registry.get(model, version).tags)

    # The feature tables move in three known features; later traffic is compared with the baseline.
    shifted = f"shift-{uuid.uuid4().hex[:6]}"
    publish_tables(store, shifted, shift=True)
    wait_gateway(cfg, lambda h: h.get("feature_snapshot") == shifted, f"the shifted feature snapshot {shifted}")
    before = sum(1 for _ in store.list_keys(samples))
    runs.shifted_report = traffic(cfg, model, 250, seed=3)
    deadline = time.monotonic() + 60
    while sum(1 for _ in store.list_keys(samples)) <= before:
        if time.monotonic() > deadline:
            raise AssertionError("no new scored-sample partition file after the shifted traffic")
        time.sleep(2)
    runs.notifications_before_drift = len(notifications.messages)
    _run(airflow, "nightly_drift", None, "test-drift", 600)
    runs.drift_prefix = f"reports/drift/{model}/v{champion.triton_version}/dt={runs.day}"
    return runs


@contextmanager
def start_pushgateway(binary: Path, port: int, log: Path) -> Iterator[str]:
    """Debian's Pushgateway on ``127.0.0.1:port`` until the block ends (stopped by its PID)."""
    with log.open("wb") as out:
        proc = subprocess.Popen([str(binary), f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pushgateway not ready on {url}: {log.read_text()[-500:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
