"""Shared fixtures. Integration tests run against ONE embedded stack per test session.

The test stack uses its own state directory and ports (24xxx) so it never collides
with a developer's `modelops stack up` on the default ports. The MODELOPS_* variables
are set here, before any test imports settings, so code under test, the stack's
services and subprocesses all see the same configuration.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelops.config import Settings, stack_port_env
from tests.support.receiver import NotificationReceiver

# Below the ephemeral port range (32768+), so outgoing connections never hold a test port.
_BASE = int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000"))  # another base runs a second suite beside
TEST_ENV = {
    **stack_port_env(_BASE),
    "MODELOPS_AIRFLOW_PASSWORD": "modelops-test",
    "MODELOPS_FEEDBACK_SECRET": "modelops-test-feedback-secret",
    # The session stack runs without Prometheus & co.: their alerts would reach the shared notification
    # receiver; tests/integration/test_observability.py starts the same services on ports of its own.
    "MODELOPS_OBSERVABILITY": "off",
    # ... but the real batch DAGs and releases push to a Pushgateway of the session when one runs (the
    # session_pushgateway fixture of tests/integration/conftest.py; nothing listens otherwise: pushes logged).
    "MODELOPS_PUSHGATEWAY_URL": f"http://127.0.0.1:{_BASE + 617}",
}


def pytest_configure(config: pytest.Config) -> None:
    for key, value in TEST_ENV.items():
        os.environ[key] = value
    home = os.environ.setdefault("MODELOPS_HOME", tempfile.mkdtemp(prefix="modelops-test-"))
    # In-process Airflow (DagBag, dag.test()) gets its own home, never ~/airflow.
    os.environ["AIRFLOW_HOME"] = str(Path(home) / "pytest-airflow")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parents[1] / "dags")
    for key in ("MODELOPS_S3_ENDPOINT_URL", "MODELOPS_MLFLOW_TRACKING_URI", "MODELOPS_TRITON_URL",
                "MODELOPS_AIRFLOW_URL"):
        os.environ.pop(key, None)
    from modelops.config import settings

    settings.cache_clear()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the test state directory after a green run (kept for its logs after a red one)."""
    home = Path(os.environ["MODELOPS_HOME"])
    keep = os.environ.get("MODELOPS_KEEP_TEST_HOME")
    if exitstatus == 0 and home.name.startswith("modelops-test-") and not keep:
        from modelops.config import settings
        from modelops.stack import launcher

        if all(s.state == "stopped" for s in launcher.status(settings())):
            shutil.rmtree(home, ignore_errors=True)
    elif exitstatus != 0:
        print(f"\ntest stack state and logs kept in {home}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `stack_teardown` stop the shared stack: run them last; `chaos` tests just before them."""
    last = [item for item in items if item.get_closest_marker("stack_teardown")]
    chaos = [item for item in items if item.get_closest_marker("chaos") and item not in last]
    items[:] = [item for item in items if item not in last and item not in chaos] + chaos + last


@pytest.fixture(scope="session")
def notifications() -> Iterator[NotificationReceiver]:
    """A local apprise (json://) receiver; the test stack's MODELOPS_NOTIFY_URLS points at it."""
    with NotificationReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def stack_settings(notifications: NotificationReceiver) -> Iterator[Settings]:
    """The settings of the running test stack (brought up once, torn down at the end)."""
    from modelops.config import settings
    from modelops.stack import launcher

    os.environ["MODELOPS_NOTIFY_URLS"] = notifications.url
    settings.cache_clear()
    cfg = settings()
    try:
        launcher.up(cfg, progress=lambda line: print(line, flush=True))
    except BaseException:
        launcher.down(cfg, progress=lambda line: None)  # what did start: never leave a half stack behind
        raise
    yield cfg
    launcher.down(cfg, progress=lambda line: None)


@pytest.fixture(scope="session")
def object_store(stack_settings: object) -> object:
    from modelops.objectstore import ObjectStore

    return ObjectStore.from_settings()


@pytest.fixture(scope="session")
def mlflow_uri(stack_settings: object) -> str:
    from modelops.config import settings

    return settings().mlflow_uri


@pytest.fixture(scope="session")
def triton_url(stack_settings: object) -> str:
    from modelops.config import settings

    return settings().triton_http_url


@pytest.fixture(scope="session")
def airflow(stack_settings: object) -> object:
    """The test stack's Airflow client, with ``precompute_predictions`` paused for the session.

    Its @hourly schedule is live from the stack's start. At the next full hour it would score every
    model the suite has routed by then, which loads the 2 cores, and afterwards the gateway answers
    those models' stable traffic from the snapshot. In a CI run of 2026-12-03 that paused a canary
    release at 25 %. No test needs the schedule: ``tests/integration/test_precomputed.py`` runs the
    job's body itself. A test that triggers the DAG unpauses it again (``AirflowClient.trigger``).
    """
    from modelops.airflow_client import client_from_settings

    client = client_from_settings()
    client.wait_for_dag("precompute_predictions", timeout_s=300)
    client.pause("precompute_predictions")
    return client


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
