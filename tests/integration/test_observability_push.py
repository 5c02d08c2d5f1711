"""The batch tasks' and the release's pushes land in a real Pushgateway (Debian's, unpacked; no stack needed).

``drift_tasks._push_metrics`` and ``feedback_tasks._push_metrics`` are what ``publish`` calls
after storing its results; :class:`PhasePushingStore` is what the canary's wiring uses. With
``MODELOPS_PUSHGATEWAY_URL`` set they push; a re-run replaces its group (stable grouping);
an unreachable gateway is logged and the task goes on.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from modelops.canary.machine import start as start_release
from modelops.canary.release_phase import PhasePushingStore
from modelops.canary.runner import Checkpoint, MemoryStatusStore
from modelops.canary.spec import CanarySpec
from modelops.config import settings
from modelops.errors import StackError
from modelops.jobs import drift_tasks, feedback_tasks
from modelops.observability.prometheus import binary
from tests.support.batch_runs import start_pushgateway

pytestmark = pytest.mark.integration

_BASE = int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000"))
PORT = _BASE + 616


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        path = binary("pushgateway")
    except StackError as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with start_pushgateway(path, PORT, log) as url:
        yield url


@pytest.fixture
def configured(pushgateway: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MODELOPS_PUSHGATEWAY_URL", pushgateway)
    settings.cache_clear()
    yield pushgateway
    monkeypatch.undo()
    settings.cache_clear()


def _lines(url: str, name: str) -> list[str]:
    text = requests.get(f"{url}/metrics", timeout=5).text
    return [line for line in text.splitlines() if line.startswith(name)]


DRIFT = {"schema_version": 1, "rows": {"baseline": 10, "current": 8}, "sampled": False, "threshold": 0.1,
         "drifted": True, "score": {"name": "score", "ks": 0.3, "p_value": 0.0, "drifted": True},
         "features": [{"name": "f_000", "ks": 0.5, "p_value": 0.0, "drifted": True, "sensitivity": 1.0,
                       "weighted_score": 0.5}],
         "top_causes": ["f_000"]}


def test_batch_results_and_the_release_phase_are_pushed_and_replaced_on_rerun(configured: str) -> None:
    assert drift_tasks._push_metrics("pushtest", 3, "2026-11-29", DRIFT) == 1
    rows = [{"model": "pushtest", "model_version": 3, "impressions": 40, "clicked": 4, "converted": 1,
             "ctr": 0.1, "cvr": 0.25}]
    assert feedback_tasks._push_metrics("2026-11-29", {"by_version": rows, "rejected": {"malformed": 2}}) == 2
    assert any('job="modelops_nightly_drift"' in line and 'model="pushtest"' in line and 'version="3"' in line
               and line.endswith(" 1") for line in _lines(configured, "modelops_drift_detected"))
    assert any('job="modelops_feedback_join"' in line and line.endswith(" 0.1")
               for line in _lines(configured, "modelops_feedback_ctr"))
    # A re-run of the same version replaces its group: one series, the new value.
    assert drift_tasks._push_metrics("pushtest", 3, "2026-11-30", {**DRIFT, "drifted": False}) == 1
    detected = [line for line in _lines(configured, "modelops_drift_detected") if 'model="pushtest"' in line]
    assert len(detected) == 1 and detected[0].endswith(" 0"), detected

    store = PhasePushingStore(MemoryStatusStore())
    status, _ = start_release(CanarySpec(), "pushtest", 3, 4, time.time())
    store.save(Checkpoint(status))
    phases = [line for line in _lines(configured, "modelops_release_phase") if 'model="pushtest"' in line]
    assert len(phases) == 1 and 'phase="progressing"' in phases[0] and 'version="4"' in phases[0]


def test_an_unreachable_pushgateway_never_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MODELOPS_PUSHGATEWAY_URL", f"http://127.0.0.1:{port}")
    settings.cache_clear()
    try:
        assert drift_tasks._push_metrics("pushtest", 3, "2026-11-29", DRIFT) == 0  # logged, not raised
    finally:
        monkeypatch.undo()
        settings.cache_clear()
