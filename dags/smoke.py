"""A trivial DAG: proves the stack schedules and runs tasks (used by the integration tests)."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


@dag(
    dag_id="modelops_smoke",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["modelops", "smoke"],
    doc_md="Returns the package version from a task: the scheduler, executor and workers are alive.",
)
def modelops_smoke() -> None:
    @task
    def package_version() -> str:
        import modelops

        return modelops.__version__

    package_version()


modelops_smoke()
