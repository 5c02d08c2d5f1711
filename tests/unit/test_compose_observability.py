"""The observability services of docker-compose.yml, resolved by the real Compose binary (no engine).

Prometheus scrapes compose service names that exist, Alertmanager routes to the alert relay, the
platform reads PromQL and pushes to the Pushgateway, Grafana is provisioned and needs its password.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
import yaml

from modelops.config import PROJECT_ROOT
from tests.unit.test_compose_file import example_with_fernet, resolve


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result = resolve(example_with_fernet(), tmp_path_factory.mktemp("observability"))
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["services"])


def _official_image(service: dict) -> str:
    return str(service["image"]).rsplit(":", 1)[0]


def test_the_production_file_runs_the_official_images_pinned(services: dict) -> None:
    expected = {"prometheus": "prom/prometheus", "pushgateway": "prom/pushgateway",
                "alertmanager": "prom/alertmanager", "grafana": "grafana/grafana"}
    for name, image in expected.items():
        assert _official_image(services[name]) == image, name
        tag = services[name]["image"].rsplit(":", 1)[1]
        assert tag[0].isdigit() or tag.startswith("v"), (name, tag)  # a version, never latest
    # The dashboards are schema 39: Grafana 11.
    assert services["grafana"]["image"].split(":")[1].startswith("11.")


def test_prometheus_scrapes_services_of_the_topology(services: dict) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: [t for sc in job.get("static_configs", []) for t in sc["targets"]]
            for job in config["scrape_configs"]}
    assert {"gateway", "triton", "pushgateway", "airflow", "alertmanager"} <= set(jobs)
    for job, targets in jobs.items():
        for target in targets:
            host = target.rsplit(":", 1)[0]
            assert host == "localhost" or host in services, (job, target)
    # Every gateway replica and every Triton server, found through the service's DNS name (the canary, the
    # gateways and the reconciler resolve the same names).
    for name, port in (("gateway", 8400), ("triton", 8002)):
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == name]
        assert jobs[name] == [] and job["dns_sd_configs"] == [
            {"names": [name], "type": "A", "port": port, "refresh_interval": "5s"}]
        assert name in services
    assert services["gateway"]["environment"]["MODELOPS_TRITON_URL"] == "dns+http://triton:8000"
    airflow = services["airflow-scheduler"]["environment"]
    assert jobs["airflow"] == [f"{airflow['AIRFLOW__METRICS__STATSD_HOST']}:9102"]
    assert "9102" in services["statsd-bridge"]["command"]
    # The canary's 5 s windows hold two samples of the gateway and Triton series.
    for job in config["scrape_configs"]:
        if job["job_name"] in ("gateway", "triton"):
            assert job["scrape_interval"] == "2s"
    (pushgateway_job,) = [j for j in config["scrape_configs"] if j["job_name"] == "pushgateway"]
    assert pushgateway_job["honor_labels"] is True


def test_alertmanager_routes_every_alert_to_the_relay(services: dict) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "prometheus" / "alertmanager.yml").read_text())
    (receiver,) = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    (hook,) = receiver["webhook_configs"]
    url = urllib.parse.urlsplit(hook["url"])
    assert (url.hostname, url.port, url.path) == ("alert-relay", 9095, "/alerts")
    assert "modelops.observability.alert_relay" in services["alert-relay"]["command"]
    assert "MODELOPS_NOTIFY_URLS" in services["alert-relay"]["environment"]


def test_the_platform_reads_promql_and_pushes_to_the_pushgateway(services: dict) -> None:
    for name in ("airflow-scheduler", "airflow-triggerer", "airflow-api-server", "airflow-worker", "gateway"):
        env = services[name]["environment"]
        assert env["MODELOPS_CANARY_METRICS"] == "prometheus", name
        assert env["MODELOPS_PROMETHEUS_URL"] == "http://prometheus:9090", name
        assert env["MODELOPS_PUSHGATEWAY_URL"] == "http://pushgateway:9091", name
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["AIRFLOW__METRICS__STATSD_ON"] == "True"
    assert scheduler["AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED"] == "True"


def test_grafana_is_provisioned_published_on_the_publish_address_and_needs_its_password(
        services: dict, tmp_path: Path) -> None:
    grafana = services["grafana"]
    mounts = {v["target"]: v["source"] for v in grafana["volumes"]}
    assert Path(mounts["/etc/grafana/provisioning"]) == PROJECT_ROOT / "grafana" / "provisioning"
    assert Path(mounts["/var/lib/grafana/dashboards"]) == PROJECT_ROOT / "grafana" / "dashboards"
    assert [(p["host_ip"], int(p["target"])) for p in grafana["ports"]] == [("127.0.0.1", 3000)]
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["depends_on"]["init"]["condition"] == "service_completed_successfully"
    assert "GRAFANA_ADMIN_PASSWORD" in services["init"]["environment"]
    without = example_with_fernet().replace("GRAFANA_ADMIN_PASSWORD=", "# GRAFANA_ADMIN_PASSWORD=")
    result = resolve(without, tmp_path)
    assert result.returncode != 0 and "set GRAFANA_ADMIN_PASSWORD in .env" in result.stderr


def test_provisioned_datasource_is_the_one_the_dashboards_name() -> None:
    from modelops.observability.dashboards import DATASOURCE

    provisioned = yaml.safe_load((PROJECT_ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (source,) = provisioned["datasources"]
    assert (source["type"], source["uid"]) == (DATASOURCE["type"], DATASOURCE["uid"])
    assert source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((PROJECT_ROOT / "grafana/provisioning/dashboards/modelops.yml").read_text())
    (dashboards,) = provider["providers"]
    assert dashboards["options"]["path"] == "/var/lib/grafana/dashboards"
