"""feedback_join and nightly_drift as Airflow runs them, on data the gateway wrote under generated traffic.

One Production model version serves through the stack's gateway; simulated users send
requests and feedback; the gateway's spool uploads the logs to the object store; the DAGs
stage them, spark-submit the jobs and publish the results. The drift report is opened in
headless Chromium. The runs are the session's ``batch_runs`` fixture (tests/support/batch_runs.py):
test_observability.py checks the metrics the same runs pushed, without running the DAGs again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from modelops.objectstore import ObjectStore
from tests.support.batch_runs import STORY_TIMEOUT, BatchRuns
from tests.support.receiver import NotificationReceiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(STORY_TIMEOUT)]  # the first one runs batch_runs

DRIFTED = ("user_ctr_30d", "item_price", "user_sessions_7d")


def test_feedback_join_dag_counts_ctr_and_cvr_from_gateway_logs(batch_runs: BatchRuns) -> None:
    from modelops.registry.mlflow_registry import MlflowRegistry

    report = batch_runs.feedback_report
    ok = report.status.get(200, 0)
    assert ok >= 290, report.line()
    clicks_sent = report.feedback.get("click", 0)
    assert clicks_sent > 20 and report.feedback_status.get(202, 0) == sum(report.feedback.values())

    document = batch_runs.feedback_document
    assert document is not None
    rows = [r for r in document["by_version"] if r["model"] == batch_runs.model]
    assert len(rows) == 1
    row = rows[0]
    assert row["model_version"] == batch_runs.triton_version
    assert row["impressions"] == ok
    assert 0 < row["clicked"] <= clicks_sent
    assert row["ctr"] == pytest.approx(row["clicked"] / row["impressions"])
    assert row["cvr"] == pytest.approx(row["converted"] / row["clicked"])
    assert set(document["rejected"]) == {"unknown_token", "outside_window", "duplicate", "malformed"}
    tags = MlflowRegistry.from_settings().get(batch_runs.model, batch_runs.version).tags
    assert tags[f"modelops.ctr.{batch_runs.day}"] == f"{row['ctr']:.6f}"
    # The run is idempotent: the same window gives the same numbers.
    assert batch_runs.feedback_rerun_document == document


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
    batch_runs: BatchRuns, object_store: ObjectStore, notifications: NotificationReceiver,
) -> None:
    # First run of the launch day: the day's samples so far became the baseline.
    tags = batch_runs.baseline_tags
    assert tags is not None
    assert tags["modelops.drift_baseline_day"] == batch_runs.day
    assert object_store.exists(tags["modelops.drift_baseline"])
    assert batch_runs.shifted_report.status.get(200, 0) >= 240

    # The second run compared the traffic after the feature shift with the baseline.
    prefix = batch_runs.drift_prefix
    model = batch_runs.model
    document = json.loads(object_store.get_bytes(f"{prefix}/drift.json"))
    assert document["drifted"] is True
    assert sorted(document["top_causes"]) == sorted(DRIFTED)
    # With a few hundred requests, untouched features wobble (a user's features repeat across
    # their items); the injected shifts must stand far above every one of them.
    ks = {f["name"]: f["ks"] for f in document["features"]}
    assert min(ks[name] for name in DRIFTED) > 2 * max(v for k, v in ks.items() if k not in DRIFTED)

    already = batch_runs.notifications_before_drift
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
