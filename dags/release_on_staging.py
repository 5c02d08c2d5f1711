"""release_on_staging: a version moved to Staging in the MLflow UI starts one model_release run.

Every minute, finds Staging versions that no release has claimed, claims each (an MLflow
tag with a deterministic claim id), and triggers ``model_release`` once per version.
Versions whose release was started from the Airflow UI are claimed by that run first and
are never released twice.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task


@dag(
    dag_id="release_on_staging",
    schedule=timedelta(minutes=1),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["modelops", "release"],
    doc_md=__doc__,
)
def release_on_staging() -> None:
    # A short retry delay: the watcher runs every minute from the stack's start, when a loaded
    # machine can lose a task process before it runs; the next try should not wait five minutes.
    @task(retries=2, retry_delay=timedelta(seconds=10))
    def new_staging_versions() -> list[dict[str, str]]:
        from modelops.release.steps import staging_versions_to_release

        return staging_versions_to_release()

    TriggerDagRunOperator.partial(task_id="start_release", trigger_dag_id="model_release").expand(
        conf=new_staging_versions()
    )


release_on_staging()
