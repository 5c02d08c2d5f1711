"""What the host sees of the running topology: the gateway LB, the Airflow UI/API and MLflow (behind auth).

Grafana, the fourth published service in production, is kept out of the test run (docker-compose.test.yml).

Runs on the host (docker/compose-test.sh exports the test env file: published ports, secrets).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import requests

pytestmark = pytest.mark.compose

HOST = os.environ.get("MODELOPS_PUBLISH_ADDRESS", "127.0.0.1")


def _url(port_var: str) -> str:
    if port_var not in os.environ:
        pytest.fail(f"{port_var} is not set: run `make compose-test` (docker/compose-test.sh)")
    return f"http://{HOST}:{os.environ[port_var]}"


def test_only_the_three_public_services_publish_ports() -> None:
    out = subprocess.run(
        [os.environ["COMPOSE_BIN"], "-p", os.environ["COMPOSE_TEST_PROJECT"], "ps", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    published = {row["Service"]: sorted({p["TargetPort"] for p in row.get("Publishers") or []
                                         if p.get("PublishedPort")}) for row in rows}
    assert {name: ports for name, ports in published.items() if ports} == {
        "gateway-lb": [8400], "airflow-api-server": [8080], "mlflow": [5000]}
    for row in rows:
        for publisher in row.get("Publishers") or []:
            if publisher.get("PublishedPort"):
                assert publisher["URL"] == HOST, row["Service"]
    # Running, on the compose network only (Grafana, published in production, is not run here: no image).
    assert {"triton", "objectstore", "postgres", "spark-master", "spark-worker", "prometheus", "pushgateway",
            "alertmanager", "alert-relay", "statsd-bridge", "redis", "airflow-worker"} <= set(published)
    # Two replicas of each worker (AIRFLOW_WORKERS, SPARK_WORKERS), three Tritons (--scale triton=3), all running.
    for service, count in (("airflow-worker", 2), ("spark-worker", 2), ("triton", 3)):
        replicas = [row for row in rows if row["Service"] == service]
        assert len(replicas) == count and all(row["State"] == "running" for row in replicas), replicas


def test_the_load_balancer_answers_for_the_gateways() -> None:
    response = requests.get(f"{_url('GATEWAY_PUBLISHED_PORT')}/healthz", timeout=10)
    assert response.status_code == 200, response.text


def test_airflow_signs_in_the_admin_and_refuses_a_wrong_password() -> None:
    base = _url("AIRFLOW_PUBLISHED_PORT")
    ok = requests.post(f"{base}/auth/token", json={"username": "admin",
                                                   "password": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, timeout=30)
    assert ok.status_code in (200, 201), ok.text
    bad = requests.post(f"{base}/auth/token", json={"username": "admin", "password": "wrong"}, timeout=30)
    assert bad.status_code in (401, 403), bad.text
    token = ok.json()["access_token"]
    health = requests.get(f"{base}/api/v2/monitor/health", headers={"Authorization": f"Bearer {token}"},
                          timeout=30).json()
    for component in ("metadatabase", "scheduler", "triggerer", "dag_processor"):
        assert health[component]["status"] == "healthy", health


def test_mlflow_refuses_anonymous_calls_and_serves_its_accounts() -> None:
    api = f"{_url('MLFLOW_PUBLISHED_PORT')}/api/2.0/mlflow/experiments/search"
    anonymous = requests.get(api, params={"max_results": 1}, timeout=30)
    assert anonymous.status_code == 401, anonymous.text
    for user, password_var in (("admin", "MLFLOW_ADMIN_PASSWORD"), ("airflow", "MLFLOW_AIRFLOW_PASSWORD")):
        signed = requests.get(api, params={"max_results": 1}, auth=(user, os.environ[password_var]), timeout=30)
        assert signed.status_code == 200, (user, signed.text)
    wrong = requests.get(api, params={"max_results": 1}, auth=("admin", "wrong"), timeout=30)
    assert wrong.status_code == 401
