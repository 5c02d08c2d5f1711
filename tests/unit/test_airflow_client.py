"""AirflowClient's retries, against a local HTTP server that answers like Airflow's API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from modelops.airflow_client import AirflowClient, AirflowError

DATABASE_ERROR = {"detail": {"reason": "Database error", "statement": "hidden", "orig_error": "hidden",
                             "message": "Serious error when handling your request."}}


class FakeAirflow(BaseHTTPRequestHandler):
    script: ClassVar[dict[str, list[int]]] = {}  # method -> the statuses still to give before 200s
    calls: ClassVar[list[str]] = []

    def log_message(self, *_args: object) -> None:
        pass

    def _answer(self, status: int, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _any(self) -> None:
        if self.path == "/auth/token":
            self._answer(201, {"access_token": "t"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.calls.append(self.command)
        status = self.script[self.command].pop(0) if self.script.get(self.command) else 200
        if status == 500:
            self._answer(500, DATABASE_ERROR)
        elif status == 409:
            self._answer(409, {"detail": f"DAG run with id {body.get('dag_run_id')} already exists"})
        else:
            self._answer(200, {"dag_id": "d", "is_paused": False, "dag_run_id": body.get("dag_run_id")})

    do_GET = do_POST = do_PATCH = _any


@pytest.fixture
def airflow() -> Iterator[AirflowClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAirflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeAirflow.script, FakeAirflow.calls = {}, []
    try:
        yield AirflowClient(f"http://127.0.0.1:{server.server_address[1]}", "admin", "pw", timeout_s=5, backoff_s=0.01)
    finally:
        server.shutdown()
        server.server_close()


def test_patch_is_retried_when_the_database_refused_the_transaction(airflow: AirflowClient) -> None:
    FakeAirflow.script = {"PATCH": [500]}
    assert airflow.request("PATCH", "/api/v2/dags/d", json={"is_paused": False})["is_paused"] is False
    assert FakeAirflow.calls == ["PATCH", "PATCH"]


def test_a_post_is_not_retried_and_a_lasting_database_error_is_reported(airflow: AirflowClient) -> None:
    FakeAirflow.script = {"POST": [500], "GET": [500] * 5}
    with pytest.raises(AirflowError, match=r"POST /api/v2/dags/d/dagRuns: HTTP 500 .*Database error"):
        airflow.request("POST", "/api/v2/dags/d/dagRuns", json={})
    with pytest.raises(AirflowError, match="GET /api/v2/dags/d: HTTP 500"):
        airflow.request("GET", "/api/v2/dags/d")
    assert FakeAirflow.calls == ["POST", "GET", "GET", "GET"]  # retries=3 for reads


def test_a_post_the_caller_calls_idempotent_is_retried(airflow: AirflowClient) -> None:
    FakeAirflow.script = {"POST": [500]}
    airflow.request("POST", "/api/v2/dags/d/clearTaskInstances", idempotent=True, json={"only_failed": True})
    assert FakeAirflow.calls == ["POST", "POST"]


def test_a_trigger_is_retried_when_the_database_refused_it_and_names_its_run(airflow: AirflowClient) -> None:
    FakeAirflow.script = {"POST": [500, 500]}
    assert airflow.trigger("d", {"k": 1}, run_id="watch-1") == "watch-1"
    assert FakeAirflow.calls == ["GET", "PATCH", "POST", "POST", "POST"]
    FakeAirflow.calls = []
    run_id = airflow.trigger("d")  # no id given: Airflow's own manual__<time> form, sent with the POST
    assert run_id.startswith("manual__") and FakeAirflow.calls[-1] == "POST"


def test_a_retried_trigger_answered_already_exists_returns_the_run_an_earlier_attempt_made(
        airflow: AirflowClient) -> None:
    FakeAirflow.script = {"POST": [500, 409]}
    assert airflow.trigger("d", run_id="watch-2") == "watch-2"
    FakeAirflow.script = {"POST": [409]}  # a first answer 409 is the caller's duplicate id: an error
    with pytest.raises(AirflowError, match=r"HTTP 409 .*watch-2 already exists"):
        airflow.trigger("d", run_id="watch-2")
    FakeAirflow.script = {"POST": [500, 500, 500]}
    with pytest.raises(AirflowError, match=r"HTTP 500 .*Database error"):
        airflow.trigger("d", run_id="watch-3")


def test_a_failed_tasks_log_line_names_each_exception_and_where_in_the_project_it_was_raised() -> None:
    from modelops.airflow_client import _log_line

    event = {"event": "Task failed with exception", "error_detail": [
        {"exc_type": "AirflowFailException", "exc_value": "m/1: no evaluation data", "frames": [
            {"filename": "/x/airflow/sdk/task_runner.py", "lineno": 10},
            {"filename": "/x/plugins/modelops/airflow_tasks.py", "lineno": 29}]},
        {"exc_type": "GateFailed", "exc_value": "m/1: no evaluation data", "frames": [
            {"filename": "/x/plugins/modelops/release/spec_release.py", "lineno": 63}]}]}
    assert _log_line(event) == ("Task failed with exception AirflowFailException: m/1: no evaluation data "
                                "(at modelops/airflow_tasks.py:29) <- GateFailed: m/1: no evaluation data "
                                "(at release/spec_release.py:63)")
    assert _log_line({"event": "hello"}) == "hello" and _log_line("plain") == "plain"
