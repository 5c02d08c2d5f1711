"""Structure of the production topology (docker-compose.yml), resolved by the real Compose binary (no engine).

Only the load-balanced gateway, the Airflow UI, the MLflow UI and Grafana are published; every long-running
service has a health check; placeholder or empty secrets are refused by the init service's check.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import compose
from modelops.config import PROJECT_ROOT
from modelops.deploy.preflight import (
    CONFIG_FILES,
    SECRETS,
    SPARK_WRITES,
    check_secrets,
    parse_env_file,
    s3_identities_doc,
    secret_problems,
)
from modelops.errors import ConfigError

COMPOSE_BIN = Path(compose.__file__).parent / "docker-compose"
ENV_EXAMPLE = PROJECT_ROOT / ".env.example"
# Grafana too: the dashboards are a UI people open (behind its admin login, GRAFANA_ADMIN_PASSWORD); Prometheus,
# the Pushgateway and Alertmanager have no login and stay on the compose network (Grafana's Explore queries them).
PUBLISHED = {"gateway-lb": 8400, "airflow-api-server": 8080, "mlflow": 5000, "grafana": 3000}
FERNET = "q3Tq3vCIKyi_yy1UnY8xkGl2Z0Gsw4jEjQ3b2cQ3mXI="
# The volumes init writes generated secrets into, and the only services that read each one.
# (The scaler reads triton-admin too: it runs with the `scaling` profile, tests/unit/test_compose_scaler.py.)
SECRET_READERS = {"objectstore-config": {"objectstore"}, "mlflow-config": {"mlflow"},
                  "airflow-auth": {"airflow-api-server"},
                  "triton-admin": {"triton", "airflow-worker", "reconciler"},
                  "spark-auth": {"spark-master", "spark-worker", "airflow-worker"}}
IDENTITIES = ("ADMIN", "AIRFLOW", "MLFLOW", "GATEWAY", "TRITON", "SPARK")


def resolve(env_text: str, tmp_path: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "test.env"
    env_file.write_text(env_text)
    args = [str(COMPOSE_BIN), "-p", "structure", "--env-file", str(env_file)]
    for name in files or ("docker-compose.yml",):
        args += ["-f", str(PROJECT_ROOT / name)]
    # A clean environment: Compose lets the caller's variables win over the env file.
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([*args, "config", "--format", "json"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=60, check=False, env=clean)


def example_with_fernet() -> str:
    return ENV_EXAMPLE.read_text().replace("AIRFLOW_FERNET_KEY=\n", f"AIRFLOW_FERNET_KEY={FERNET}\n")


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result = resolve(example_with_fernet(), tmp_path_factory.mktemp("compose"))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_only_the_gateway_lb_airflow_mlflow_and_grafana_are_published(production: dict) -> None:
    published = {name: [int(p["target"]) for p in svc.get("ports", [])]
                 for name, svc in production["services"].items() if svc.get("ports")}
    assert published == {name: [port] for name, port in PUBLISHED.items()}
    for name in ("triton", "objectstore", "postgres", "spark-master", "spark-worker", "gateway",
                 "airflow-worker", "redis",
                 "prometheus", "pushgateway", "alertmanager", "alert-relay", "statsd-bridge"):
        assert not production["services"][name].get("ports"), name


def test_every_long_running_service_has_a_health_check(production: dict) -> None:
    long_running = [n for n, s in production["services"].items() if s.get("restart") == "unless-stopped"]
    assert len(long_running) >= 20
    missing = [n for n in long_running if not production["services"][n].get("healthcheck", {}).get("test")]
    assert missing == []


def test_mlflow_runs_behind_basic_auth_and_accepts_its_service_name(production: dict) -> None:
    command = production["services"]["mlflow"]["command"]
    assert "--app-name=basic-auth" in command
    allowed = next(c for c in command if c.startswith("--allowed-hosts="))
    assert {"mlflow", "mlflow:5000"} <= set(allowed.split("=", 1)[1].split(","))
    airflow_env = production["services"]["airflow-scheduler"]["environment"]
    assert airflow_env["MLFLOW_TRACKING_USERNAME"] == "airflow"


def test_the_scheduled_dags_are_live_from_the_start(production: dict) -> None:
    """release_on_staging, feedback_join and nightly_drift must run without a person unpausing them."""
    for name in ("airflow-scheduler", "airflow-dag-processor"):
        assert production["services"][name]["environment"]["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"


def test_each_service_has_its_own_object_store_identity(production: dict) -> None:
    keys = {name: production["services"][name]["environment"]["AWS_ACCESS_KEY_ID"]
            for name in ("airflow-scheduler", "mlflow", "gateway", "triton")}
    keys["spark-worker"] = production["services"]["spark-worker"]["environment"]["MODELOPS_S3_ACCESS_KEY"]
    assert len(set(keys.values())) == 5, keys


def test_the_spark_executors_read_the_bucket_and_write_only_the_feedback_output() -> None:
    from modelops.jobs.feedback_tasks import METRICS_PREFIX

    env = {f"S3_{who}_{kind}_KEY": f"{who.lower()}-{kind.lower()}"
           for who in IDENTITIES for kind in ("ACCESS", "SECRET")}
    doc = s3_identities_doc(env, "modelops", "mlflow")
    spark = next(i for i in doc["identities"] if i["name"] == "spark")  # type: ignore[union-attr]
    assert spark["actions"] == ["Read:modelops", "List:modelops", "Write:modelops/metrics/ctr_cvr/*"]
    assert SPARK_WRITES == METRICS_PREFIX


def test_the_gateways_write_only_their_event_logs() -> None:
    from modelops.deploy.preflight import GATEWAY_WRITES
    from modelops.records import LOG_PREFIXES

    env = {f"S3_{who}_{kind}_KEY": f"{who.lower()}-{kind.lower()}"
           for who in IDENTITIES for kind in ("ACCESS", "SECRET")}
    doc = s3_identities_doc(env, "modelops", "mlflow")
    gateway = next(i for i in doc["identities"] if i["name"] == "gateway")  # type: ignore[union-attr]
    assert gateway["actions"] == ["Read:modelops", "List:modelops", "Write:modelops/logs/*"]
    assert all(prefix.startswith(f"{GATEWAY_WRITES}/") for prefix in LOG_PREFIXES.values())


def test_generated_secrets_are_mounted_only_where_they_are_read(production: dict) -> None:
    """Each generated config (identities of every object-store user, MLflow's database URI, the Airflow admin's
    password) has a volume of its own, mounted by init (which writes it) and its one reader; no other service."""
    services = production["services"]
    mounted_by_init = {m["source"]: m for m in services["init"]["volumes"] if m["type"] == "volume"}
    # triton-models: mounted read-only, only so that the engine fills the empty volume once, before the services
    # that share it are created (they would race doing it at once); it holds no secret.
    assert mounted_by_init.pop("triton-models")["read_only"] is True
    written = set(mounted_by_init)
    assert written == set(SECRET_READERS) == set(CONFIG_FILES)
    mounted: dict[str, set[str]] = {volume: set() for volume in SECRET_READERS}
    for name, service in services.items():
        for mount in service.get("volumes", []):
            if name != "init" and mount.get("source") in SECRET_READERS:
                mounted[mount["source"]].add(name)
    assert mounted == SECRET_READERS
    for volume in ("objectstore-config", "mlflow-config", "triton-admin", "spark-auth"):
        for reader in SECRET_READERS[volume]:
            assert all(m.get("read_only") for m in services[reader]["volumes"] if m.get("source") == volume), reader
    # Nothing is shared between the batch drivers and the Spark workers but the object store (and the secret
    # both sides authenticate with): the workers' other volumes are anonymous, one per replica.
    worker_volumes = services["spark-worker"]["volumes"]
    assert {m.get("source") for m in worker_volumes if m["type"] == "volume" and m.get("source")} == {"spark-auth"}


def test_images_build_from_the_project_dockerfile(production: dict) -> None:
    for name in ("mlflow", "airflow-scheduler", "airflow-worker", "gateway", "spark-master", "spark-worker",
                 "objectstore"):
        service = production["services"][name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
        assert service.get("entrypoint") is None, name


def test_the_documented_example_resolves_and_the_init_check_names_the_empty_fernet_key(tmp_path: Path) -> None:
    result = resolve(ENV_EXAMPLE.read_text(), tmp_path)
    assert result.returncode == 0, result.stderr
    init_env = json.loads(result.stdout)["services"]["init"]["environment"]
    problems = secret_problems(init_env, parse_env_file(ENV_EXAMPLE.read_text()))
    assert any(p.startswith("AIRFLOW_FERNET_KEY is empty") for p in problems), problems


def test_the_init_service_refuses_every_placeholder_secret(production: dict) -> None:
    """The init service gets every secret, and its check names each one still at its placeholder."""
    init_env = production["services"]["init"]["environment"]
    problems = secret_problems(init_env, parse_env_file(ENV_EXAMPLE.read_text()))
    for name in SECRETS:
        if name != "AIRFLOW_FERNET_KEY":
            assert any(p.startswith(f"{name} still holds the .env.example placeholder") for p in problems), name
    assert any(p.startswith("AIRFLOW_FERNET_KEY") for p in secret_problems({}, {}))


def test_the_test_override_replaces_only_what_cannot_exist_here(tmp_path: Path, production: dict) -> None:
    """Images that cannot be pulled (stand-ins), the GPU Triton, and Grafana kept out by a profile."""
    result = resolve(example_with_fernet(), tmp_path, "docker-compose.yml", "docker-compose.test.yml")
    assert result.returncode == 0, result.stderr
    test = json.loads(result.stdout)
    assert "grafana" not in test["services"]  # `config` without --profile grafana: not started either
    changed = sorted(n for n, s in test["services"].items() if s != production["services"][n])
    assert changed == ["alertmanager", "gateway-lb", "postgres", "prometheus", "pushgateway", "redis", "triton"]
    assert "deploy" not in test["services"]["triton"]
    for name in ("alertmanager", "prometheus", "pushgateway", "redis"):
        standin, real = test["services"][name], production["services"][name]
        assert standin["image"] == f"modelops-standin-{name}:latest"
        assert {k: v for k, v in standin.items() if k not in ("image", "build")} == {
            k: v for k, v in real.items() if k != "image"}, name


def test_good_secrets_pass_and_bad_ones_are_named() -> None:
    placeholders = parse_env_file(ENV_EXAMPLE.read_text())
    good = {name: f"{name.lower()}-0123456789abcdef" for name in SECRETS}
    good["AIRFLOW_FERNET_KEY"] = FERNET
    good |= {f"S3_{who}_ACCESS_KEY": who.lower() for who in IDENTITIES}
    check_secrets(good, placeholders)
    bad = good | {"AIRFLOW_FERNET_KEY": "not-base64!", "S3_TRITON_SECRET_KEY": "short",
                  "POSTGRES_PASSWORD": placeholders["POSTGRES_PASSWORD"], "S3_ADMIN_ACCESS_KEY": ""}
    with pytest.raises(ConfigError) as info:
        check_secrets(bad, placeholders)
    message = str(info.value)
    for expected in ("AIRFLOW_FERNET_KEY", "S3_TRITON_SECRET_KEY is 5 characters", "POSTGRES_PASSWORD still holds",
                     "S3_ADMIN_ACCESS_KEY is empty"):
        assert expected in message


def test_airflow_runs_on_celery_workers_and_spark_on_a_two_worker_cluster(production: dict) -> None:
    """CeleryExecutor (Redis broker, PostgreSQL results) on every Airflow component; two replicas of each worker."""
    services = production["services"]
    for name in ("airflow-scheduler", "airflow-api-server", "airflow-worker", "airflow-triggerer"):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://:change-me-redis@redis:6379/"), name
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://airflow:"), name
    # `airflow celery worker`, with the tasks' imports done once in the parent of the pool (airflow_preload)
    assert services["airflow-worker"]["command"] == [
        "python", "-m", "modelops.stack.airflow_preload", "celery", "worker"]
    assert services["airflow-worker"]["deploy"]["replicas"] == 2
    assert services["spark-worker"]["deploy"]["replicas"] == 2
    assert "hostname" not in services["airflow-worker"] and "hostname" not in services["spark-worker"]
    assert "redis" in services["airflow-scheduler"]["depends_on"]
    assert "ports" not in services["redis"]


def test_the_broker_password_must_be_url_safe() -> None:
    good = {name: f"{name.lower()}-0123456789abcdef" for name in SECRETS}
    good["AIRFLOW_FERNET_KEY"] = FERNET
    for ident in IDENTITIES:
        good[f"S3_{ident}_ACCESS_KEY"] = ident.lower()
    assert secret_problems(good, {}) == []
    (problem,) = secret_problems({**good, "REDIS_PASSWORD": "p@ss/word#0123"}, {})
    assert problem.startswith("REDIS_PASSWORD goes into a URL as it is: only letters, digits and - _ . ~")
