"""release_on_staging: a version moved to Staging, or given the alias challenger, starts one model_release run.

Every minute, finds Staging versions and ``challenger`` holders that no release has claimed,
claims each (an MLflow tag with a deterministic claim id), and triggers ``model_release``
once per version. Setting ``challenger`` usually starts the release within seconds through
MLflow's webhook (the receiver on the API server, ``/modelops-webhooks/mlflow``); this poll is
the fallback for a missed delivery or webhooks switched off (``MODELOPS_RELEASE_WEBHOOKS=off``).
An alias release's run id is its claim id, so the webhook and the poll never start two runs.
Versions whose release was started from the Airflow UI are claimed by that run first and are
never released twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, get_current_context, task


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
    def versions_to_release() -> list[dict[str, Any]]:
        from modelops.release.autostart import RELEASE_DAG, versions_to_release

        ti: Any = get_current_context()["ti"]
        return versions_to_release(lambda run_id: ti.get_dr_count(dag_id=RELEASE_DAG, run_ids=[run_id]) > 0)

    TriggerDagRunOperator.partial(
        task_id="start_release", trigger_dag_id="model_release", skip_when_already_exists=True
    ).expand_kwargs(versions_to_release())


release_on_staging()
