"""A Spark standalone cluster in the embedded stack: a master and workers from pyspark's own ``spark-class``.

Off by default (``MODELOPS_SPARK_CLUSTER_WORKERS=0``). With N > 0 the stack starts ``spark-master``
on ``127.0.0.1:MODELOPS_SPARK_CLUSTER_PORT`` (web UI on the next port) and ``spark-worker-0`` …
``spark-worker-{N-1}`` (worker i on PORT+10+10i, its UI on the port after), one core each; the batch
jobs run on it with ``MODELOPS_SPARK_MASTER=spark://127.0.0.1:PORT`` — the same engine as compose's
``spark-master`` / ``spark-worker`` services, on one machine. Executors are children of their
worker and inherit its environment: the stack's settings, the object store's keys and ``plugins/``
on ``PYTHONPATH`` (their Python workers import ``modelops``).
"""

from __future__ import annotations

import functools
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from modelops.config import Settings
from modelops.stack.services import Service, base_env, with_plugins

MASTER = "spark-master"


def worker_name(index: int) -> str:
    return f"spark-worker-{index}"


def master_url(cfg: Settings) -> str:
    return f"spark://{cfg.bind_host}:{cfg.spark_cluster_port}"


def ui_url(cfg: Settings, worker: int | None = None) -> str:
    """The web UI (``/json/`` gives its state) of the master (None) or of worker ``worker``."""
    port = cfg.spark_cluster_port + (1 if worker is None else 11 + 10 * worker)
    return f"http://{cfg.bind_host}:{port}"


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def cluster_env(cfg: Settings) -> dict[str, str]:
    import pyspark

    env = base_env(cfg)
    env.update({
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": cfg.bind_host,
        "SPARK_WORKER_DIR": str(cfg.home / "spark-work"),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": with_plugins(env.get("PYTHONPATH", "")),
    })
    return env


def alive_workers(cfg: Settings) -> list[str]:
    """The ``host:port`` of every worker the master lists ALIVE."""
    state = _json(f"{ui_url(cfg)}/json/")
    return [f"{w.get('host')}:{w.get('port')}" for w in state.get("workers", []) if w.get("state") == "ALIVE"]


def _registered(cfg: Settings, index: int) -> tuple[bool, str]:
    """A worker is healthy once the master lists it ALIVE (its own UI answering is not enough)."""
    want = f"{cfg.bind_host}:{cfg.spark_cluster_port + 10 + 10 * index}"
    try:
        alive = alive_workers(cfg)
    except (OSError, ValueError) as exc:
        return False, f"master UI: {exc}"
    return (want in alive), f"alive at the master: {alive or 'none'}"


def spark_services(cfg: Settings) -> list[Service]:
    """The master and ``spark_cluster_workers`` workers (none when it is 0)."""
    if cfg.spark_cluster_workers <= 0:
        return []
    env = cluster_env(cfg)
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port, host = cfg.spark_cluster_port, cfg.bind_host
    services = [Service(
        name=MASTER,
        argv=(spark_class, "org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port),
              "--webui-port", str(port + 1)),
        ports=(port, port + 1), health_url=f"{ui_url(cfg)}/json/", env=env, url=master_url(cfg))]
    for i in range(cfg.spark_cluster_workers):
        services.append(Service(
            name=worker_name(i),
            argv=(spark_class, "org.apache.spark.deploy.worker.Worker", "--host", host,
                  "--port", str(port + 10 + 10 * i), "--webui-port", str(port + 11 + 10 * i),
                  "--cores", "1", "--memory", "1g", master_url(cfg)),
            ports=(port + 10 + 10 * i, port + 11 + 10 * i), health_url=f"{ui_url(cfg, i)}/json/", env=env,
            depends_on=(MASTER,), health_check=functools.partial(_registered, cfg, i)))
    return services


def executors_of(cfg: Settings, app_id: str) -> list[int]:
    """How many executors of application ``app_id`` each worker ran or runs (its UI's ``/json/``)."""
    counts = []
    for i in range(cfg.spark_cluster_workers):
        state = _json(f"{ui_url(cfg, i)}/json/")
        executors = [*state.get("executors", []), *state.get("finishedexecutors", [])]
        counts.append(sum(1 for e in executors if e.get("appid") == app_id))
    return counts


def applications(cfg: Settings) -> list[dict[str, Any]]:
    """The master's running and completed applications (id, name, state)."""
    state = _json(f"{ui_url(cfg)}/json/")
    return [*state.get("activeapps", []), *state.get("completedapps", [])]
