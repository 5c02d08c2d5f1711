"""The release's approval step: the standard provider's ``ApprovalOperator``, asked only when the
canary waits for it, with an answer given to an earlier try carried over to a retry.

Why the carry-over. Airflow 3.3.2's scheduler can fail an approval that a person answers within a
second or two of its asking: the parked try's worker exits with "success", the answer re-queues the
task at once, and when the scheduler drains that stale "success" after the task is already *queued*
it fails the task as "state changed externally" (apache/airflow#67287; 3.3.2 only guards the
*scheduled* case). The approval step therefore has retries, and a retry first looks for the answer
the person already gave, so nobody is asked twice for one decision:

1. the task instance's own HITL detail (``.../hitlDetails``). In that race the scheduler fails the
   try without archiving it (no task-instance history row, the same task-instance id), so the
   answer is still on the detail when the retry starts. The retry must read it *before* it asks
   again: asking upserts the detail and Airflow then erases the response ("we keep only the latest
   response"). Seen in CI on 2026-12-01: try 2's read of ``tries/1`` got HTTP 404 and the answer
   was erased a moment later.
2. the archived earlier tries (``.../hitlDetails/tries/{n}``, newest first), for a try that Airflow
   did archive.

Without an answer (or without the API) the retry asks again, as the first try did. Only the answer
of a try that did not succeed is carried over: a person who clears an approval that went through
wants to be asked again.

Abort while the release waits. No canary window runs while the approval is open, so an abort
requested then (the cockpit, ``modelops release abort``, the control DAG) would never be applied.
``model_release_control`` therefore answers the open approval with Reject
(:func:`reject_open_approval`), and the rejection applies the pending abort request, so the release
ends *aborted* by whoever asked, with their reason. An abort requested before the approval asks is
applied by the approval task itself, without asking.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from modelops.canary.actions import AbortCommand
from modelops.canary.status import Phase

log = logging.getLogger(__name__)


def answer_event(detail: Mapping[str, Any]) -> dict[str, Any] | None:
    """The resume event of an answered HITL detail (as the REST API returns it), else None.

    The same shape as Airflow's own ``as_resume_event_payload``: ``responded_at`` a ``datetime``.
    A try that succeeded (and was then cleared) gives no event.
    """
    if not detail.get("response_received") or not detail.get("chosen_options"):
        return None
    if (detail.get("task_instance") or {}).get("state") == "success":
        return None
    at = detail.get("responded_at")
    responded_at = datetime.fromisoformat(at) if isinstance(at, str) else at
    if not isinstance(responded_at, datetime):
        return None
    return {
        "chosen_options": list(detail["chosen_options"]),
        "params_input": dict(detail.get("params_input") or {}),
        "responded_at": responded_at,
        "responded_by_user": detail.get("responded_by_user"),
        "timedout": False,
    }


def earlier_answer(fetch: Callable[[int | None], Mapping[str, Any]], try_number: int) -> dict[str, Any] | None:
    """The answer already given to this approval, as a resume event, else None; read by a retry only.

    ``fetch(None)`` returns the task instance's current HITL detail (still holding an answer the
    scheduler race left behind, until this try asks again); ``fetch(n)`` returns archived try ``n``'s.
    The current detail is read first, then tries ``try_number-1`` down to 1; a detail that cannot be
    read (never asked, not archived, or the API refused) is passed over.
    """
    if try_number <= 1:
        return None
    for number in (None, *range(try_number - 1, 0, -1)):
        try:
            event = answer_event(fetch(number))
        except Exception as exc:  # an unreadable detail is not an answer
            log.info("approval detail %s not readable: %s", "now" if number is None else f"of try {number}", exc)
            continue
        if event is not None:
            return event
    return None


APPROVAL_TASK = "approve_full_rollout"


def reject_open_approval(request: Callable[..., Any], dag_id: str, run_id: str, task_id: str = APPROVAL_TASK) -> str:
    """Answer the release's open approval with Reject (``request`` is ``AirflowClient.request``).

    Returns what happened, for the log: an approval that is not open (not asked yet, or already
    answered) is left alone; the approval task applies a pending abort when it asks.
    """
    path = hitl_path(dag_id, run_id, task_id)
    try:
        detail = request("GET", path)
    except Exception as exc:  # not asked yet: the approval task sees the abort request when it asks
        return f"no open approval ({exc}); the approval task applies the abort when it asks"
    if not detail or detail.get("response_received"):
        return "the approval was already answered"
    request("PATCH", path, json={"chosen_options": ["Reject"], "params_input": {}})
    return f"the open approval of {dag_id}/{run_id} answered Reject: the release aborts now"


def hitl_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int | None = None) -> str:
    """The REST path of a task instance's HITL detail; of its archived try ``try_number`` when given."""
    path = (f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
            f"{quote(task_id, safe='')}/{map_index}/hitlDetails")
    return path if try_number is None else f"{path}/tries/{try_number}"


class ReleaseApproval(ApprovalOperator):  # type: ignore[misc]
    """The standard provider's approval, asked only when the canary waits for it.

    Skipped (and the release goes on to ``canary_finish``) when the canary task ended
    without waiting; a rejection aborts the release (rolled back) and fails the task. A retry
    uses an earlier try's answer when there is one (see the module's docstring).
    """

    def __init__(self, *, canary_task_id: str = "canary_to_approval", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.canary_task_id = canary_task_id

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        state = ti.xcom_pull(task_ids=self.canary_task_id) or {}
        if state.get("phase") != Phase.WAITING_APPROVAL.value:
            raise AirflowSkipException(f"no approval needed (canary {state.get('phase', 'n/a')})")
        if ti.try_number > 1:
            event = self._earlier_answer(context)
            if event is not None:
                self.log.info("try %d: the approval was answered in an earlier try (%s by %s); not asking again",
                              ti.try_number, event["chosen_options"], event.get("responded_by_user"))
                return self.execute_complete(context, event)
        if self._abort_pending(context):
            self.log.info("an abort was requested while the release waited for approval: not asking")
            self._end_release(context, None, None)
        return super().execute(context)

    def _abort_pending(self, context: Any) -> bool:
        """Whether the release has a pending abort request (``canary/<model>/v<N>.control.json``)."""
        from modelops.canary.control import control_key, parse_control
        from modelops.errors import ContractError
        from modelops.objectstore import ObjectStore

        published = context["ti"].xcom_pull(task_ids="publish") or {}
        store = ObjectStore.from_settings()
        key = control_key(str(published["model"]), int(published["triton_version"]))
        if not store.exists(key):
            return False
        try:
            request, _, _ = parse_control(store.get_bytes(key))
        except ContractError:  # the release's next reader refuses and removes it
            return False
        return request.get("action") == "abort"

    def _earlier_answer(self, context: Any) -> dict[str, Any] | None:
        from modelops.airflow_client import client_from_settings

        ti = context["ti"]
        try:
            client = client_from_settings()
        except Exception as exc:  # no API credentials here: ask again
            self.log.warning("cannot read the earlier approval tries (%s); asking again", exc)
            return None
        return earlier_answer(
            lambda n: client.request("GET", hitl_path(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, n)),
            ti.try_number)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from modelops.canary.recording import responder

        # HITLOperator's part (validate, record the answer), not ApprovalOperator's: on Reject that one
        # skips the downstream tasks (the SDK's skip raises), so canary_finish would never run and the
        # canary would stay at its weight. A rejection ends the release here instead.
        result = HITLOperator.execute_complete(self, context=context, event=event)
        approved = result["chosen_options"][0] == self.APPROVE
        self.hitl_summary_extra["approved"] = approved
        if approved:
            self.log.info("Approved. Proceeding with downstream tasks...")
            return result
        self._end_release(context, *responder(result))
        raise AirflowFailException("release rejected at approval")

    def _end_release(self, context: Any, by: str | None, at: float | None) -> None:
        """Abort the release: by a pending abort request (its requester and reason), else as rejected by
        ``by``. Raises when the release ended; returns (``by`` None) when no abort was applied."""
        from modelops.canary.operator import apply_control, finish, wire
        from modelops.canary.params import spec_from_params
        from modelops.canary.record import Control
        from modelops.canary.recording import record_release

        candidate = context["ti"].xcom_pull(task_ids="resolve_candidate")
        published = context["ti"].xcom_pull(task_ids="publish")
        wiring = wire(candidate, published, spec_from_params(context["params"]))
        if wiring.runner is None:
            return
        status = wiring.runner.resume()
        status, control = apply_control(wiring, status, self.log)  # an abort requested meanwhile comes first
        if not status.phase.terminal:
            if by is None:
                return
            status = wiring.runner.handle(AbortCommand(by, "rejected at approval"))
            control = Control("reject", by, at or time.time(), time.time())
        record_release(context, wiring, candidate, status, log=self.log, control=control)
        finish(context, status, self.log)
