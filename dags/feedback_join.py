"""feedback_join: CTR and CVR per model version, joined by Spark from the gateway's logs.

Daily. The run for day D waits (deferred, no worker slot held) until D + 1 day + the
feedback window has passed, so late clicks count; then it locates D's prediction partitions
and the window's feedback partitions in the object store and submits the Spark job
(`modelops feedback`, through the Apache Spark provider to MODELOPS_SPARK_MASTER) with their
``s3://`` locations: the executors read them and the job writes ``metrics/ctr_cvr/dt=D/``
to the store. The last task logs CTR / CVR to MLflow against each model version and emits
an asset event. Catch-up and re-runs give the same numbers (the output is replaced). Tasks
exchange object-store locations only, so each may run on a different machine.

After the join, the outcome job (`modelops outcomes`) recomputes the last ``outcome_days`` days
(ending with D) from every label and action received so far: per model, version and day the rate of
each declared action and, for models whose spec declares a label, coverage, label delay and realized
performance (AUC, log loss, accuracy, Brier; RMSE, MAE). It writes ``metrics/outcomes/dt=Di/<model>.json``;
the last task pushes those to the Pushgateway and tags the labelled MLflow versions. It runs after
the join, not beside it: two Spark jobs at once would share the same few cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
from airflow.sdk import Asset, Param, dag, get_current_context, task

SUBMIT_APP = str(Path(__file__).resolve().parents[1] / "plugins" / "modelops" / "jobs" / "submit_main.py")
CTR_CVR = Asset("s3://modelops/metrics/ctr_cvr")
OUTCOMES = Asset("s3://modelops/metrics/outcomes")


@dag(
    dag_id="feedback_join",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    # Two: the daily scheduled run waits (deferred) for its day's feedback window to close, and a run
    # triggered meanwhile (a backfill, a rerun, the tests) must not queue behind it for a day.
    max_active_runs=2,
    params={
        "window_hours": Param(24, type="number", exclusiveMinimum=0,
                              description="Feedback counts up to this many hours after its prediction."),
        "day": Param("", type="string", description="YYYY-MM-DD to (re)compute; empty: the run's own day."),
        "outcome_days": Param(7, type="integer", minimum=1, maximum=60,
                              description="Days the outcome job recomputes, ending with the day (late labels)."),
    },
    tags=["modelops", "spark", "feedback"],
    doc_md=__doc__,
)
def feedback_join() -> None:
    # Retried: the schedule is live from the stack's start, when a loaded machine can lose a task
    # process before it runs (planning is pure, so a retry is safe).
    @task(retries=2)
    def plan_window() -> dict[str, str]:
        from modelops.jobs.schedule import run_day, wait_until

        context = get_current_context()
        day = run_day(context, str(context["params"]["day"]))
        until = wait_until(day, context["dag_run"].run_after, float(context["params"]["window_hours"]))
        return {"day": day, "wait_until": until.isoformat()}

    plan = plan_window()
    wait_for_late_feedback = DateTimeSensorAsync(
        task_id="wait_for_late_feedback",
        target_time="{{ ti.xcom_pull(task_ids='plan_window')['wait_until'] }}",
    )

    @task(retries=2)
    def locate_inputs(plan: dict[str, str]) -> list[str]:
        from modelops.config import settings
        from modelops.jobs.feedback_tasks import locate, submit_args

        context = get_current_context()
        window = float(context["params"]["window_hours"])
        located = locate(plan["day"], window)
        print(f"{located['prediction_files']} prediction and {located['event_files']} feedback objects; "
              f"output {located['out']}")
        return submit_args(located, window, settings().spark_master)

    args = locate_inputs(plan)
    spark_join = SparkSubmitOperator(
        task_id="spark_join",
        application=SUBMIT_APP,
        conn_id="modelops_spark",
        name="modelops-feedback-join",
        application_args=args,  # type: ignore[arg-type]
        retries=1,
    )

    @task(outlets=[CTR_CVR], retries=2)
    def publish_metrics(plan: dict[str, str]) -> dict[str, Any]:
        from modelops.jobs.feedback_tasks import publish

        return publish(plan["day"])

    @task(retries=2)
    def locate_outcomes(plan: dict[str, str]) -> list[str]:
        from modelops.config import settings
        from modelops.jobs.feedback_tasks import locate_outcomes, outcome_submit_args

        params = get_current_context()["params"]
        window, days = float(params["window_hours"]), int(params["outcome_days"])
        located = locate_outcomes(plan["day"], window, days)
        print(f"{located['prediction_files']} prediction and {located['event_files']} feedback objects over "
              f"{days} day(s); documents under {located['out']}")
        return outcome_submit_args(plan["day"], located, window, days, settings().spark_master)

    outcome_args = locate_outcomes(plan)
    spark_outcomes = SparkSubmitOperator(
        task_id="spark_outcomes",
        application=SUBMIT_APP,
        conn_id="modelops_spark",
        name="modelops-outcomes",
        application_args=outcome_args,  # type: ignore[arg-type]
        retries=1,
    )

    @task(outlets=[OUTCOMES], retries=2)
    def publish_outcomes(plan: dict[str, str]) -> dict[str, Any]:
        from modelops.jobs.feedback_tasks import publish_outcomes

        return publish_outcomes(plan["day"], int(get_current_context()["params"]["outcome_days"]))

    plan >> wait_for_late_feedback >> args
    args >> spark_join >> publish_metrics(plan)
    spark_join >> outcome_args >> spark_outcomes >> publish_outcomes(plan)


feedback_join()
