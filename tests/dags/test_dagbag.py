"""DagBag: every DAG file imports without errors and parses fast (no heavy top-level imports)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS.glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def dagbag():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert "modelops_smoke" in dagbag.dag_ids


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_each_dag_file_parses_in_under_a_second(path: Path) -> None:
    """Parse each file in a fresh interpreter that has Airflow's SDK already imported.

    What is measured is the file's own top-level cost: importing pandas, pyspark or mlflow
    at module level would blow the budget.
    """
    code = (
        "import time, runpy, airflow.sdk, pendulum\n"
        f"t0 = time.perf_counter(); runpy.run_path({str(path)!r}); print(time.perf_counter() - t0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(DAGS.parent / "plugins")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         timeout=120)
    seconds = float(out.stdout.strip().splitlines()[-1])
    assert seconds < 1.0, f"{path.name} took {seconds:.2f} s to parse"


def test_smoke_dag_structure(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["modelops_smoke"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {"package_version": []}
