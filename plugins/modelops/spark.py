"""Spark session for the batch jobs: any master URL from config, loopback defaults locally."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from modelops.config import Settings, settings
from modelops.secretfiles import configured_secret

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(app_name: str, master: str | None = None, *, shuffle_partitions: int = 8) -> SparkSession:
    """A Spark session on ``master`` (``MODELOPS_SPARK_MASTER`` when omitted).

    Python workers use this interpreter (so they import the same pandas/numpy/pyarrow),
    the UI is off and everything binds to loopback for ``local[...]`` masters.
    """
    from pyspark.sql import SparkSession

    master = master or settings().spark_master
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", settings().spark_driver_memory)
    )
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in cluster_conf(master).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def cluster_conf(master: str, cfg: Settings | None = None) -> dict[str, str]:
    """The driver's settings for a standalone cluster (``spark://host:port``; nothing for other masters).

    - the driver listens on, and advertises, its address on the route to the master: a container on
      several networks (an Airflow worker of the compose topology) is reachable from the executors only
      on the network it shares with the cluster;
    - with a configured secret (MODELOPS_SPARK_AUTH_SECRET or its file) RPC authentication is on
      (``spark.authenticate``): the master, its workers and every executor refuse a driver without it.
      The secret goes into the session's conf here, never onto a command line.
    """
    if not master.startswith("spark://"):
        return {}
    from modelops.discovery import address_toward

    cfg = cfg or settings()
    conf: dict[str, str] = {}
    if not os.environ.get("SPARK_LOCAL_IP"):
        hostport = master[len("spark://"):].split(",")[0]
        host, _, port = hostport.rpartition(":")
        address = address_toward(host, int(port or 7077))
        conf |= {"spark.driver.host": address, "spark.driver.bindAddress": address}
    secret = configured_secret(cfg.spark_auth_secret, cfg.spark_auth_secret_file)
    if secret:
        conf |= {"spark.authenticate": "true", "spark.authenticate.secret": secret}
    return conf


@contextlib.contextmanager
def session_conf(spark: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL options for the block and restore the previous values afterwards."""
    previous = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
