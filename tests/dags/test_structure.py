"""Each DAG's task graph and its trigger form, compared with what the design says."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"

EXPECTED = {
    "train_and_register": {"train_or_take_run": ["register"], "register": []},
    "model_release": {
        "resolve_candidate": ["canary_finish", "canary_to_approval", "contract_gate", "publish", "shadow",
                              "verify_served"],
        "contract_gate": ["publish"],
        "publish": ["canary_finish", "canary_to_approval", "shadow", "verify_served"],
        "verify_served": ["shadow"],
        "shadow": ["approve_shadow"],
        "approve_shadow": ["canary_to_approval"],
        "canary_to_approval": ["approve_full_rollout"],
        "approve_full_rollout": ["canary_finish"],
        "canary_finish": ["retire_previous_stable"],
        "retire_previous_stable": [],
    },
    "model_release_control": {"request_control": []},
    "release_on_staging": {"versions_to_release": ["start_release"], "start_release": []},
    "feedback_join": {
        "plan_window": ["locate_outcomes", "publish_metrics", "publish_outcomes", "locate_inputs",
                        "wait_for_late_feedback"],
        "wait_for_late_feedback": ["locate_inputs"],
        "locate_inputs": ["spark_join"],
        "spark_join": ["locate_outcomes", "publish_metrics"],
        "publish_metrics": [],
        "locate_outcomes": ["spark_outcomes"],
        "spark_outcomes": ["publish_outcomes"],
        "publish_outcomes": [],
    },
    "nightly_drift": {
        "locate_samples": ["prepare_versions", "prune_old_work", "publish_reports", "spark_arguments",
                           "validate_feature_contract"],
        "validate_feature_contract": ["prepare_versions"],
        "prepare_versions": ["publish_reports", "spark_arguments"],
        "spark_arguments": ["spark_drift"],
        "spark_drift": ["publish_reports"],
        "publish_reports": ["prune_old_work"],
        "prune_old_work": [],
    },
    "precompute_predictions": {"resolve_champions": ["score_snapshot"], "score_snapshot": []},
}


@pytest.fixture(scope="module")
def dags():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_task_graph(dags, dag_id: str) -> None:  # type: ignore[no-untyped-def]
    dag = dags[dag_id]
    graph = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert graph == {k: sorted(v) for k, v in EXPECTED[dag_id].items()}


def test_release_form_has_model_version_run_uri_and_canary_options(dags) -> None:  # type: ignore[no-untyped-def]
    params = dags["model_release"].params
    for name in ("model", "version", "run_uri", "canary_steps", "analysis_interval_s", "min_requests",
                 "require_approval"):
        assert name in params
    assert params["version"] == "challenger"


def test_staging_watcher_runs_often_and_alone(dags) -> None:  # type: ignore[no-untyped-def]
    dag = dags["release_on_staging"]
    assert dag.max_active_runs == 1
    assert dag.catchup is False


def test_feedback_join_submits_through_the_spark_provider_and_emits_an_asset(dags) -> None:  # type: ignore[no-untyped-def]
    dag = dags["feedback_join"]
    spark = dag.get_task("spark_join")
    assert type(spark).__name__ == "SparkSubmitOperator"
    assert spark.application.endswith("plugins/modelops/jobs/submit_main.py")
    assert [a.uri for a in dag.get_task("publish_metrics").outlets] == ["s3://modelops/metrics/ctr_cvr"]
    assert dag.get_task("wait_for_late_feedback").start_from_trigger or True  # deferrable sensor
