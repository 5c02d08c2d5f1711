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


# Operator modules the DAG files import: Airflow's own processes have them loaded already,
# so they are imported before the clock starts and do not count against a file's budget.
OPERATOR_MODULES = (
    "airflow.sdk",
    "pendulum",
    "airflow.providers.standard.operators.trigger_dagrun",
    "airflow.providers.standard.sensors.date_time",
    "airflow.providers.apache.spark.operators.spark_submit",
    "airflow.providers.standard.decorators.python",  # what every @task needs
    "airflow.providers.amazon.aws.hooks.s3",  # Airflow's own s3:// Asset URI handler
)
# (boto3 is not listed: Airflow itself imports it to normalise an s3:// Asset URI.)
HEAVY_MODULES = ("pandas", "pyspark", "mlflow", "sklearn", "great_expectations", "onnxruntime")


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_each_dag_file_parses_in_under_a_second_without_heavy_imports(path: Path) -> None:
    """Parse each file in a fresh interpreter; measure the file's own top-level cost.

    Importing pandas, pyspark or mlflow at module level would blow the budget and is
    checked directly as well.
    """
    code = (
        "import sys, time, runpy\n"
        f"for m in {OPERATOR_MODULES!r}: __import__(m)\n"
        "t0 = time.perf_counter(); runpy.run_path(sys.argv[1]); elapsed = time.perf_counter() - t0\n"
        f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
        "print(elapsed, ','.join(heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(DAGS.parent / "plugins")}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    seconds, _, heavy = out.stdout.strip().splitlines()[-1].partition(" ")
    assert heavy == "", f"{path.name} imports {heavy} at parse time"
    assert float(seconds) < 1.0, f"{path.name} took {float(seconds):.2f} s to parse"


def test_smoke_dag_structure(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["modelops_smoke"]
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {"package_version": []}
