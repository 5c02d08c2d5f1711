"""Airflow 3 in the embedded stack: its environment, the metadata DB's migration, its four components.

Split from :mod:`modelops.stack.services` (the other services);
:func:`modelops.stack.launcher.all_services` lists these with the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from modelops.config import PROJECT_ROOT, Settings
from modelops.credentials import VIEWER_USER, airflow_password, airflow_viewer_password, secret_file
from modelops.errors import StackError
from modelops.secretfiles import generated_secret, write_private
from modelops.stack.services import VENV_BIN, Service, base_env, with_plugins


def airflow_env(cfg: Settings) -> dict[str, str]:
    home = cfg.home / "airflow"
    api = f"http://{cfg.bind_host}:{cfg.airflow_port}"
    env = base_env(cfg)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(cfg.airflow_parallelism),
        # The platform's scheduled DAGs (release_on_staging, feedback_join, nightly_drift) are live
        # from the start: a version moved to Staging in the MLflow UI is released, nightly jobs run.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API__HOST": cfg.bind_host,
        "AIRFLOW__API__PORT": str(cfg.airflow_port),
        "AIRFLOW__API__BASE_URL": api,
        "AIRFLOW__API_AUTH__JWT_SECRET": secret_file(cfg.home, "airflow-jwt-secret"),
        "AIRFLOW__CORE__FERNET_KEY": _fernet_key(cfg.home),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{cfg.airflow_user}:admin,{VIEWER_USER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "simple_auth_manager_passwords.json"),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(cfg.airflow_worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(cfg.airflow_trigger_log_port),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "15",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "600",
        # A task of a scheduler that died (SIGKILL takes its LocalExecutor workers along) is reset and run
        # again once that scheduler's heartbeat is 30 s old: check every 15 s, not every 300 s (default).
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "60",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "PYTHONPATH": with_plugins(os.environ.get("PYTHONPATH", "")),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The Spark connection of the batch DAGs: spark-submit to MODELOPS_SPARK_MASTER.
        "AIRFLOW_CONN_MODELOPS_SPARK": json.dumps({"conn_type": "spark", "host": cfg.spark_master}),
    })
    from modelops.observability.prometheus import airflow_statsd_env  # StatsD to the bridge when it runs

    env.update(airflow_statsd_env(cfg))
    return env


def _fernet_key(home: Path) -> str:
    import base64

    return generated_secret(home / "secrets" / "airflow-fernet-key",
                            lambda: base64.urlsafe_b64encode(os.urandom(32)).decode())


_MIGRATE_LOCK = threading.Lock()


def airflow_migrate(cfg: Settings) -> None:
    """Create or upgrade Airflow's metadata DB and write the admin's password file (idempotent).

    Every Airflow component runs this before it starts; the lock makes the first one migrate
    and the others wait, so all four components then start at the same time.
    """
    with _MIGRATE_LOCK:
        _airflow_migrate(cfg)


def _airflow_migrate(cfg: Settings) -> None:
    home = cfg.home / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    write_private(home / "simple_auth_manager_passwords.json",
                  json.dumps({cfg.airflow_user: airflow_password(cfg), VIEWER_USER: airflow_viewer_password(cfg)}))
    import airflow

    marker = home / ".migrated"
    if marker.exists() and marker.read_text() == airflow.__version__ and (home / "airflow.db").exists():
        return
    log = cfg.home / "logs" / "airflow-db-migrate.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        result = subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"], env=airflow_env(cfg), stdout=out,
            stderr=subprocess.STDOUT, check=False,
        )
    if result.returncode != 0:
        from modelops.process import tail

        raise StackError(f"airflow: `airflow db migrate` failed (log {log}):\n{tail(log, 15)}")
    marker.write_text(airflow.__version__)


def airflow_services(cfg: Settings) -> list[Service]:
    env = airflow_env(cfg)
    airflow_bin = str(VENV_BIN / "airflow")
    health = f"http://{cfg.bind_host}:{cfg.airflow_port}/api/v2/monitor/health"

    def migrate() -> None:
        airflow_migrate(cfg)

    api = Service(
        name="airflow-api-server",
        argv=(airflow_bin, "api-server", "--host", cfg.bind_host, "--port", str(cfg.airflow_port),
              "--workers", "1"),
        ports=(cfg.airflow_port,),
        health_url=health,
        env=env,
        prepare=migrate,
        url=cfg.airflow_api_url,
    )
    # Log servers are skipped: on one machine the API server reads task logs from AIRFLOW_HOME,
    # and Airflow's log server would bind every interface.
    others = [
        # Its tasks are forks of its LocalExecutor workers: it imports what they import first (airflow_preload).
        Service(name="airflow-scheduler", argv=(str(VENV_BIN / "python"), "-m", "modelops.stack.airflow_preload",
                                                "scheduler", "--skip-serve-logs"), ports=(),
                health_url=health, env=env, prepare=migrate, airflow_component="scheduler"),
        Service(name="airflow-dag-processor", argv=(airflow_bin, "dag-processor"), ports=(),
                health_url=health, env=env, prepare=migrate, airflow_component="dag_processor"),
        Service(name="airflow-triggerer", argv=(airflow_bin, "triggerer", "--skip-serve-logs"), ports=(),
                health_url=health, env=env, prepare=migrate, airflow_component="triggerer"),
    ]
    return [api, *others]
