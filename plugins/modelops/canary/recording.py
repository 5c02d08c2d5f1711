"""How a release keeps its record current for the cockpit (called by the canary operator).

Every call is a courtesy: a failure to write the record is logged and the release goes on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from modelops.canary.status import CanaryStatus


def responder(answer: Any) -> tuple[str, float | None]:
    """Who answered the approval (the Required Actions user's name) and when, from its result."""
    if not isinstance(answer, Mapping):
        return "approve_full_rollout", None
    user = answer.get("responded_by_user") or {}
    by = str(user.get("name") or user.get("id") or "approve_full_rollout") if isinstance(user, Mapping) \
        else str(user)
    at = answer.get("responded_at")
    if isinstance(at, datetime):
        return by, at.timestamp()
    try:
        return by, datetime.fromisoformat(str(at)).timestamp()
    except (TypeError, ValueError):
        return by, None


def _release_ref(context: Any, wiring: Any, candidate: Mapping[str, Any]) -> Any:
    from modelops.canary.params import spec_from_params
    from modelops.canary.record import ReleaseRef

    # The runner's spec is the one the release runs (the model spec's overrides included).
    spec = wiring.runner.spec if wiring.runner is not None else spec_from_params(context["params"])
    r = wiring.runner.release if wiring.runner is not None else None
    return ReleaseRef(
        model=wiring.model, canary_version=wiring.canary_version,
        canary_sha256=r.canary.sha256 if r else "", mlflow_version=str(candidate.get("version", "")),
        started_by=str(candidate.get("started_by") or "modelops"), dag_id=context["dag"].dag_id,
        run_id=context["dag_run"].run_id, steps=spec.steps, gates=spec.gates,
        stable_version=r.stable.triton_version if r else 0, stable_sha256=r.stable.sha256 if r else "",
        stable_mlflow_version=r.stable.mlflow_version if r else "", mlflow_run_id=str(candidate.get("run_id", "")))


def record_release(context: Any, wiring: Any, candidate: Mapping[str, Any], status: CanaryStatus, *,
                   log: Any, window: Any = None, control: Any = None) -> None:
    """Keep the cockpit's release record current (a courtesy: a failure is logged, the release goes on)."""
    from modelops.canary.record_store import note

    try:
        note(wiring.store, _release_ref(context, wiring, candidate), status, window, control)
    except Exception as exc:
        log.warning("could not update the cockpit's release record: %s", exc)
        return
    if status.phase.terminal:
        from modelops.canary.description import refresh_quietly

        refresh_quietly(wiring.model, str(candidate.get("version", "")), log, store=wiring.store)


def record_first_release(context: Any, wiring: Any, candidate: Mapping[str, Any], ref: Any,
                         reason: str, log: Any) -> None:
    from dataclasses import replace

    from modelops.canary.record import first_release
    from modelops.canary.record_store import save

    try:
        release = replace(_release_ref(context, wiring, candidate), canary_sha256=ref.sha256)
        save(wiring.store, first_release(release, time.time(), reason))
    except Exception as exc:
        log.warning("could not update the cockpit's release record: %s", exc)
        return
    from modelops.canary.description import refresh_quietly

    refresh_quietly(wiring.model, str(candidate.get("version", "")), log, store=wiring.store)
