"""The hardening of docker-compose.yml, resolved by the real Compose binary (no engine), against the one table
both this file and the running-topology checks use (tests/compose/hardening.py): networks by role, each
service's user, read-only roots, no capabilities, limits; the authenticated internals' wiring; the pieces of
code behind them (the PostgreSQL roles' plan, the Triton client's admin header, the Spark driver's settings).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from modelops.config import PROJECT_ROOT, load_settings
from modelops.deploy import db_roles
from modelops.deploy.preflight import main as preflight_main
from modelops.errors import ConfigError
from tests.compose.hardening import EXTERNAL, INTERNAL, SERVICES, TEST_UIDS
from tests.unit.test_compose_file import IDENTITIES, example_with_fernet, resolve


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result = resolve(example_with_fernet(), tmp_path_factory.mktemp("hardening"))
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.fixture(scope="module")
def test_topology(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result = resolve(example_with_fernet(), tmp_path_factory.mktemp("hardening-test"),
                     "docker-compose.yml", "docker-compose.test.yml")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_the_networks_are_the_roles_and_only_edge_and_egress_reach_outside(topology: dict) -> None:
    networks = topology["networks"]
    assert set(networks) == INTERNAL | EXTERNAL
    assert {name for name, net in networks.items() if net.get("internal")} == INTERNAL


def test_every_service_is_on_its_declared_networks_only(topology: dict) -> None:
    services = topology["services"]
    assert set(services) == set(SERVICES) - {"scaler"}  # the scaler: its profile (test_compose_scaler.py)
    for name, service in services.items():
        assert set(service.get("networks") or {}) == SERVICES[name][0], name
    assert services["init"]["network_mode"] == "none"
    # Nothing is on a default network: every service names its own.
    assert "default" not in topology["networks"]


def test_only_edge_members_publish_and_the_data_stores_share_no_network_with_the_edge(topology: dict) -> None:
    services = topology["services"]
    for name, service in services.items():
        if service.get("ports"):
            assert "edge" in service["networks"], name
    for store in ("postgres", "redis", "objectstore", "triton", "spark-master", "pushgateway", "prometheus"):
        assert "edge" not in services[store]["networks"], store
    # The Pushgateway is reachable from the jobs (Airflow workers) and observability only, never a gateway.
    on_observability = {n for n, s in services.items() if "observability" in (s.get("networks") or {})}
    assert on_observability == {"prometheus", "pushgateway", "alertmanager", "alert-relay", "statsd-bridge",
                                "grafana", "airflow-worker", "airflow-triggerer"}


@pytest.mark.parametrize("which", ["production", "test"])
def test_every_service_is_least_privileged(topology: dict, test_topology: dict, which: str) -> None:
    services = (topology if which == "production" else test_topology)["services"]
    for name, service in services.items():
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"] and not service.get("cap_add"), name
        assert service.get("security_opt") == ["no-new-privileges:true"], name
        assert int(service["mem_limit"]) > 0 and 0 < float(service["cpus"]) <= 2, name  # the CI machine: 2 cores
        assert service.get("user") not in (None, "", "root", "0", "0:0"), name
        uid = TEST_UIDS.get(name, SERVICES[name][1]) if which == "test" else SERVICES[name][1]
        if uid is not None:
            assert service["user"].split(":")[0] == str(uid), name
        assert not service.get("privileged"), name


def test_no_service_may_take_more_than_a_quarter_of_the_ci_machine(test_topology: dict) -> None:
    """The limits are caps, not reservations (their sum may exceed the machine): none lets one runaway
    service take more than a quarter of the 24 GiB CI machine or more than its 2 cores."""
    for name, service in test_topology["services"].items():
        assert int(service["mem_limit"]) <= 6 * 2**30 and float(service["cpus"]) <= 2, name


def test_writes_go_to_named_tmpfs_and_volumes(topology: dict) -> None:
    services = topology["services"]
    for name in ("airflow-worker", "airflow-api-server", "mlflow", "reconciler", "spark-master", "statsd-bridge"):
        assert any(t.startswith("/tmp:exec") for t in services[name]["tmpfs"]), name
    assert any(v["target"] == "/var/lib/modelops" for v in services["gateway"]["volumes"])  # the spool: disk
    assert {v["target"] for v in services["spark-worker"]["volumes"]} >= {"/opt/spark/work", "/tmp/spark"}
    lb = (PROJECT_ROOT / "docker" / "gateway-lb.conf").read_text()
    assert "pid /tmp/nginx.pid;" in lb and "proxy_temp_path /tmp/" in lb
    assert services["gateway-lb"]["command"][:3] == ["nginx", "-c", "/etc/modelops/nginx.conf"]


def test_each_service_connects_to_postgresql_with_its_own_role(topology: dict) -> None:
    services = topology["services"]
    airflow = services["airflow-scheduler"]["environment"]
    assert airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:change-me-pg-airflow@")
    mlflow = " ".join(services["mlflow"]["command"])
    assert "--backend-store-uri=postgresql+psycopg2://mlflow:change-me-pg-mlflow@postgres:5432/mlflow" in mlflow
    assert "postgresql+psycopg2://mlflow:" in services["init"]["environment"]["MLFLOW_AUTH_DATABASE_URI"]
    # The superuser's password: the server, the roles step and init's check; nobody else, in any form.
    def holds_it(service: dict) -> bool:  # .env.example's POSTGRES_PASSWORD is "change-me"
        text = json.dumps([service.get("environment") or {}, service.get("command") or []])
        return '"change-me"' in text or ":change-me@" in text

    assert {n for n, s in services.items() if holds_it(s)} == {"postgres", "postgres-roles", "init"}
    roles = services["postgres-roles"]
    assert roles["command"] == ["python", "-m", "modelops.deploy.db_roles"]
    for name in ("mlflow", "airflow-db-migrate", "airflow-scheduler"):
        assert services[name]["depends_on"]["postgres-roles"]["condition"] == "service_completed_successfully"


def test_triton_restricts_its_repository_api_with_the_admin_key(topology: dict, test_topology: dict) -> None:
    for services in (topology["services"], test_topology["services"]):
        triton = services["triton"]
        assert triton["entrypoint"][-2:] == ["/bin/sh", "/usr/local/bin/triton-serve"]
        assert any(v["target"] == "/usr/local/bin/triton-serve" for v in triton["volumes"])
    assert test_topology["services"]["triton"]["entrypoint"][0] == "/usr/bin/tini"  # the kill check's SIGKILL
    wrapper = (PROJECT_ROOT / "docker" / "triton-serve.sh").read_text()
    assert '--http-restricted-api="$restricted" --grpc-restricted-protocol="$restricted"' in wrapper
    assert 'restricted="model-repository,logging,trace:admin-key=' in wrapper
    for name in ("airflow-worker", "reconciler"):
        env = topology["services"][name]["environment"]
        assert env["MODELOPS_TRITON_ADMIN_KEY_FILE"] == "/etc/modelops/triton-admin/admin-key", name
    for name in ("gateway", "airflow-scheduler", "airflow-api-server", "prometheus"):
        assert "MODELOPS_TRITON_ADMIN_KEY_FILE" not in (topology["services"][name].get("environment") or {}), name


def test_spark_authenticates_its_daemons_and_drivers(topology: dict) -> None:
    services = topology["services"]
    assert services["spark-master"]["command"][:2] == ["modelops-spark", "master"]
    assert services["spark-worker"]["command"][:3] == ["modelops-spark", "worker", "spark://spark-master:7077"]
    env = services["airflow-worker"]["environment"]
    assert env["MODELOPS_SPARK_AUTH_SECRET_FILE"] == "/etc/modelops/spark-auth/secret"
    daemon = (PROJECT_ROOT / "docker" / "spark-daemon.sh").read_text()
    assert "-Dspark.authenticate=true" in daemon and "export _SPARK_AUTH_SECRET" in daemon
    dockerfile = (PROJECT_ROOT / "docker/Dockerfile").read_text()
    assert "COPY docker/spark-daemon.sh /usr/local/bin/modelops-spark" in dockerfile


def test_grafana_resets_the_admin_password_at_every_start(topology: dict) -> None:
    grafana = topology["services"]["grafana"]
    script = " ".join(grafana["entrypoint"])
    assert "admin reset-admin-password --password-from-stdin" in script
    assert script.rstrip().endswith('exec /run.sh "$$@" grafana')  # (config keeps the $$ escape)


def test_init_writes_the_triton_key_and_the_spark_secret_for_their_readers(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from modelops.deploy.preflight import SECRETS

    env = {name: f"{name.lower().replace('_', '-')}-0123456789" for name in SECRETS}
    env["AIRFLOW_FERNET_KEY"] = "q3Tq3vCIKyi_yy1UnY8xkGl2Z0Gsw4jEjQ3b2cQ3mXI="
    env |= {f"S3_{who}_ACCESS_KEY": who.lower() for who in IDENTITIES}
    env["MLFLOW_AUTH_DATABASE_URI"] = "postgresql+psycopg2://mlflow:x@postgres:5432/mlflow_auth"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    example = tmp_path / "env.example"
    example.write_text("")
    dirs = {flag: tmp_path / flag for flag in ("objectstore", "mlflow", "airflow", "triton", "spark")}
    assert preflight_main(["--env-example", str(example), "--objectstore-config", str(dirs["objectstore"]),
                           "--mlflow-config", str(dirs["mlflow"]), "--airflow-auth", str(dirs["airflow"]),
                           "--triton-admin", str(dirs["triton"]), "--spark-auth", str(dirs["spark"])]) == 0
    assert (dirs["triton"] / "admin-key").read_text() == env["TRITON_ADMIN_KEY"]
    assert (dirs["spark"] / "secret").read_text() == env["SPARK_AUTH_SECRET"]
    assert (dirs["triton"] / "admin-key").stat().st_mode & 0o777 == 0o640


def test_the_triton_key_must_fit_in_its_flag() -> None:
    from modelops.deploy.preflight import SECRETS, secret_problems

    good = {name: f"{name.lower()}-0123456789abcdef" for name in SECRETS}
    good["AIRFLOW_FERNET_KEY"] = "q3Tq3vCIKyi_yy1UnY8xkGl2Z0Gsw4jEjQ3b2cQ3mXI="
    good |= {f"S3_{who}_ACCESS_KEY": who.lower() for who in IDENTITIES}
    assert secret_problems(good, {}) == []
    (problem,) = secret_problems({**good, "TRITON_ADMIN_KEY": "key:with=sep,arators"}, {})
    assert problem.startswith("TRITON_ADMIN_KEY goes into a URL as it is")


# -- the PostgreSQL roles -----------------------------------------------------------------------------------
def test_a_fresh_server_gets_both_roles_and_their_databases_locked() -> None:
    steps = db_roles.plan(existing_roles={"modelops"}, existing_databases={"postgres", "airflow", "template1"})
    assert steps[:2] == [("create_role", "airflow", ()), ("create_role", "mlflow", ())]
    assert ("alter_owner", "airflow", ("airflow",)) in steps and ("hand_over", "airflow", ("airflow",)) in steps
    for database in ("mlflow", "mlflow_auth"):
        assert ("create_database", "mlflow", (database,)) in steps
        assert ("lock", "mlflow", (database,)) in steps
    assert steps[-1] == ("lock", None, ("postgres",))


def test_a_second_run_re_keys_the_roles_and_changes_nothing_else() -> None:
    databases = {"postgres", "airflow", "mlflow", "mlflow_auth"}
    steps = db_roles.plan(existing_roles={"modelops", "airflow", "mlflow"}, existing_databases=databases)
    assert [s for s in steps if s[0].endswith("_role")] == [("alter_role", "airflow", ()), ("alter_role", "mlflow", ())]
    assert not [s for s in steps if s[0] == "create_database"]


def test_the_roles_step_names_a_missing_password() -> None:
    with pytest.raises(ConfigError, match="POSTGRES_MLFLOW_PASSWORD"):
        db_roles.passwords({"POSTGRES_AIRFLOW_PASSWORD": "x" * 16})


# -- the Triton client's admin header ------------------------------------------------------------------------
class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append((self.path, self.headers.get("admin-key")))
        body = b"[]" if self.path.endswith("/index") else b"{}"
        if self.path.endswith("/infer"):
            body = json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [1], "data": [1.0]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_triton_client_sends_the_admin_key_on_repository_calls_only(recorder: str) -> None:
    import numpy as np

    from modelops.serving.triton import TritonClient

    client = TritonClient(recorder, admin_key="s3cret-key")
    client.repository_index()
    client.load("m")
    client.unload("m")
    client.infer("m", 1, {"x": np.zeros(1, dtype=np.float32)}, ("y",))
    assert _Recorder.seen == [("/v2/repository/index", "s3cret-key"), ("/v2/repository/models/m/load", "s3cret-key"),
                              ("/v2/repository/models/m/unload", "s3cret-key"), ("/v2/models/m/versions/1/infer", None)]


def test_the_triton_client_reads_the_configured_key_file(recorder: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from modelops.config import settings
    from modelops.serving.triton import TritonClient

    key_file = tmp_path / "admin-key"
    key_file.write_text("from-the-file\n")
    monkeypatch.setenv("MODELOPS_TRITON_ADMIN_KEY_FILE", str(key_file))
    monkeypatch.delenv("MODELOPS_TRITON_ADMIN_KEY", raising=False)
    settings.cache_clear()
    try:
        TritonClient(recorder).unload("m")
        TritonClient(recorder, admin_key="").unload("m")
    finally:
        settings.cache_clear()
    assert _Recorder.seen == [("/v2/repository/models/m/unload", "from-the-file"),
                              ("/v2/repository/models/m/unload", None)]


# -- the Spark driver --------------------------------------------------------------------------------------
def test_the_spark_driver_authenticates_and_listens_toward_the_master(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    from modelops.spark import cluster_conf

    secret = tmp_path / "secret"
    secret.write_text("spark-secret\n")
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    cfg = load_settings({"MODELOPS_SPARK_AUTH_SECRET_FILE": str(secret)})
    assert cluster_conf("local[2]", cfg) == {}
    assert cluster_conf("spark://127.0.0.1:7077", cfg) == {
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.authenticate": "true", "spark.authenticate.secret": "spark-secret"}
    assert "spark.authenticate" not in cluster_conf("spark://127.0.0.1:7077", load_settings({}))


def test_the_documented_reachability_matrix_is_the_declared_one() -> None:
    from tests.compose.hardening import reachability_table

    page = (PROJECT_ROOT / "docs" / "operations" / "security.md").read_text()
    assert reachability_table() in page, "security.md: paste tests.compose.hardening.reachability_table()"
