"""Releases started by the alias challenger, on the embedded stack: MLflow's webhook and the poll.

The released models are throwaway registered models (a version of an empty run): their release
is started with the right params and claim, resolves, and stops at the contract gate (no
evaluation sample) without touching Triton. The tests assert on the runs Airflow started.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import requests

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.release.autostart import WATCHER_STARTER, WEBHOOK_STARTER, alias_run_id

pytestmark = pytest.mark.integration


def _throwaway_version(mlflow_uri: str, name: str, tags: dict[str, str] | None = None) -> tuple[str, int]:
    """(version, creation ms) of a new registered model's version 1, from an empty MLflow run."""
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("modelops-tests-alias")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("modelops-tests-alias")
    run = client.create_run(experiment_id)
    client.set_terminated(run.info.run_id)
    client.create_registered_model(name, tags=tags or {})
    mv = client.create_model_version(name, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    return str(mv.version), int(mv.creation_timestamp)


def _runs_of(airflow: AirflowClient, model: str) -> list[dict[str, Any]]:
    runs = airflow.request("GET", "/api/v2/dags/model_release/dagRuns",
                           params={"limit": 100, "order_by": "-run_after"})["dag_runs"]
    return [r for r in runs if (r.get("conf") or {}).get("model") == model]


def _wait_for_run(airflow: AirflowClient, model: str, timeout_s: float) -> tuple[dict[str, Any], float]:
    """The first run of ``model`` once it has started (a start date), and when it was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        started = [r for r in _runs_of(airflow, model) if r.get("start_date")]
        if started:
            return started[0], time.time()
        time.sleep(0.5)
    raise AssertionError(f"no model_release run of {model} started within {timeout_s:.0f} s")


def _set_challenger(mlflow_uri: str, name: str, version: str) -> float:
    from mlflow import MlflowClient

    before = time.time()
    MlflowClient(mlflow_uri).set_registered_model_alias(name, "challenger", version)
    return before


def _delivery_count(cfg: Settings, outcome: str) -> float:
    text = requests.get(f"{cfg.airflow_api_url}/modelops-webhooks/metrics", timeout=10).text
    line = f'modelops_release_webhook_deliveries_total{{outcome="{outcome}"}} '
    return next(float(row[len(line):]) for row in text.splitlines() if row.startswith(line))


POLL_DAG = "release_on_staging"


@pytest.fixture
def poll_paused(airflow: AirflowClient) -> Iterator[None]:
    """The poll (``release_on_staging``) paused, with none of its ticks running; unpaused afterwards.

    The poll runs every minute and starts an unclaimed challenger under the same run id as the
    webhook. A tick that falls between setting the alias and MLflow's delivery starts the release
    itself (``started_by`` ``alias-watcher``): a CI run of 2026-12-07 on a loaded machine did. The
    tests of the webhook path pause it to know which path started the run.
    """
    airflow.wait_for_dag(POLL_DAG, timeout_s=300)
    airflow.pause(POLL_DAG)
    try:
        deadline = time.monotonic() + 240
        while _running_ticks(airflow):
            assert time.monotonic() < deadline, f"a {POLL_DAG} tick still running after 240 s"
            time.sleep(1.0)
        yield
    finally:
        airflow.unpause(POLL_DAG)


def _running_ticks(airflow: AirflowClient) -> int:
    runs = airflow.request("GET", f"/api/v2/dags/{POLL_DAG}/dagRuns", params={"state": "running", "limit": 1})
    return int(runs["total_entries"])


def _poll_once(airflow: AirflowClient) -> None:
    """One tick of the poll, as the schedule would run it, to its end."""
    tick = airflow.trigger(POLL_DAG, run_id=f"test-alias-poll-{uuid.uuid4().hex[:8]}")
    assert airflow.wait(POLL_DAG, tick, timeout_s=240) == "success"


def test_setting_challenger_starts_exactly_one_release_within_seconds(
        stack_settings: Settings, airflow: AirflowClient, mlflow_uri: str, poll_paused: None) -> None:
    from mlflow import MlflowClient

    from modelops.registry.webhooks import ensure_release_webhook, platform_webhooks

    # Registered by `stack up`; registering again (as `modelops webhook register` does) leaves one webhook.
    assert ensure_release_webhook(stack_settings).action == "updated"
    assert len(platform_webhooks(MlflowClient(mlflow_uri), mlflow_uri)) == 1
    airflow.wait_for_dag("model_release", timeout_s=300)

    name = f"alias_{uuid.uuid4().hex[:6]}"
    version, created_ms = _throwaway_version(mlflow_uri, name, {"modelops.release.analysis_interval_s": "30"})
    set_at = _set_challenger(mlflow_uri, name, version)
    run, seen_at = _wait_for_run(airflow, name, timeout_s=60)
    run_id = alias_run_id(name, version, created_ms)
    assert run["dag_run_id"] == run_id
    assert run["conf"] == {"analysis_interval_s": 30, "model": name, "version": version,
                           "started_by": WEBHOOK_STARTER, "claim_id": run_id}
    assert seen_at - set_at < 20, f"the webhook path took {seen_at - set_at:.1f} s (goal: 5 s)"

    time.sleep(5)  # MLflow's own retries
    _poll_once(airflow)  # the next poll sees the webhook's claim: still one run
    assert [r["dag_run_id"] for r in _runs_of(airflow, name)] == [run_id]
    assert airflow.wait("model_release", run_id, timeout_s=300) == "failed"  # at the contract gate, by design
    states = {t["task_id"]: t["state"] for t in airflow.task_instances("model_release", run_id)}
    assert states["resolve_candidate"] == "success"  # the run's claim id is the version's claim
    assert states["contract_gate"] == "failed"


@pytest.fixture(scope="module")
def webhooks_off(stack_settings: Settings) -> Iterator[Settings]:
    """MLflow's webhook disabled (as MODELOPS_RELEASE_WEBHOOKS=off registers it), enabled again afterwards."""
    from modelops.registry.webhooks import ensure_release_webhook

    assert ensure_release_webhook(replace(stack_settings, release_webhooks="off")).status == "DISABLED"
    time.sleep(6)  # MLflow's webhook cache (MLFLOW_WEBHOOK_CACHE_TTL=5 in the embedded stack)
    try:
        yield stack_settings
    finally:
        assert ensure_release_webhook(stack_settings).status == "ACTIVE"
        time.sleep(6)


def _mlflow_delivery(monkeypatch: pytest.MonkeyPatch, secret: str, **data: str) -> tuple[dict[str, str], bytes]:
    from tests.unit.test_release_webhooks import mlflow_delivery

    return mlflow_delivery(monkeypatch, secret=secret, **data)


def test_the_same_delivery_twice_starts_one_release_and_a_forged_one_is_refused_and_counted(
        webhooks_off: Settings, airflow: AirflowClient, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch,
        poll_paused: None) -> None:
    from modelops.registry.webhooks import current_secret

    cfg = webhooks_off
    name = f"alias_{uuid.uuid4().hex[:6]}"
    version, created_ms = _throwaway_version(mlflow_uri, name)
    _set_challenger(mlflow_uri, name, version)  # MLflow's webhook is off: nothing is delivered

    forged_before, stale_before = _delivery_count(cfg, "refused_forged"), _delivery_count(cfg, "refused_stale")
    headers, body = _mlflow_delivery(monkeypatch, "a-guessed-secret", name=name, version=version)
    forged = requests.post(cfg.release_webhook_target, data=body, headers=headers, timeout=30)
    assert forged.status_code == 401, forged.text
    stale = {**headers, "X-MLflow-Timestamp": str(int(time.time()) - 3600)}
    stale["X-MLflow-Signature"] = _resign(current_secret(cfg), stale, body)
    assert requests.post(cfg.release_webhook_target, data=body, headers=stale, timeout=30).status_code == 400
    assert _delivery_count(cfg, "refused_forged") - forged_before == 1
    assert _delivery_count(cfg, "refused_stale") - stale_before == 1
    assert _runs_of(airflow, name) == []

    headers, body = _mlflow_delivery(monkeypatch, current_secret(cfg), name=name, version=version)
    first = requests.post(cfg.release_webhook_target, data=body, headers=headers, timeout=60)
    again = requests.post(cfg.release_webhook_target, data=body, headers=headers, timeout=60)
    headers, body = _mlflow_delivery(monkeypatch, current_secret(cfg), name=name, version=version)
    other = requests.post(cfg.release_webhook_target, data=body, headers=headers, timeout=60)
    assert (first.status_code, first.json()["outcome"]) == (201, "started"), first.text
    assert (again.status_code, again.json()["outcome"]) == (400, "refused_replayed"), again.text
    assert (other.status_code, other.json()["outcome"]) == (200, "already_started"), other.text
    run, _ = _wait_for_run(airflow, name, timeout_s=60)
    assert run["dag_run_id"] == alias_run_id(name, version, created_ms)
    assert run["conf"]["started_by"] == WEBHOOK_STARTER
    assert len(_runs_of(airflow, name)) == 1


def _resign(secret: str, headers: dict[str, str], body: bytes) -> str:
    from modelops.release.webhooks import sign

    return sign(secret, headers["X-MLflow-Delivery-Id"], headers["X-MLflow-Timestamp"], body)


def test_with_webhooks_off_the_poll_still_starts_the_release(
        webhooks_off: Settings, airflow: AirflowClient, mlflow_uri: str) -> None:
    name = f"alias_{uuid.uuid4().hex[:6]}"
    version, created_ms = _throwaway_version(mlflow_uri, name, {"modelops.release.require_approval": "true"})
    _set_challenger(mlflow_uri, name, version)
    # release_on_staging runs every minute from the stack's start; a tick may be running already.
    run, _ = _wait_for_run(airflow, name, timeout_s=200)
    run_id = alias_run_id(name, version, created_ms)
    assert run["dag_run_id"] == run_id
    assert run["conf"] == {"require_approval": True, "model": name, "version": version,
                           "started_by": WATCHER_STARTER, "claim_id": run_id}
    assert airflow.wait("model_release", run_id, timeout_s=300) == "failed"  # at the contract gate
    assert [r["dag_run_id"] for r in _runs_of(airflow, name)] == [run_id]
