"""Following a ``model_release`` run until it ends, or until its release waits for a person.

A paused release keeps its run *running* (the canary task defers window after window), so
a caller that waits only for the run state waits out its whole timeout. :func:`wait_release`
also reads the canary's checkpoint at every poll: a pause that waits for a person (thin
traffic, a person's pause, an incident beyond the automatic resumptions) ends the wait at
once with :data:`PAUSED`; an incident the release resumes from by itself is reported and
followed on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from modelops.canary.machine import waits_for_person
from modelops.canary.status import CanaryStatus, Phase

PAUSED = "paused"
"""What :func:`wait_release` returns for a release that waits for a person (its run is still running)."""

DAG_ID = "model_release"


def canary_version(client: Any, run_id: str) -> int | None:
    """The Triton version the run published (its ``publish`` XCom), None before the publish ended."""
    from modelops.airflow_client import AirflowError

    try:
        return int(client.xcom(DAG_ID, run_id, "publish")["triton_version"])
    except (AirflowError, KeyError, TypeError, ValueError):
        return None


def canary_status(model: str, version: int | None, store: Any = None) -> CanaryStatus | None:
    """The release's checkpointed status (``canary/<model>/v<N>.json``), None when there is none yet."""
    from modelops.canary.adapters import checkpoint_key
    from modelops.objectstore import ObjectStore

    if version is None:
        return None
    store = store or ObjectStore.from_settings()
    key = checkpoint_key(model, version)
    if not store.exists(key):
        return None
    return CanaryStatus.from_dict(json.loads(store.get_bytes(key))["status"])


def wait_release(client: Any, model: str, run_id: str, *, timeout_s: float, poll_s: float = 2.0,
                 on_change: Callable[[str], None] | None = None,
                 on_pause: Callable[[str], None] | None = None) -> str:
    """Poll until the run ends (its final state) or its release waits for a person (:data:`PAUSED`).

    ``on_change`` gets each new run state; ``on_pause`` the pause note each time the release
    pauses (also for an incident it resumes from by itself, which is followed on).

    Raises:
        AirflowError: still running, not paused, after ``timeout_s``.
    """
    from modelops.airflow_client import TERMINAL_STATES, AirflowError
    from modelops.canary.report import pause_note

    deadline = time.monotonic() + timeout_s
    last, version, noted = "", None, ""
    while time.monotonic() < deadline:
        run = client.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        state = str(run["state"])
        if state != last and on_change:
            on_change(state)
        last = state
        if state in TERMINAL_STATES:
            return state
        version = version if version is not None else canary_version(client, run_id)
        status = canary_status(model, version)
        if status is not None and status.phase is Phase.PAUSED and of_this_run(status, run):
            note = pause_note(status)
            if note != noted and on_pause:
                on_pause(note)
            noted = note
            if waits_for_person(status):
                return PAUSED
        time.sleep(poll_s)
    raise AirflowError(f"run {DAG_ID}/{run_id} still {last!r} after {timeout_s:.0f} s")


def of_this_run(status: CanaryStatus, run: dict[str, Any]) -> bool:
    """The checkpoint is this run's release, not an earlier release of the same version."""
    from datetime import datetime

    started = run.get("start_date")
    if not started:
        return True
    return status.started_at >= datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp() - 1.0
