"""The receiver app: what each delivery gets back, and that every answer is counted.

MLflow's own sender signs the deliveries (tests/unit/test_release_webhooks.py); the registry and
Airflow are the in-memory ones of tests/unit/test_release_autostart.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from modelops.config import Settings, load_settings
from modelops.registry.webhooks import accepted_secrets, current_secret, rotate_secret
from modelops.release import webhook_app
from modelops.release.webhooks import DELIVERY_ID_HEADER, SIGNATURE_HEADER, sign
from tests.unit.test_release_autostart import Airflow, Registry
from tests.unit.test_release_webhooks import mlflow_delivery


def _settings(home: Path, **env: str) -> Settings:
    return load_settings({"MODELOPS_HOME": str(home), **env})


def _count(outcome: str) -> float:
    value = webhook_app.METRICS.get_sample_value("modelops_release_webhook_deliveries_total", {"outcome": outcome})
    return float(value or 0.0)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Settings, Registry, Airflow, TestClient]:
    cfg = _settings(tmp_path)
    registry, airflow = Registry(), Airflow()
    registry.add("churn", "3", created_ms=42)
    app = webhook_app.create_app(cfg, registry=lambda: registry, releases=lambda: airflow)
    return cfg, registry, airflow, TestClient(app)


def test_a_signed_delivery_starts_the_release_and_its_replay_is_refused(
        world: tuple[Settings, Registry, Airflow, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, airflow, client = world
    headers, body = mlflow_delivery(monkeypatch, secret=current_secret(cfg))
    started, replayed = _count("started"), _count("refused_replayed")
    first = client.post("/mlflow", content=body, headers=headers)
    assert first.status_code == 201, first.text
    assert first.json()["dag_run_id"] == "challenger-churn-v3-42"
    again = client.post("/mlflow", content=body, headers=headers)
    assert again.status_code == 400 and "a replay" in again.json()["detail"]
    # The same event in a new delivery (MLflow sends one per webhook and alias set): no second run.
    other_headers, other_body = mlflow_delivery(monkeypatch, secret=current_secret(cfg))
    assert other_headers[DELIVERY_ID_HEADER] != headers[DELIVERY_ID_HEADER]
    second = client.post("/mlflow", content=other_body, headers=other_headers)
    assert (second.status_code, second.json()["outcome"]) == (200, "already_started")
    assert list(airflow.runs) == ["challenger-churn-v3-42"]
    assert (_count("started") - started, _count("refused_replayed") - replayed) == (1, 1)


def test_a_forged_delivery_is_refused_counted_and_starts_nothing(
        world: tuple[Settings, Registry, Airflow, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, airflow, client = world
    headers, body = mlflow_delivery(monkeypatch, secret="guessed")
    before = _count("refused_forged")
    answer = client.post("/mlflow", content=body, headers=headers)
    assert answer.status_code == 401 and SIGNATURE_HEADER in answer.json()["detail"]
    assert _count("refused_forged") - before == 1
    assert airflow.runs == {}
    assert 'modelops_release_webhook_deliveries_total{outcome="refused_forged"}' in client.get("/metrics").text


def test_a_stale_delivery_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _settings(tmp_path, MODELOPS_RELEASE_WEBHOOK_MAX_AGE_S="60")
    registry, airflow = Registry(), Airflow()
    registry.add("churn", "3")
    client = TestClient(webhook_app.create_app(cfg, registry=lambda: registry, releases=lambda: airflow,
                                               clock=lambda: time.time() + 61))
    headers, body = mlflow_delivery(monkeypatch, secret=current_secret(cfg))
    answer = client.post("/mlflow", content=body, headers=headers)
    assert answer.status_code == 400 and "s old" in answer.json()["detail"]
    assert airflow.runs == {}


def test_other_events_and_aliases_are_answered_and_ignored(
        world: tuple[Settings, Registry, Airflow, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, airflow, client = world
    headers, body = mlflow_delivery(monkeypatch, alias="champion", secret=current_secret(cfg))
    answer = client.post("/mlflow", content=body, headers=headers)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "ignored")
    delivery_id, ts = "d-other", str(int(time.time()))
    other = b'{"entity": "model_version", "action": "created", "data": {"name": "churn", "version": "4"}}'
    answer = client.post("/mlflow", content=other, headers={
        DELIVERY_ID_HEADER: delivery_id, "X-MLflow-Timestamp": ts,
        SIGNATURE_HEADER: sign(current_secret(cfg), delivery_id, ts, other)})
    assert (answer.status_code, answer.json()["outcome"]) == (200, "ignored")
    assert airflow.runs == {}


def test_a_model_name_the_platform_cannot_serve_is_refused_with_the_rule(
        world: tuple[Settings, Registry, Airflow, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, _, client = world
    headers, body = mlflow_delivery(monkeypatch, name="Churn.v2", secret=current_secret(cfg))
    answer = client.post("/mlflow", content=body, headers=headers)
    assert answer.status_code == 422 and "data.name='Churn.v2'" in answer.json()["detail"]


def test_a_failed_start_answers_503_and_mlflows_retry_of_it_gets_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _settings(tmp_path)
    registry, down, up = Registry(), Airflow(failing=True), Airflow()
    registry.add("churn", "3")
    current = [down]
    client = TestClient(webhook_app.create_app(cfg, registry=lambda: registry, releases=lambda: current[0]))
    headers, body = mlflow_delivery(monkeypatch, secret=current_secret(cfg))
    assert client.post("/mlflow", content=body, headers=headers).status_code == 503
    current[0] = up
    assert client.post("/mlflow", content=body, headers=headers).status_code == 201  # same delivery id
    assert len(up.runs) == 1


def test_webhooks_off_refuses_every_delivery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _settings(tmp_path, MODELOPS_RELEASE_WEBHOOKS="off")
    airflow = Airflow()
    client = TestClient(webhook_app.create_app(cfg, registry=Registry, releases=lambda: airflow))
    headers, body = mlflow_delivery(monkeypatch, secret=current_secret(cfg))
    answer = client.post("/mlflow", content=body, headers=headers)
    assert answer.status_code == 404 and "MODELOPS_RELEASE_WEBHOOKS=off" in answer.json()["detail"]
    assert airflow.runs == {}


def test_a_rotated_secret_keeps_the_previous_one_accepted_for_the_grace(tmp_path: Path) -> None:
    cfg = _settings(tmp_path)
    old = current_secret(cfg)
    assert current_secret(cfg) == old  # generated once
    assert (tmp_path / "secrets" / "mlflow-webhook-secret").stat().st_mode & 0o777 == 0o600
    new = rotate_secret(cfg)
    assert new != old and accepted_secrets(cfg) == [new, old]
    assert accepted_secrets(cfg, now=time.time() + 3600) == [new]


def test_a_configured_secret_is_used_as_is_and_not_rotated_here(tmp_path: Path) -> None:
    from modelops.errors import ConfigError

    cfg = _settings(tmp_path, MODELOPS_RELEASE_WEBHOOK_SECRET="from-the-vault")
    assert accepted_secrets(cfg) == ["from-the-vault"]
    with pytest.raises(ConfigError, match="MODELOPS_RELEASE_WEBHOOK_SECRET"):
        rotate_secret(cfg)
