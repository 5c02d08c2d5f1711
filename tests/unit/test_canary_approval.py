"""An approval answered in an earlier try is carried over to a retry (the scheduler race of
apache/airflow#67287), and only a real answer counts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from modelops.canary.approval import answer_event, earlier_answer, hitl_path, reject_open_approval

ANSWERED = {"task_instance": {"state": "failed"}, "response_received": True, "chosen_options": ["Approve"],
            "params_input": {}, "responded_at": "2026-12-01T09:29:03.900000Z",
            "responded_by_user": {"id": "admin", "name": "admin"}}


def test_an_answered_detail_becomes_the_resume_event() -> None:
    event = answer_event(ANSWERED)
    assert event is not None
    assert event["chosen_options"] == ["Approve"]
    assert event["responded_at"] == datetime(2026, 12, 1, 9, 29, 3, 900000, tzinfo=UTC)
    assert event["responded_by_user"] == {"id": "admin", "name": "admin"}
    assert event["params_input"] == {} and event["timedout"] is False


@pytest.mark.parametrize("detail", [
    {**ANSWERED, "response_received": False},
    {**ANSWERED, "chosen_options": None},
    {**ANSWERED, "chosen_options": []},
    {**ANSWERED, "responded_at": None},
    {**ANSWERED, "task_instance": {"state": "success"}},  # cleared after it went through: ask again
    {"response_received": False, "chosen_options": None, "responded_at": None},
])
def test_an_unanswered_or_incomplete_detail_is_no_answer(detail: dict[str, Any]) -> None:
    assert answer_event(detail) is None


def test_the_newest_answered_earlier_try_wins_and_unreadable_tries_are_passed_over() -> None:
    asked: list[int | None] = []
    details = {None: {**ANSWERED, "response_received": False}, 1: {**ANSWERED, "chosen_options": ["Reject"]},
               2: {**ANSWERED, "response_received": False}}

    def fetch(number: int | None) -> dict[str, Any]:
        asked.append(number)
        if number == 3:
            raise RuntimeError("HTTP 404")
        return details[number]

    event = earlier_answer(fetch, try_number=4)
    assert event is not None and event["chosen_options"] == ["Reject"]
    assert asked == [None, 3, 2, 1]  # the current detail, then newest first; the current try (4) never


def test_the_answer_left_on_the_task_instance_by_the_race_is_read_first() -> None:
    # apache/airflow#67287 as CI met it: the failed try was not archived (tries/1 answers 404) and the
    # answer is still on the task instance's detail until the retry asks again.
    asked: list[int | None] = []

    def fetch(number: int | None) -> dict[str, Any]:
        asked.append(number)
        if number is None:
            return {**ANSWERED, "task_instance": {"state": "running", "try_number": 2}}
        raise RuntimeError("HTTP 404 The Task Instance ... was not found")

    event = earlier_answer(fetch, try_number=2)
    assert event is not None and event["chosen_options"] == ["Approve"]
    assert asked == [None]


def test_a_first_try_reads_nothing_and_no_answer_means_ask_again() -> None:
    def never(number: int | None) -> dict[str, Any]:
        raise AssertionError(f"try {number} read")

    assert earlier_answer(never, try_number=1) is None
    assert earlier_answer(lambda n: {**ANSWERED, "response_received": False}, try_number=3) is None


def test_the_paths_quote_the_run_id() -> None:
    run = "manual__2026-12-01T09:43:57+00:00"
    base = ("/api/v2/dags/model_release/dagRuns/manual__2026-12-01T09%3A43%3A57%2B00%3A00/taskInstances/"
            "approve_full_rollout/-1/hitlDetails")
    assert hitl_path("model_release", run, "approve_full_rollout") == base
    assert hitl_path("model_release", run, "approve_full_rollout", -1, 2) == base + "/tries/2"


class _Api:
    """Records the calls; answers GET with ``detail`` (an exception is raised)."""

    def __init__(self, detail: Any) -> None:
        self.detail = detail
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        self.calls.append((method, path, kwargs.get("json")))
        if method == "GET" and isinstance(self.detail, Exception):
            raise self.detail
        return self.detail if method == "GET" else None


def test_an_abort_answers_the_open_approval_with_reject() -> None:
    api = _Api({"response_received": False, "options": ["Approve", "Reject"]})
    said = reject_open_approval(api, "model_release", "r1")
    path = hitl_path("model_release", "r1", "approve_full_rollout")
    assert api.calls == [("GET", path, None), ("PATCH", path, {"chosen_options": ["Reject"], "params_input": {}})]
    assert "answered Reject" in said


@pytest.mark.parametrize("detail", [{**ANSWERED}, RuntimeError("HTTP 404 not found"), None])
def test_an_approval_not_open_is_left_alone(detail: Any) -> None:
    api = _Api(detail)
    said = reject_open_approval(api, "model_release", "r1")
    assert [c[0] for c in api.calls] == ["GET"]  # never answered
    assert "already answered" in said or "applies the abort when it asks" in said
