"""Observability services: rendered configs pass promtool/amtool, the alert relay turns webhooks into messages."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from modelops.errors import StackError
from modelops.notify.message import Message
from modelops.observability.alert_relay import PayloadError, handler_class, messages
from modelops.observability.prometheus import alertmanager_config, binary, prometheus_config

FIRING = {
    "version": "4", "status": "firing", "receiver": "modelops-notify",
    "alerts": [{
        "status": "firing", "fingerprint": "abc123", "startsAt": "2026-11-30T20:00:00Z",
        "labels": {"alertname": "ModelopsPredictionCollapse", "model": "ranker", "version": "2", "severity": "page"},
        "annotations": {"summary": "ranker v2 answers (almost) the same score to everyone",
                        "description": "The rolling std stayed under the threshold.", "runbook": "Roll it back."},
    }, {
        "status": "resolved", "fingerprint": "def456", "startsAt": "2026-11-30T19:00:00Z",
        "labels": {"alertname": "ModelopsScrapeTargetDown", "job": "triton", "instance": "t1", "severity": "page"},
        "annotations": {"summary": "triton target t1 is down"},
    }],
}


def _tool(name: str) -> Path:
    try:
        return binary(name)
    except StackError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


def test_messages_carry_summary_runbook_labels_and_resolution() -> None:
    firing, resolved = messages(FIRING)
    assert firing.title == "ALERT ModelopsPredictionCollapse: ranker v2 answers (almost) the same score to everyone"
    assert firing.severity == "failure"  # severity=page
    assert "Runbook: Roll it back." in firing.body
    assert firing.facts["model"] == "ranker" and firing.facts["version"] == "2"
    assert firing.key == "alert/ModelopsPredictionCollapse/abc123/firing"
    assert resolved.title.startswith("RESOLVED ModelopsScrapeTargetDown") and resolved.severity == "success"


@pytest.mark.parametrize(("payload", "field"), [
    ({"status": "firing"}, "alerts"),
    ({"alerts": ["x"]}, r"alerts\[0\]"),
    ({"alerts": [{"labels": {"severity": "page"}}]}, r"alerts\[0\].labels.alertname"),
    ([], "payload"),
])
def test_bad_payloads_name_the_field(payload: object, field: str) -> None:
    with pytest.raises(PayloadError, match=field):
        messages(payload)


@pytest.fixture
def relay() -> Iterator[tuple[str, list[Message]]]:
    sent: list[Message] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class(sent.append))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", sent
    server.shutdown()
    server.server_close()


def test_relay_delivers_every_alert_and_refuses_garbage(relay: tuple[str, list[Message]]) -> None:
    url, sent = relay
    assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
    answer = requests.post(f"{url}/alerts", data=json.dumps(FIRING), timeout=5)
    assert answer.status_code == 200 and answer.json() == {"delivered": 2}
    assert [m.title.split(":")[0] for m in sent] == ["ALERT ModelopsPredictionCollapse",
                                                     "RESOLVED ModelopsScrapeTargetDown"]
    bad = requests.post(f"{url}/alerts", data="{not json", timeout=5)
    assert bad.status_code == 400 and len(sent) == 2


def test_relay_answers_502_when_the_notifier_fails() -> None:
    def failing(message: Message) -> None:
        raise RuntimeError("apprise: no target accepted")

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class(failing))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        answer = requests.post(f"http://127.0.0.1:{server.server_address[1]}/alerts", data=json.dumps(FIRING),
                               timeout=5)
        assert answer.status_code == 502 and "no target accepted" in answer.json()["error"]  # Alertmanager retries
    finally:
        server.shutdown()
        server.server_close()


def test_rendered_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = prometheus_config(
        gateway_metrics_urls=["http://127.0.0.1:24400/metrics", "http://127.0.0.1:24401/metrics"],
        triton_metrics_urls=["http://127.0.0.1:24302/metrics"], pushgateway_url="http://127.0.0.1:24601",
        alertmanager_url="http://127.0.0.1:24602", interval_s=1.0)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["modelops-gateway"]["static_configs"] == [{"targets": ["127.0.0.1:24400", "127.0.0.1:24401"]}]
    assert jobs["pushgateway"]["honor_labels"] is True
    assert config["global"]["evaluation_interval"] == "1000ms"
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(config))
    done = subprocess.run([str(_tool("promtool")), "check", "config", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 rule files found" in done.stdout


def test_rendered_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    path = tmp_path / "alertmanager.yml"
    path.write_text(json.dumps(alertmanager_config("http://127.0.0.1:24603", group_wait_s=1)))
    done = subprocess.run([str(_tool("amtool")), "check-config", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "webhook" in (done.stdout + done.stderr).lower() or "receivers" in done.stdout.lower()


def test_stack_runs_the_services_only_when_asked_and_pushes_where_they_run(tmp_path: Path) -> None:
    from modelops.config import load_settings
    from modelops.observability.prometheus import pushgateway_endpoint
    from modelops.stack.observability import stack_services

    off = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_OBSERVABILITY": "off"})
    assert stack_services(off) == [] and pushgateway_endpoint(off) == ""
    explicit = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_OBSERVABILITY": "off",
                              "MODELOPS_PUSHGATEWAY_URL": "http://pushgateway:9091"})
    assert pushgateway_endpoint(explicit) == "http://pushgateway:9091"
    _tool("alertmanager")  # "on" needs the unpacked binaries
    on = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_OBSERVABILITY": "on",
                        "MODELOPS_PUSHGATEWAY_PORT": "24601"})
    names = [(s.name, s.ports) for s in stack_services(on)]
    assert [n for n, _ in names] == ["statsd-bridge", "alert-relay", "alertmanager", "pushgateway", "prometheus"]
    assert ("pushgateway", (24601,)) in names
    assert pushgateway_endpoint(on) == "http://127.0.0.1:24601"
    from modelops.observability.prometheus import airflow_statsd_env

    assert airflow_statsd_env(on)["AIRFLOW__METRICS__STATSD_PORT"] == str(on.statsd_port)
    assert airflow_statsd_env(off) == {}
    assert all(host == "127.0.0.1" for s in stack_services(on) for host in
               [a.split("=", 1)[1].rsplit(":", 1)[0] for a in s.argv if a.startswith("--web.listen-address=")])


def test_canary_reads_promql_by_default_wherever_prometheus_runs(tmp_path: Path) -> None:
    import psutil

    from modelops.canary.metrics_source import metrics_source
    from modelops.canary.sources import PrometheusSource, ScrapeSource
    from modelops.config import load_settings

    gateways = ["http://127.0.0.1:24400"]
    auto = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_PROMETHEUS_PORT": "24600"})
    assert auto.canary_metrics == "auto"
    assert isinstance(metrics_source(auto, gateways), ScrapeSource)  # no Prometheus runs
    pid_file = tmp_path / "run" / "prometheus.pid"  # the stack's record of a live Prometheus process
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time(),
                                    "argv": ["prometheus"]}))
    source = metrics_source(auto, gateways)
    assert isinstance(source, PrometheusSource) and source.url == "http://127.0.0.1:24600"
    configured = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_PROMETHEUS_URL": "http://prom:9090"})
    assert metrics_source(configured, gateways).url == "http://prom:9090"
    scrape = load_settings({"MODELOPS_HOME": str(tmp_path), "MODELOPS_CANARY_METRICS": "scrape"})
    assert isinstance(metrics_source(scrape, gateways), ScrapeSource)  # the scrape source stays


def test_the_pushgateway_never_supplies_the_series_the_canary_decides_on() -> None:
    import re
    from pathlib import Path

    import yaml

    from modelops.observability.prometheus import PUSHED_LIVE_SERIES_DROP, prometheus_config

    embedded = prometheus_config(gateway_metrics_urls=["http://127.0.0.1:1/metrics"],
                                 triton_metrics_urls=["http://127.0.0.1:2/metrics"],
                                 pushgateway_url="http://127.0.0.1:3", alertmanager_url="http://127.0.0.1:4",
                                 interval_s=1.0)
    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "prometheus" / "prometheus.yml").read_text())
    for config in (embedded, compose):
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "pushgateway")
        assert job["metric_relabel_configs"] == [PUSHED_LIVE_SERIES_DROP]
    dropped = re.compile(f"^(?:{PUSHED_LIVE_SERIES_DROP['regex']})$")
    for name in ("modelops_gateway_requests_total", "modelops_gateway_errors_total", "nv_inference_request_failure",
                 "ml_prediction_std"):
        assert dropped.match(name), name
    for name in ("modelops_drift_score", "modelops_feedback_ctr", "modelops_release_phase",
                 "modelops_scaling_instances"):
        assert not dropped.match(name), name
