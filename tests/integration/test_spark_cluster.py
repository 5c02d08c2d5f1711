"""The embedded stack's Spark standalone cluster (``MODELOPS_SPARK_CLUSTER_WORKERS``) runs the drift job.

The session stack gains a master and two workers (``modelops.stack.spark_cluster``, pyspark's own
``spark-class``); the drift job is submitted as the nightly_drift DAG submits it (``spark-submit``
of ``jobs/submit_main.py``, ``s3://`` inputs and output) once to the cluster and once to
``local[2]``: the cluster's executors ran on both workers and both reports hold the same numbers.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from modelops import process
from modelops.config import Settings
from modelops.features import load_features
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES
from modelops.objectstore import ObjectStore
from modelops.stack import launcher
from modelops.stack import spark_cluster as cluster
from modelops.stack.services import VENV_BIN, base_env, with_plugins
from tests.spark.test_drift_job import DRIFTED, ROWS, _side, _write

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SUBMIT_APP = Path(__file__).resolve().parents[2] / "plugins" / "modelops" / "jobs" / "submit_main.py"


@pytest.fixture(scope="module")
def cluster_settings(stack_settings: Settings) -> Iterator[Settings]:
    """The session stack's settings with a 2-worker cluster, started for this module and stopped after it."""
    cfg = dataclasses.replace(stack_settings, spark_cluster_workers=2)
    services = cluster.spark_services(cfg)
    assert [s.name for s in services] == ["spark-master", "spark-worker-0", "spark-worker-1"]
    try:
        launcher.up(cfg, progress=lambda line: print(line, flush=True), only=[s.name for s in services])
        yield cfg
    finally:
        for service in reversed(services):
            process.stop(service.pid_file(cfg.home))


@pytest.fixture(scope="module")
def inputs(stack_settings: Settings, object_store: ObjectStore, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, str]]:
    names = [f.name for f in load_features(RECOMMENDER_FEATURES)]
    tmp = tmp_path_factory.mktemp("cluster-drift")
    for i, (side, drift) in enumerate((("baseline", False), ("current", True))):
        _write(tmp / side, names, _side(names, ROWS[side], i + 1, drift=drift), i)
    prefix = f"tests/spark-cluster/{uuid.uuid4().hex[:8]}"
    sink = io.BytesIO()
    pq.write_table(ds.dataset(tmp / "baseline" / "scored", format="parquet").to_table(), sink)
    object_store.put_bytes(f"{prefix}/baseline/samples.parquet", sink.getvalue())
    for path in sorted(p for p in (tmp / "current" / "scored").rglob("*") if p.is_file()):
        object_store.put_bytes(f"{prefix}/current/{path.relative_to(tmp / 'current' / 'scored').as_posix()}",
                               path.read_bytes())
    yield {"prefix": prefix, "baseline": object_store.uri(f"{prefix}/baseline/samples.parquet"),
           "current": object_store.uri(f"{prefix}/current")}
    for key in list(object_store.list_keys(prefix + "/")):
        object_store.delete(key)


def _submit(cfg: Settings, master: str, inputs: dict[str, str], out: str) -> None:
    """spark-submit the drift job as the nightly_drift DAG does (its driver in a process of its own)."""
    env = base_env(cfg)
    env.update({"PYTHONPATH": with_plugins(env.get("PYTHONPATH", "")), "SPARK_LOCAL_IP": cfg.bind_host,
                "PYSPARK_PYTHON": str(VENV_BIN / "python")})
    argv = [str(VENV_BIN / "spark-submit"), "--master", master, "--name", f"drift-{uuid.uuid4().hex[:6]}",
            str(SUBMIT_APP), "drift", "--baseline", inputs["baseline"], "--current", inputs["current"],
            "--features", str(RECOMMENDER_FEATURES), "--out", out, "--master", master]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"spark-submit --master {master}: rc {done.returncode}\n{done.stderr[-3000:]}"


def _numbers(document: dict[str, Any]) -> dict[str, Any]:
    return {"rows": document["rows"], "drifted": document["drifted"], "top_causes": document["top_causes"],
            "score": document["score"]["ks"], "features": {f["name"]: f["ks"] for f in document["features"]}}


def test_the_drift_job_runs_on_both_workers_and_equals_local(
    cluster_settings: Settings, inputs: dict[str, str], object_store: ObjectStore,
) -> None:
    cfg, prefix = cluster_settings, inputs["prefix"]
    assert len(cluster.alive_workers(cfg)) == 2
    before = {app["id"] for app in cluster.applications(cfg)}
    _submit(cfg, cluster.master_url(cfg), inputs, object_store.uri(f"{prefix}/on-cluster"))
    (app,) = [a for a in cluster.applications(cfg) if a["id"] not in before]
    per_worker = cluster.executors_of(cfg, app["id"])
    assert all(count >= 1 for count in per_worker), f"executors per worker of {app['id']}: {per_worker}"
    _submit(cfg, "local[2]", inputs, object_store.uri(f"{prefix}/on-local"))
    on_cluster = json.loads(object_store.get_bytes(f"{prefix}/on-cluster/drift.json"))
    on_local = json.loads(object_store.get_bytes(f"{prefix}/on-local/drift.json"))
    assert on_cluster["drifted"] is True and sorted(on_cluster["top_causes"]) == sorted(DRIFTED)
    assert _numbers(on_cluster) == _numbers(on_local)  # the exact KS: the same numbers on either engine
