"""The scaling controller (``modelops scale``) against the session stack's Triton.

A python-backend test model that takes 0.1 s per request (one instance serves 10 requests/s)
gets 6 concurrent clients: with one instance each request queues ~0.5 s. The controller runs
as its own process with short settings (interval 1 s, cool-down 4 s, 1-3 instances) and only
for this model. Checked: it raises the count to the maximum, Triton's mean queue time falls,
after the load stops it lowers the count one step per cool-down of low load, every change is
in the audit log and matches what Triton runs, and no request fails across the changes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modelops.config import Settings
from modelops.errors import ServingError
from modelops.gateway.testing import write_test_model
from modelops.serving.scaler import audit_path_of, instance_count, parse_metrics, read_audit, scrape
from modelops.serving.scaling import window_load
from modelops.serving.triton import TritonClient
from tests.support.stackops import wait_for

pytestmark = pytest.mark.integration

MODEL = f"scale_{uuid.uuid4().hex[:8]}"
DELAY_S, CLIENTS, COOLDOWN_S = 0.1, 6, 4.0
CONTROLLER_ENV = {
    "MODELOPS_SCALING_MODELS": MODEL, "MODELOPS_SCALING_MIN_INSTANCES": "1", "MODELOPS_SCALING_MAX_INSTANCES": "3",
    "MODELOPS_SCALING_UP_QUEUE_MS": "100", "MODELOPS_SCALING_DOWN_QUEUE_MS": "10",
    "MODELOPS_SCALING_UP_PENDING": "4", "MODELOPS_SCALING_COOLDOWN_S": str(COOLDOWN_S),
    "MODELOPS_SCALING_INTERVAL_S": "1",
}


@pytest.fixture(scope="module")
def served(stack_settings: Settings, triton_url: str) -> Iterator[TritonClient]:
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, MODEL, [1], delay_s=DELAY_S)
    triton = TritonClient(triton_url, load_timeout_s=180.0)
    triton.load(MODEL)
    yield triton
    with contextlib.suppress(ServingError):  # best-effort cleanup of a shared stack
        triton.unload(MODEL)
    shutil.rmtree(repository / MODEL, ignore_errors=True)


@contextlib.contextmanager
def controller(cfg: Settings, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    from modelops.stack.services import VENV_BIN, base_env

    env = {**base_env(cfg), **CONTROLLER_ENV}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / "modelops"), "scale"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Load:
    """CLIENTS closed-loop clients of the model, each request recorded (failures too)."""

    def __init__(self, url: str) -> None:
        self.url, self.stop = url, threading.Event()
        self.errors: list[str] = []
        self.done = 0
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]

    def _client(self) -> None:
        client = TritonClient(self.url, timeout_s=60.0)
        features = {"features": np.zeros((1, 128), np.float32)}
        while not self.stop.is_set():
            try:
                client.infer(MODEL, 1, features, ("score",))
                self.done += 1
            except ServingError as exc:
                self.errors.append(str(exc)[:300])

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def queue_ms(metrics_url: str, seconds: float) -> float:
    """Triton's mean queue time per request of the model over the next ``seconds``."""
    before = scrape(metrics_url)[(MODEL, 1)]
    time.sleep(seconds)
    load = window_load(before, scrape(metrics_url)[(MODEL, 1)])
    assert load is not None and load.requests > 0, load
    return load.queue_ms


def changes(cfg: Settings, since: float) -> list[dict[str, Any]]:
    """The audit records of the test model written after ``since`` (epoch seconds)."""
    return [r for r in read_audit(audit_path_of(cfg))
            if r["model"] == MODEL and datetime.fromisoformat(r["at"]).timestamp() >= since]


def test_parse_metrics_sums_failure_reasons() -> None:
    text = (
        '# TYPE nv_inference_request_success counter\nnv_inference_request_success{model="m",version="2"} 10\n'
        '# TYPE nv_inference_request_failure counter\n'
        'nv_inference_request_failure{model="m",reason="OTHER",version="2"} 1\n'
        'nv_inference_request_failure{model="m",reason="CANCELED",version="2"} 2\n'
        '# TYPE nv_inference_queue_duration_us counter\nnv_inference_queue_duration_us{model="m",version="2"} 650\n'
        '# TYPE nv_inference_pending_request_count gauge\nnv_inference_pending_request_count{model="m",version="2"} 3\n'
    )
    assert parse_metrics(text) == {("m", 2): {"requests": 13.0, "queue_us": 650.0, "pending": 3.0}}


def test_controller_scales_up_under_load_and_down_after_the_cooldown(
        stack_settings: Settings, served: TritonClient, tmp_path: Path) -> None:
    metrics_url, since = stack_settings.triton_metrics_url, time.time()
    assert instance_count(served.model_config(MODEL)) == 1
    with Load(served.base_url) as load:
        wait_for(lambda: load.done >= CLIENTS, 60, "the first requests")
        one_instance_ms = queue_ms(metrics_url, 3.0)
        with controller(stack_settings, tmp_path / "scale.log") as proc:
            top = wait_for(lambda: [r for r in changes(stack_settings, since) if r["to"] == 3], 90, "3 instances")[0]
            assert instance_count(served.model_config(MODEL)) == 3
            three_instances_ms = queue_ms(metrics_url, 3.0)
            load.stop.set()
            stopped_at = time.time()
            wait_for(lambda: [r for r in changes(stack_settings, since) if r["to"] == 1 and r["from"] == 2], 90,
                     "1 instance again")
            assert proc.poll() is None, (tmp_path / "scale.log").read_text()[-2000:]
    log = changes(stack_settings, since)
    print(f"queue ms/request: {one_instance_ms:.0f} on 1 instance, {three_instances_ms:.0f} on 3; changes "
          + ", ".join(f"{r['from']}->{r['to']} in {r['seconds']:.1f} s" for r in log))
    assert [(r["from"], r["to"]) for r in log] == [(1, 2), (2, 3), (3, 2), (2, 1)], log
    assert all(r["ok"] and r["why"] and r["who"].startswith("modelops scale") for r in log), log
    assert top == log[1]
    assert load.errors == [] and load.done > 0
    # Queue time falls with the instances (6 clients: ~0.5 s per request on one, ~0.1 s on three).
    assert three_instances_ms < 0.6 * one_instance_ms, (one_instance_ms, three_instances_ms)
    # Down only after the load stopped, one step per cool-down of low load.
    downs = [datetime.fromisoformat(r["at"]).timestamp() for r in log[2:]]
    assert downs[0] >= stopped_at + COOLDOWN_S - 1.5, (downs, stopped_at)
    assert downs[1] - downs[0] >= COOLDOWN_S - 1.0, downs
    assert instance_count(served.model_config(MODEL)) == 1
    assert served.ready_versions(MODEL) == [1]
    assert os.path.getsize(audit_path_of(stack_settings)) > 0
