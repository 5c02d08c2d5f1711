"""A release's notes in the Airflow UI: the DAG run's and the canary task's (through the REST API).

A courtesy for the people following a release: the task SDK has no call for a note, so the canary
operator sets them through Airflow's REST API; a failure is logged, never raised.
"""

from __future__ import annotations

from typing import Any

from modelops.canary.status import CanaryStatus, Phase

NOTE_LIMIT = 1000  # Airflow's DagRun.note max length


def set_run_note(dag_id: str, run_id: str, note: str) -> None:
    """Set a DAG run's note through the REST API (the task SDK has no call for it)."""
    from modelops.airflow_client import client_from_settings

    client_from_settings().request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}",
                                   json={"note": note[:NOTE_LIMIT]})


def set_task_note(dag_id: str, run_id: str, task_id: str, note: str) -> None:
    """Set a task instance's note through the REST API (shown beside the deferred task in the UI)."""
    from modelops.airflow_client import client_from_settings

    client_from_settings().request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
                                   params={"update_mask": "note"}, json={"note": note[:NOTE_LIMIT]})


def note_progress(context: Any, status: CanaryStatus, log: Any) -> None:
    """A phase change of a running release on the run's and the canary task's notes (a pause names its
    reason and what ends it; a resumption replaces that). A courtesy: a failure is logged."""
    from modelops.canary.report import progress_note

    note = progress_note(status)
    if status.phase is Phase.PAUSED:
        log.warning("%s", note)
    dag_id, run_id = context["dag"].dag_id, context["dag_run"].run_id
    try:
        set_run_note(dag_id, run_id, note)
        set_task_note(dag_id, run_id, context["ti"].task_id, note)
    except Exception as exc:
        log.warning("could not set the run's or the task's note: %s", exc)
