"""Shared set-up of the benchmarks that run processes of their own on loopback.

- :func:`private_stack`: the environment of an embedded stack placed at a port base, with a
  temporary ``MODELOPS_HOME`` (nothing of a user's stack is touched), and its settings;
- :func:`on_private_stack`: some of that stack's services up, a piece of work, the stack down again;
- :class:`SparkCluster`: a Spark standalone master and workers started from pyspark's own
  ``spark-class`` on loopback, remembered by PID files and stopped by them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

#: Endpoint and credential settings a user's shell may carry: a private stack must not use them.
_FOREIGN = ("MODELOPS_S3_ENDPOINT_URL", "MODELOPS_MLFLOW_TRACKING_URI", "MODELOPS_TRITON_URL", "MODELOPS_AIRFLOW_URL",
            "MODELOPS_GATEWAY_URLS", "MODELOPS_S3_ACCESS_KEY", "MODELOPS_S3_SECRET_KEY")


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def private_stack(port_base: int, prefix: str, **extra: str) -> tuple[Any, Path]:
    """Point this process (and the children it starts) at a stack of its own; returns (settings, home).

    Every server at ``port_base`` + its offset (``config.STACK_PORT_OFFSETS``), state in a new
    temporary directory, notifications off; ``extra`` adds or overrides variables.
    """
    from modelops.config import settings, stack_port_env

    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update(stack_port_env(port_base))
    os.environ.update({"MODELOPS_HOME": str(home), "MODELOPS_NOTIFY_URLS": "", **extra})
    for key in _FOREIGN:
        if key not in extra:
            os.environ.pop(key, None)
    settings.cache_clear()
    return settings(), home


def on_private_stack(port_base: int | None, prefix: str, work: Callable[[], None], *, only: Sequence[str],
                     **extra: str) -> None:
    """Run ``work`` against the ``only`` services of a :func:`private_stack`, stopped again afterwards.

    ``port_base`` None: against the running stack, as configured. The private stack's home is
    removed when the work finished; after a failure it is kept for its logs.
    """
    import shutil

    from modelops.stack import launcher

    if port_base is None:
        work()
        return
    cfg, home = private_stack(port_base, prefix, **extra)
    finished = False
    try:
        launcher.up(cfg, progress=lambda line: None, only=list(only))
        work()
        finished = True
    finally:
        launcher.down(cfg, progress=lambda line: None)
        if finished:
            shutil.rmtree(home, ignore_errors=True)


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


@dataclass(frozen=True)
class SparkCluster:
    """A standalone master and its workers on 127.0.0.1 (ports from ``port``: master, its UI, then two per worker)."""

    home: Path
    port: int
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    auth_secret: str = ""
    """RPC authentication (``spark.authenticate``) with this shared secret, as docker/spark-daemon.sh starts the
    compose topology's daemons: the secret in their environment, never on a command line. Empty: none."""
    crypto: bool = False
    """With ``auth_secret``: RPC encryption too (``spark.network.crypto.enabled``; drivers need the same)."""

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _ui(self, index: int | None) -> str:
        """The web UI (with its ``/json/``) of the master (None) or of worker ``index``."""
        return f"http://127.0.0.1:{self.port + 1 if index is None else self.port + 11 + 10 * index}"

    def _pid_files(self) -> list[Path]:
        run = self.home / "run"
        return [run / f"spark-worker-{i}.pid" for i in range(self.workers)] + [run / "spark-master.pid"]

    def env(self) -> dict[str, str]:
        """What the daemons and a driver of this cluster need: loopback, this interpreter for Python workers."""
        import pyspark

        env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_WORKER_DIR": str(self.home / "spark-work"), "NO_PROXY": "127.0.0.1,localhost"}
        if self.auth_secret:  # the daemons read _SPARK_AUTH_SECRET; a driver, MODELOPS_SPARK_AUTH_SECRET
            crypto = " -Dspark.network.crypto.enabled=true" if self.crypto else ""
            env |= {"_SPARK_AUTH_SECRET": self.auth_secret, "MODELOPS_SPARK_AUTH_SECRET": self.auth_secret,
                    "SPARK_DAEMON_JAVA_OPTS": f"-Dspark.authenticate=true{crypto}"}
            if self.crypto:
                env["PYSPARK_SUBMIT_ARGS"] = "--conf spark.network.crypto.enabled=true pyspark-shell"
        return env

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the master and the workers; return when the master lists every worker ALIVE."""
        import pyspark

        from modelops import process

        spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        env, logs, (*worker_pids, master_pid) = self.env(), self.home / "logs", self._pid_files()
        process.start((spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                       "--port", str(self.port), "--webui-port", str(self.port + 1)),
                      env=env, log_file=logs / "spark-master.log", pid_file=master_pid)
        for i, pid_file in enumerate(worker_pids):
            process.start((spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                           "--port", str(self.port + 10 + 10 * i), "--webui-port", str(self.port + 11 + 10 * i),
                           "--cores", str(self.cores), "--memory", self.memory, self.master_url),
                          env=env, log_file=logs / f"spark-worker-{i}.log", pid_file=pid_file)
        deadline = time.monotonic() + timeout_s
        alive = 0
        while time.monotonic() < deadline:
            try:
                alive = int(_json(f"{self._ui(None)}/json/").get("aliveworkers", 0))
            except (OSError, ValueError):
                alive = 0
            if alive >= self.workers:
                return
            time.sleep(0.5)
        raise SystemExit(f"Spark cluster: {alive} of {self.workers} workers alive after {timeout_s:.0f} s "
                         f"(logs in {logs})")

    def pids(self) -> list[int]:
        """The running daemons (workers, master); an executor is a child of its worker."""
        from modelops import process

        return [pid for f in self._pid_files() if (pid := process.live_pid(f)) is not None]

    def executors_per_worker(self, app_id: str) -> list[int]:
        """How many executors of application ``app_id`` each worker runs (from each worker's ``/json/``)."""
        return [sum(1 for e in _json(f"{self._ui(i)}/json/").get("executors", []) if e.get("appid") == app_id)
                for i in range(self.workers)]

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master, by their PID files."""
        from modelops import process

        for pid_file in self._pid_files():
            process.stop(pid_file)
