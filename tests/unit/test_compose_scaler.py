"""The Triton scaling controller in docker-compose.yml: off unless the `scaling` profile is enabled (as the
embedded stack's MODELOPS_SCALING=off), and then the same command, identity and health rule as embedded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import compose
from modelops.config import PROJECT_ROOT
from tests.unit.test_compose_file import example_with_fernet

COMPOSE_BIN = Path(compose.__file__).parent / "docker-compose"


def resolved(tmp_path: Path, *profiles: str) -> dict:
    env_file = tmp_path / "test.env"
    env_file.write_text(example_with_fernet())
    args = [str(COMPOSE_BIN), "-p", "structure", "--env-file", str(env_file), "-f",
            str(PROJECT_ROOT / "docker-compose.yml")]
    for profile in profiles:
        args += ["--profile", profile]
    result = subprocess.run([*args, "config", "--format", "json"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_scaler_is_off_unless_its_profile_is_enabled(tmp_path: Path) -> None:
    assert "scaler" not in resolved(tmp_path)["services"]
    topology = resolved(tmp_path, "scaling")
    scaler = topology["services"]["scaler"]
    assert scaler["command"] == ["modelops", "scale"]
    assert scaler["image"] == topology["services"]["reconciler"]["image"]
    env = scaler["environment"]
    # every Triton server of the service (one controller each), found by DNS
    assert env["MODELOPS_TRITON_URL"] == "dns+http://triton:8000" and env["MODELOPS_TRITON_METRICS_PORT"] == "8002"
    # the per-model lock lives in the object store: the reconciler's identity, which takes the same lock
    assert env["MODELOPS_S3_ACCESS_KEY"] == topology["services"]["reconciler"]["environment"]["MODELOPS_S3_ACCESS_KEY"]
    assert env["MODELOPS_SCALING_MODE"] == "replace" and env["MODELOPS_SCALING_MAX_INSTANCES"] == "4"
    assert not scaler.get("ports")
    assert scaler["depends_on"]["triton"]["condition"] == "service_healthy"
    assert "scaler.status.json" in " ".join(scaler["healthcheck"]["test"])
    assert scaler["restart"] == "unless-stopped"
    assert any(v["target"] == "/var/lib/modelops" and v["source"] == "scaler-state" for v in scaler["volumes"])
    # it loads and unloads through Triton's restricted repository API: the admin key, read-only, on serving
    assert any(v.get("source") == "triton-admin" and v.get("read_only") for v in scaler["volumes"])
    assert env["MODELOPS_TRITON_ADMIN_KEY_FILE"] == "/etc/modelops/triton-admin/admin-key"
    assert set(scaler["networks"]) == {"serving", "data"}
