"""nightly_drift: KS drift of every Production version's features and score, with root causes.

Daily, for the day that just ended: locate the day's scored samples in the object store,
validate them against the feature contract (the GX feature suite, on Spark) — that result
goes into every report — then for each model version in Production compare the day's
samples with the version's launch-day baseline (captured automatically on the first full
day after promotion and recorded on the MLflow version) with the Spark job
(`modelops drift` through the Apache Spark provider), whose executors read both from the
store. The job writes the report to ``reports/drift/<model>/v<K>/dt=D/``; the last task
attaches it to the version's MLflow run and notifies drift through apprise with the top
causes and where the report is. Tasks exchange object-store locations only. The run's
intermediate copies (``jobs/drift/dt=D/``: each version's current samples, the contract
section) stay a week for reruns; ``prune_old_work`` deletes older days, whatever the run did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param, dag, get_current_context, task

SUBMIT_APP = str(Path(__file__).resolve().parents[1] / "plugins" / "modelops" / "jobs" / "submit_main.py")
DRIFT_REPORTS = Asset("s3://modelops/reports/drift")


@dag(
    dag_id="nightly_drift",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["modelops", "spark", "drift"],
    params={"day": Param("", type="string", description="YYYY-MM-DD to (re)compute; empty: the run's own day.")},
    doc_md=__doc__,
)
def nightly_drift() -> None:
    @task(retries=2)
    def locate_samples() -> dict[str, Any]:
        from modelops.jobs.drift_tasks import locate_day
        from modelops.jobs.schedule import run_day

        context = get_current_context()
        return locate_day(run_day(context, str(context["params"]["day"])))

    @task(retries=1)
    def validate_feature_contract(staged: dict[str, Any]) -> dict[str, Any]:
        from modelops.jobs.drift_tasks import validate_contract

        return validate_contract(staged["day"], int(staged["files"]))

    @task(retries=2)
    def prepare_versions(staged: dict[str, Any], contract: dict[str, Any]) -> list[dict[str, Any]]:
        from modelops.jobs.drift_tasks import prepare_version, production_versions

        day = staged["day"]
        prepared = [p for v in production_versions() if (p := prepare_version(day, v)) is not None]
        print(f"{len(prepared)} version(s) to compare on {day}")
        return prepared

    @task
    def spark_arguments(staged: dict[str, Any], prepared: list[dict[str, Any]]) -> list[list[str]]:
        from modelops.config import settings
        from modelops.jobs.drift_tasks import submit_args

        return [submit_args(p, staged["day"], settings().spark_master) for p in prepared]

    @task(outlets=[DRIFT_REPORTS], retries=2)
    def publish_reports(staged: dict[str, Any], prepared: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from modelops.jobs.drift_tasks import publish

        return [publish(staged["day"], p) for p in prepared]

    @task(trigger_rule="all_done")
    def prune_old_work(staged: dict[str, Any]) -> int:
        """The intermediate copies (``jobs/drift/dt=…``) older than a week: deleted, whatever this run did."""
        from modelops.jobs.drift_tasks import prune_work

        return prune_work(staged["day"])

    staged = locate_samples()
    prepared = prepare_versions(staged, validate_feature_contract(staged))
    spark_drift = SparkSubmitOperator.partial(
        task_id="spark_drift",
        application=SUBMIT_APP,
        conn_id="modelops_spark",
        name="modelops-nightly-drift",
        retries=1,
    ).expand(application_args=spark_arguments(staged, prepared))
    spark_drift >> publish_reports(staged, prepared) >> prune_old_work(staged)


nightly_drift()
