"""Session fixtures of the integration tests that several modules share.

``session_pushgateway``: Debian's Pushgateway (unpacked by ``make prometheus``) on the port the session
stack's ``MODELOPS_PUSHGATEWAY_URL`` names (tests/conftest.py), so the real batch DAGs and releases
push there; ``batch_runs``: feedback_join and nightly_drift run once as Airflow runs them
(:mod:`tests.support.batch_runs`), for test_job_dags.py and test_observability.py.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import pytest

from modelops.airflow_client import AirflowClient
from modelops.config import Settings
from modelops.errors import StackError
from modelops.objectstore import ObjectStore
from tests.support.batch_runs import BatchRuns, run_batch_story, start_pushgateway
from tests.support.receiver import NotificationReceiver


@pytest.fixture(scope="session")
def session_pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """The Pushgateway the session stack pushes to; None (pushes logged and dropped) without the binaries."""
    from modelops.observability.prometheus import binary

    url = os.environ["MODELOPS_PUSHGATEWAY_URL"]
    try:
        path = binary("pushgateway")
    except StackError as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(str(exc))
        yield None
        return
    port = urllib.parse.urlsplit(url).port
    assert port is not None, url
    with start_pushgateway(path, port, tmp_path_factory.mktemp("pushgateway") / "pushgateway.log") as started:
        yield started


@pytest.fixture(scope="session")
def batch_runs(stack_settings: Settings, object_store: ObjectStore, airflow: AirflowClient, mlflow_uri: str,
               notifications: NotificationReceiver, session_pushgateway: str | None) -> BatchRuns:
    """feedback_join and nightly_drift, run once for the session (their pushes land in session_pushgateway)."""
    return run_batch_story(stack_settings, object_store, airflow, mlflow_uri, notifications)
