"""feedback_join and nightly_drift as Airflow runs them, on data the gateway wrote under generated traffic.

One Production model version serves through the stack's gateway; simulated users send
requests and feedback; the gateway's spool uploads the logs to the object store; the DAGs
stage them, spark-submit the jobs and publish the results. The drift report is opened in
headless Chromium.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.support.receiver import NotificationReceiver
from tests.support.worlds import publish_tables, release_champion

pytestmark = pytest.mark.integration

DRIFTED = ("user_ctr_30d", "item_price", "user_sessions_7d")


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def _traffic(cfg: Settings, model: str, n: int, seed: int) -> Any:
    from modelops.traffic.runner import run_traffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    spec = TrafficSpec(model=model, rate=200.0, max_requests=n, max_seconds=120.0, n_users=400, n_items=400,
                       items_per_request=(2, 6), id_width=6, default=Behaviour(0.3, 0.4, 0.2), per_version={},
                       concurrency=8, seed=seed)
    return asyncio.run(run_traffic(spec, cfg.gateway_url, progress=lambda line: None))


def _wait_gateway(cfg: Settings, predicate: Any, what: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = requests.get(f"{cfg.gateway_url}/healthz", timeout=5).json()
        if predicate(body):
            return body
        time.sleep(0.5)
    raise AssertionError(f"gateway never reported {what}: {body}")


def _count_rows(store: ObjectStore, prefix: str) -> int:
    import pyarrow.parquet as pq

    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, key in enumerate(k for k in store.list_keys(prefix) if k.endswith(".parquet")):
            path = Path(tmp) / f"{i}.parquet"
            path.write_bytes(store.get_bytes(key))
            rows += pq.read_metadata(path).num_rows
    return rows


def _wait_logs(store: ObjectStore, prefix: str, min_rows: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    rows = 0
    while time.monotonic() < deadline:
        rows = _count_rows(store, prefix)
        if rows >= min_rows:
            return rows
        time.sleep(2)
    raise AssertionError(f"only {rows} rows under {prefix} after {timeout_s:.0f} s (wanted {min_rows})")


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str) -> dict[str, Any]:
    """A Production version of a fresh model, routed 100% stable through the stack's gateway."""
    from modelops.gateway.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.registry.mlflow_registry import MlflowRegistry

    champion = release_champion("jobs", mlflow_uri, "modelops-tests-jobs")
    model, version = champion.model, champion.version
    registry = MlflowRegistry.from_settings()
    # Promoted yesterday: today is the version's first full day, so its samples become the baseline.
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    registry.set_tags(model, version, {"modelops.promoted_at": yesterday})
    snapshot = f"base-{uuid.uuid4().hex[:6]}"
    publish_tables(object_store, snapshot, shift=False)
    routes = Routes(model=model, revision=1, stable=VersionRef(champion.triton_version, champion.sha256),
                    canary=None, canary_weight=0.0, updated_at=datetime.now(UTC).isoformat(), updated_by="tests")
    object_store.put_bytes(routes_key(model), serialize_routes(routes))
    # This snapshot, not whichever an earlier test left loaded: the baseline's features come from it.
    _wait_gateway(stack_settings, lambda h: model in h.get("models", []) and h.get("feature_snapshot") == snapshot,
                  f"the routes and the feature snapshot {snapshot}")
    return {"model": model, "version": version, "triton_version": champion.triton_version,
            "run_id": champion.run_id}


def test_feedback_join_dag_counts_ctr_and_cvr_from_gateway_logs(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, served: dict[str, Any]
) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry

    report = _traffic(stack_settings, served["model"], 300, seed=1)
    ok = report.status.get(200, 0)
    assert ok >= 290, report.line()
    clicks_sent = report.feedback.get("click", 0)
    assert clicks_sent > 20 and report.feedback_status.get(202, 0) == sum(report.feedback.values())
    day = _today()
    _wait_logs(object_store, f"logs/predictions/dt={day}/", ok)
    _wait_logs(object_store, f"logs/feedback/dt={day}/", sum(report.feedback.values()))

    # A manual run covers today; a window of 36 s makes the deferred wait short and still
    # counts every event (the simulated users answer within a second).
    run_id = airflow.trigger("feedback_join", {"window_hours": 0.01}, run_id=f"test-fb-{uuid.uuid4().hex[:6]}")
    assert airflow.wait("feedback_join", run_id, timeout_s=480) == "success"

    document = json.loads(object_store.get_bytes(f"metrics/ctr_cvr/dt={day}/ctr_cvr.json"))
    rows = [r for r in document["by_version"] if r["model"] == served["model"]]
    assert len(rows) == 1
    row = rows[0]
    assert row["model_version"] == served["triton_version"]
    assert row["impressions"] == ok
    assert 0 < row["clicked"] <= clicks_sent
    assert row["ctr"] == pytest.approx(row["clicked"] / row["impressions"])
    assert row["cvr"] == pytest.approx(row["converted"] / row["clicked"])
    assert set(document["rejected"]) == {"unknown_token", "outside_window", "duplicate", "malformed"}
    tags = MlflowRegistry.from_settings().get(served["model"], served["version"]).tags
    assert tags[f"modelops.ctr.{day}"] == f"{row['ctr']:.6f}"
    # The run is idempotent: the same window gives the same numbers.
    again = airflow.trigger("feedback_join", {"window_hours": 0.01}, run_id=f"test-fb-{uuid.uuid4().hex[:6]}")
    assert airflow.wait("feedback_join", again, timeout_s=480) == "success"
    assert json.loads(object_store.get_bytes(f"metrics/ctr_cvr/dt={day}/ctr_cvr.json")) == document


def _chromium_text(html: bytes) -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed (make test installs Debian's chromium)"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_bytes(html)
        out = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp}/profile", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        )
    return out.stdout


def test_nightly_drift_dag_finds_the_injected_drift_and_reports_it(
    airflow: AirflowClient, stack_settings: Settings, object_store: ObjectStore, served: dict[str, Any],
    notifications: NotificationReceiver,
) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry

    model, day = served["model"], _today()
    samples = f"logs/scored_samples/dt={day}/"
    already_logged = _count_rows(object_store, samples)
    report = _traffic(stack_settings, model, 250, seed=2)
    _wait_logs(object_store, samples, already_logged + report.status.get(200, 0))

    # First run of the launch day: the day's samples so far become the baseline; no report yet.
    first = airflow.trigger("nightly_drift", run_id=f"test-drift-{uuid.uuid4().hex[:6]}")
    assert airflow.wait("nightly_drift", first, timeout_s=600) == "success"
    tags = MlflowRegistry.from_settings().get(model, served["version"]).tags
    assert tags["modelops.drift_baseline_day"] == day
    assert object_store.exists(tags["modelops.drift_baseline"])

    # The feature tables move in three known features; later traffic is compared with the baseline.
    publish_tables(object_store, f"shift-{uuid.uuid4().hex[:6]}", shift=True)
    time.sleep(7)  # the gateway polls the feature pointer every 5 s
    before = sum(1 for _ in object_store.list_keys(f"logs/scored_samples/dt={day}/"))
    report = _traffic(stack_settings, model, 250, seed=3)
    assert report.status.get(200, 0) >= 240
    deadline = time.monotonic() + 60
    while sum(1 for _ in object_store.list_keys(f"logs/scored_samples/dt={day}/")) <= before:
        assert time.monotonic() < deadline, "no new scored-sample partition file after the shifted traffic"
        time.sleep(2)
    already = len(notifications.messages)

    second = airflow.trigger("nightly_drift", run_id=f"test-drift-{uuid.uuid4().hex[:6]}")
    assert airflow.wait("nightly_drift", second, timeout_s=600) == "success"
    prefix = f"reports/drift/{model}/v{served['triton_version']}/dt={day}"
    document = json.loads(object_store.get_bytes(f"{prefix}/drift.json"))
    assert document["drifted"] is True
    assert sorted(document["top_causes"]) == sorted(DRIFTED)
    # With a few hundred requests, untouched features wobble (a user's features repeat across
    # their items); the injected shifts must stand far above every one of them.
    ks = {f["name"]: f["ks"] for f in document["features"]}
    assert min(ks[name] for name in DRIFTED) > 2 * max(v for k, v in ks.items() if k not in DRIFTED)

    messages = notifications.wait_for(already + 1, timeout_s=30)[already:]
    drift_alerts = [m for m in messages if m["title"].startswith(f"Drift detected: {model}")]
    assert len(drift_alerts) == 1
    assert document["top_causes"][0] in drift_alerts[0]["message"]
    assert f"{prefix}/drift_report.html" in drift_alerts[0]["message"]

    dom = _chromium_text(object_store.get_bytes(f"{prefix}/drift_report.html"))
    assert "Drift detected" in dom or "drift detected" in dom.lower()
    for cause in document["top_causes"]:
        assert cause in dom
    assert "Feature contract" in dom
