"""Following a ``model_release`` run from a test: its end, or a failure that explains itself.

A run still going at the timeout, or a release that pauses and waits for a person, fails the
test at once with the run's task states and the release's status (phase, reason, timeline and
last analysis), so a failure on CI names its cause without the stack's logs.
"""

from __future__ import annotations

import pytest

from modelops.airflow_client import AirflowClient, AirflowError


def task_states(airflow: AirflowClient, run_id: str) -> dict[str, str | None]:
    return {t["task_id"]: t["state"] for t in airflow.task_instances("model_release", run_id)}


def explain(airflow: AirflowClient, model: str, run_id: str) -> str:
    """The run's task states and its release's status (phase, reason, timeline, last analysis)."""
    from modelops.canary.report import summary
    from modelops.release.follow import canary_status, canary_version

    try:
        status = canary_status(model, canary_version(airflow, run_id))
    except Exception as exc:  # evidence for a failure message, never a failure of its own
        return f"task states {task_states(airflow, run_id)}\nno release status ({type(exc).__name__}: {exc})"
    if status is None:
        return (f"task states {task_states(airflow, run_id)}\nno release status\n"
                f"{airflow.failed_tasks_logs('model_release', run_id)}")
    last = "" if status.last_analysis is None else f"\nlast analysis: {status.last_analysis.summary()}"
    return f"task states {task_states(airflow, run_id)}\n{summary(status)}{last}"


def ended(airflow: AirflowClient, model: str, run_id: str, timeout_s: float) -> str:
    """The run's final state; a release that waits for a person, or a run still going, fails with the evidence."""
    from modelops.release.follow import PAUSED, wait_release

    try:
        state = wait_release(airflow, model, run_id, timeout_s=timeout_s)
    except AirflowError as exc:
        pytest.fail(f"{exc}: {explain(airflow, model, run_id)}")
    if state == PAUSED:
        pytest.fail(f"release run {run_id} paused and waits for a person: {explain(airflow, model, run_id)}")
    return state
