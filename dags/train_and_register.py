"""train_and_register: (re)train the reference model, or take any MLflow run, and register a version.

Trigger it from the Airflow UI: leave ``run_uri`` empty to train the reference recommender,
or give ``runs:/<run_id>/<path>`` of a model trained elsewhere (it must have logged the
platform's ``onnx/`` and ``eval/features.parquet`` artifacts). The registered version gets
the lineage tags; releasing it is ``model_release``'s job.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from modelops.names import MODEL_NAME_PATTERN

PARAMS = {
    "model_name": Param("recommender", type="string", pattern=MODEL_NAME_PATTERN,
                        description=f"Registered model name in MLflow ({MODEL_NAME_PATTERN})."),
    "run_uri": Param("", type="string", description="runs:/<run_id>/<path> to register instead of training."),
    "seed": Param(7, type="integer", description="Seed of the synthetic world (reference model only)."),
    "hidden": Param("32", type="string", description="MLP hidden layer sizes, comma separated; empty = logreg."),
    "max_iter": Param(60, type="integer", minimum=1, description="Training epochs at most."),
    "variant": Param("good", type="string", enum=["good", "faulty-errors", "collapsed", "slow"],
                     description="A faulty variant for canary tests, or good."),
    "error_rate": Param(0.05, type="number", minimum=0, maximum=1,
                        description="faulty-errors: the share of requests that raise."),
}


@dag(
    dag_id="train_and_register",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=2,
    params=PARAMS,
    tags=["modelops", "registry"],
    doc_md=__doc__,
)
def train_and_register() -> None:
    @task(retries=1)
    def train_or_take_run() -> str:
        from modelops.release.registration import train_reference

        params: dict[str, Any] = get_current_context()["params"]
        return str(params["run_uri"]).strip() or train_reference(params)

    @task(retries=2)
    def register(run_uri: str) -> dict[str, str]:
        from modelops.airflow_tasks import gate
        from modelops.release.registration import register as register_run

        context = get_current_context()
        return gate(register_run)(run_uri, str(context["params"]["model_name"]),
                            registered_by=f"airflow:{context['dag_run'].run_id}")

    register(train_or_take_run())


train_and_register()
