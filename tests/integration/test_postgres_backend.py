"""MLflow on the private PostgreSQL 15 cluster the stack initialises (MODELOPS_MLFLOW_BACKEND=postgresql)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from modelops import process
from modelops.config import load_settings, stack_port_env
from modelops.stack import launcher

pytestmark = pytest.mark.integration


@pytest.mark.skipif(not Path("/usr/lib/postgresql/15/bin/initdb").exists(),
                    reason="PostgreSQL 15 server binaries are not installed: `make system-deps` (part of "
                           "`make test`) installs Debian's postgresql-15")
def test_mlflow_runs_on_a_private_postgresql_cluster() -> None:
    from mlflow import MlflowClient

    base = int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000")) + 2000  # beside the shared test stack
    home = tempfile.mkdtemp(prefix="modelops-pg-")
    env = {**os.environ, "MODELOPS_HOME": home, "MODELOPS_MLFLOW_BACKEND": "postgresql", **stack_port_env(base)}
    cfg = load_settings(env)
    try:
        states = {s.name: s.state for s in launcher.up(cfg, progress=lambda line: None, only=["mlflow"])}
        assert states == {"objectstore": "healthy", "postgres": "healthy", "mlflow": "healthy"}
        assert (Path(home) / "postgres" / "data" / "PG_VERSION").read_text().strip() == "15"
        client = MlflowClient(cfg.mlflow_uri)
        client.create_registered_model("pg-backed")
        assert [m.name for m in client.search_registered_models()] == ["pg-backed"]
        # The registry lives in PostgreSQL: a restarted MLflow server still has it.
        launcher.down(cfg, progress=lambda line: None)
        launcher.up(cfg, progress=lambda line: None, only=["mlflow"])
        assert [m.name for m in MlflowClient(cfg.mlflow_uri).search_registered_models()] == ["pg-backed"]
    finally:
        launcher.down(cfg, progress=lambda line: None)
        assert not process.port_in_use(cfg.bind_host, cfg.postgres_port)
        shutil.rmtree(home, ignore_errors=True)
