"""A thin client of Airflow 3's REST API: token, unpause, trigger, follow a run.

Used by the CLI (``modelops release start``), the demo and the tests. HTTP errors
become :class:`~modelops.errors.ModelopsError` with Airflow's own message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from modelops.errors import ModelopsError

TERMINAL_STATES = frozenset({"success", "failed"})


class AirflowError(ModelopsError):
    """The Airflow API refused or failed a request."""


_RETRIED_ON_DATABASE_ERROR = frozenset({"GET", "PUT", "PATCH"})


@dataclass
class AirflowClient:
    base_url: str
    username: str
    password: str
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0  # the wait before retry k is k x this
    _token: str | None = field(default=None, repr=False)
    _session: requests.Session = field(default_factory=requests.Session, repr=False)

    def _auth_header(self) -> dict[str, str]:
        if self._token is None:
            response = self._session.post(
                f"{self.base_url}/auth/token",
                json={"username": self.username, "password": self.password},
                timeout=self.timeout_s,
            )
            if response.status_code not in (200, 201):
                raise AirflowError(f"Airflow login as {self.username!r} failed: HTTP {response.status_code} "
                                   f"{response.text[:200]}")
            self._token = str(response.json()["access_token"])
        return {"Authorization": f"Bearer {self._token}"}

    def request(self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any) -> Any:
        """One API call.

        Reads (GET) are retried on connection errors and time-outs. GET, PUT and PATCH are also
        retried when Airflow answers 500 "Database error": its database refused the transaction
        (SQLite's lock wait of 5 s ran out while the scheduler wrote), so nothing was changed.
        A POST is retried so only when the caller says it is ``idempotent`` (clearing a run's failed
        tasks); :meth:`trigger` names its run and retries its own.
        """
        retry = method in _RETRIED_ON_DATABASE_ERROR if idempotent is None else idempotent
        response, _ = self._send(method, path, retry_database_error=retry, **kwargs)
        return self._document(method, path, response)

    def _send(self, method: str, path: str, *, retry_database_error: bool,
              **kwargs: Any) -> tuple[requests.Response, int]:
        """The last response and how many attempts it took."""
        attempts = self.retries if retry_database_error else 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._session.request(method, f"{self.base_url}{path}", headers=self._auth_header(),
                                                 timeout=self.timeout_s, **kwargs)
            except requests.RequestException as exc:
                if attempt == attempts or method != "GET":
                    raise AirflowError(f"Airflow API {self.base_url} unreachable: {exc}") from exc
                time.sleep(attempt * self.backoff_s)
                continue
            if response.status_code == 500 and "Database error" in response.text and attempt < attempts:
                time.sleep(attempt * self.backoff_s)
                continue
            return response, attempt
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
    def _document(method: str, path: str, response: requests.Response) -> Any:
        if response.status_code >= 400:
            raise AirflowError(f"Airflow API {method} {path}: HTTP {response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def version(self) -> str:
        return str(self.request("GET", "/api/v2/version")["version"])

    def wait_for_dag(self, dag_id: str, timeout_s: float = 90.0) -> None:
        """Wait until the DAG processor has parsed ``dag_id``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.request("GET", f"/api/v2/dags/{dag_id}")
                return
            except AirflowError:
                if time.monotonic() > deadline:
                    raise AirflowError(f"DAG {dag_id!r} not parsed within {timeout_s:.0f} s") from None
                time.sleep(1.0)

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        """Stop scheduling ``dag_id`` (running runs go on; triggering it unpauses it again)."""
        self.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None, *, run_id: str | None = None,
                note: str | None = None) -> str:
        """Trigger a run (unpausing the DAG first); returns the dag_run_id.

        The run is always named (Airflow's own ``manual__<time>_<random>`` form when the caller gives
        no id), so the POST can be retried when Airflow answers 500 "Database error" (its audit-log
        insert or the run's insert lost SQLite's lock wait and was rolled back). A retry answered 409
        "already exists" means an earlier attempt's run was committed after all: that run is the answer.
        """
        self.wait_for_dag(dag_id)
        self.unpause(dag_id)
        run_id = run_id or f"manual__{datetime.now(UTC).isoformat()}_{uuid.uuid4().hex[:8]}"
        body: dict[str, Any] = {"logical_date": None, "conf": dict(conf or {}), "dag_run_id": run_id}
        if note:
            body["note"] = note
        path = f"/api/v2/dags/{dag_id}/dagRuns"
        response, attempts = self._send("POST", path, retry_database_error=True, json=body)
        if response.status_code == 409 and attempts > 1:
            return run_id
        return str(self._document("POST", path, response)["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.request("GET", path)["value"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, *, last: int = 40) -> str:
        """The last ``last`` lines of one try's log (Airflow 3 returns structured events: their text)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        content = self.request("GET", path, params={"full_content": "true"}).get("content", [])
        lines = content.splitlines() if isinstance(content, str) else [_log_line(e) for e in content]
        return "\n".join(lines[-last:])

    def failed_tasks_logs(self, dag_id: str, run_id: str, *, last: int = 40) -> str:
        """Every failed task's state and the end of its last try's log: what a test prints when a run failed."""
        parts = []
        for ti in self.task_instances(dag_id, run_id):
            if ti.get("state") not in ("failed", "up_for_retry"):
                continue
            try:
                text = self.task_log(dag_id, run_id, ti["task_id"], int(ti.get("try_number") or 1), last=last)
            except AirflowError as exc:  # evidence for a message, never a failure of its own
                text = f"(log unreadable: {exc})"
            parts.append(f"--- {ti['task_id']} try {ti.get('try_number')} ({ti.get('state')}):\n{text}")
        return "\n".join(parts)

    def wait(self, dag_id: str, run_id: str, *, timeout_s: float = 300.0,
             on_change: Callable[[str], None] | None = None) -> str:
        """Poll until the run ends; returns its final state."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state != last and on_change:
                on_change(state)
            last = state
            if state in TERMINAL_STATES:
                return state
            time.sleep(1.0)
        raise AirflowError(f"run {dag_id}/{run_id} still {last!r} after {timeout_s:.0f} s")


def _log_line(event: Any) -> str:
    """One structured log event as a line: its message, and an exception's detail when it carries one."""
    if not isinstance(event, dict):
        return str(event)
    detail = event.get("error_detail")
    if not isinstance(detail, list):
        return f"{event.get('event', '')}{f' {detail}' if detail else ''}"
    # Airflow's structured exception: each chained exception's type, message and innermost frame
    # of the project's own code, not the whole frame list
    causes = []
    for exc in detail:
        if not isinstance(exc, dict):
            continue
        own = [f for f in exc.get("frames", []) if "/modelops/" in str(f.get("filename", ""))]
        where = f" (at {'/'.join(str(own[-1]['filename']).rsplit('/', 2)[-2:])}:{own[-1]['lineno']})" if own else ""
        causes.append(f"{exc.get('exc_type')}: {str(exc.get('exc_value', ''))[:500]}{where}")
    return f"{event.get('event', '')} " + " <- ".join(causes)


def client_from_settings() -> AirflowClient:
    from modelops.config import settings
    from modelops.credentials import airflow_password

    cfg = settings()
    return AirflowClient(cfg.airflow_api_url, cfg.airflow_user, airflow_password(cfg))
