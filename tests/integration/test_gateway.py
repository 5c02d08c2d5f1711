"""The serving gateway against the real stack: Triton (python backend), the object store, apprise.

The test writes its own tiny Triton models into the stack's local repository (scores are
a sigmoid of a fixed weighted sum, different per version; one model is slow, one answers
a constant), publishes small feature tables and a routes document, and starts the gateway
as a subprocess on a free port (stopped by its PID).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import requests

from modelops.config import Settings
from modelops.documents.routes import Routes, VersionRef, choose_version, routes_key, serialize_routes
from modelops.errors import ServingError
from modelops.example.tables import FeatureLookup, publish_feature_tables
from modelops.gateway.feedback.tokens import TokenClaims, issue_token, resolve_secret
from modelops.gateway.testing import feature_tables, write_test_model
from modelops.modelspec.recommender import recommender_contract
from modelops.objectstore import ObjectStore
from modelops.process import free_port
from modelops.records import FEEDBACK, LOG_PREFIXES, PREDICTIONS
from modelops.serving.triton import TritonClient
from tests.support.eventlogs import logged_values
from tests.support.stackops import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:8]
MODEL = f"gwtest_{RUN}"
SLOW = f"gwslow_{RUN}"
FLAT = f"gwflat_{RUN}"
SHA = {1: "1" * 64, 2: "2" * 64}
GATEWAY_MAX_BODY = 65536

def routes_doc(model: str, revision: int, stable: int, canary: int | None, weight: float) -> Routes:
    return Routes(model, revision, VersionRef(stable, SHA.get(stable, "9" * 64)),
                  None if canary is None else VersionRef(canary, SHA.get(canary, "8" * 64)),
                  weight, "2026-11-29T21:00:00Z", "test_gateway")


@dataclass
class GatewayProcess:
    """A gateway started as ``python -m modelops.gateway serve`` (stopped by its PID)."""

    port: int
    spool: Path
    log: Path
    env: dict[str, str]
    args: tuple[str, ...]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> GatewayProcess:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "modelops.gateway", "serve", "--port", str(self.port), "--workers", "1",
             "--spool-dir", str(self.spool), *self.args],
            env=self.env, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        handle.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"gateway not healthy in {timeout_s} s: {self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None


def gateway_env(cfg: Settings, **overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "plugins"), env.get("PYTHONPATH", "")) if p)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["MODELOPS_HOME"] = str(cfg.home)
    env.update(overrides)
    return env


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> dict[str, Any]:
    """Test models loaded in Triton, feature tables and routes published."""
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, MODEL, [1, 2])
    write_test_model(repository, SLOW, [1], delay_s=1.5)
    write_test_model(repository, FLAT, [1], flat=True)
    triton = TritonClient(triton_url)
    for name in (MODEL, SLOW, FLAT):
        triton.load(name)
    object_store.ensure_bucket()
    users, items = feature_tables()
    publish_feature_tables(object_store, f"gwtest-{RUN}", users, items)
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 1, 1, 2, 0.5)))
    object_store.put_bytes(routes_key(SLOW), serialize_routes(routes_doc(SLOW, 1, 1, None, 0.0)))
    object_store.put_bytes(routes_key(FLAT), serialize_routes(routes_doc(FLAT, 1, 1, None, 0.0)))
    yield {"triton": triton, "lookup": FeatureLookup.from_frames(users, items), "users": users, "items": items}
    for name in (MODEL, SLOW, FLAT):
        with contextlib.suppress(ServingError):  # best-effort cleanup of a shared stack
            triton.unload(name)
        shutil.rmtree(repository / name, ignore_errors=True)
        object_store.delete(routes_key(name))


@pytest.fixture(scope="module")
def gateway(served: dict[str, Any], stack_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        GatewayProcess]:
    base = tmp_path_factory.mktemp("gateway")
    process = GatewayProcess(
        free_port(), base / "spool", base / "gateway.log", gateway_env(stack_settings),
        ("--max-deadline-ms", "1000", "--max-body-bytes", str(GATEWAY_MAX_BODY), "--segment-max-age-s", "1",
         "--collapse-hold-s", "2", "--collapse-min-scores", "20", "--routes-poll-s", "0.3"))
    process.start()
    yield process
    process.stop()


def predict(gw: GatewayProcess, model: str, body: Any, **headers: str) -> requests.Response:
    return requests.post(f"{gw.url}/v1/models/{model}/predict", json=body, headers=headers, timeout=10)


def good_body(user: str = "u_0001", n: int = 5) -> dict[str, Any]:
    return {"user_id": user, "item_ids": [f"i_{k:04d}" for k in range(n)], "timestamp": 1764460800}


def direct_scores(triton_url: str, model: str, version: int, features: np.ndarray) -> np.ndarray:
    """Scores straight from Triton with NVIDIA's own client (binary tensors: NaN travels as is)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(triton_url.removeprefix("http://"))
    tensor = httpclient.InferInput("features", list(features.shape), "FP32")
    tensor.set_data_from_numpy(features.astype(np.float32), binary_data=True)
    result = client.infer(model, [tensor], model_version=str(version),
                          outputs=[httpclient.InferRequestedOutput("score", binary_data=True)])
    return np.asarray(result.as_numpy("score")).reshape(-1)


def triton_inference_count(triton: TritonClient, model: str) -> int:
    stats = triton.session.get(f"{triton.base_url}/v2/models/{model}/stats", timeout=5).json()
    return sum(int(s["inference_count"]) for s in stats["model_stats"])


# ---------------------------------------------------------------------------- tests


def test_predict_returns_the_scores_of_triton_with_sticky_versions(gateway: GatewayProcess,
                                                                   served: dict[str, Any]) -> None:
    triton: TritonClient = served["triton"]
    routes = routes_doc(MODEL, 1, 1, 2, 0.5)
    seen: set[int] = set()
    for k in range(0, 40, 3):
        user = f"u_{k:04d}"
        items = [f"i_{(k * 5 + j) % 130:04d}" for j in range(1 + k % 7)]  # some unknown items (NaN)
        response = predict(gateway, MODEL, {"user_id": user, "item_ids": items, "timestamp": 1764460800},
                           **{"X-Request-ID": f"req-{RUN}-{k}"})
        assert response.status_code == 200, response.text
        body = response.json()
        expected_version = choose_version(routes, user)
        assert body["model_version"] == expected_version.version
        assert response.headers["X-Model-Version"] == expected_version.label
        assert response.headers["X-Request-ID"] == f"req-{RUN}-{k}"
        assert float(response.headers["X-Inference-Latency"]) > 0
        features = served["lookup"].matrix([user] * len(items), items)
        direct = direct_scores(triton.base_url, MODEL, expected_version.version, features)
        np.testing.assert_array_equal(np.asarray(body["scores"], dtype=np.float32), direct.reshape(-1))
        again = predict(gateway, MODEL, {"user_id": user, "item_ids": items, "timestamp": 1764460800})
        assert again.json()["model_version"] == body["model_version"], "one user sees one version"
        assert again.headers["X-Request-ID"] != f"req-{RUN}-{k}"
        seen.add(body["model_version"])
    assert seen == {1, 2}


def test_contract_errors_are_400_and_never_reach_triton(gateway: GatewayProcess, served: dict[str, Any]) -> None:
    triton: TritonClient = served["triton"]
    before = triton_inference_count(triton, MODEL)
    body = good_body()
    body["item_ids"][3] = "x" * 33
    response = predict(gateway, MODEL, body)
    assert response.status_code == 400
    assert response.json() == {"error": "contract_violation", "field": "item_ids[3]", "rule": "maxLength 32",
                               "value": "x" * 33, "message": response.json()["message"]}
    for bad in ({**good_body(), "user_id": "a b"}, {**good_body(), "extra": 1}, {"user_id": "u"},
                {**good_body(), "timestamp": "now"}, [1, 2]):
        assert predict(gateway, MODEL, bad).status_code == 400
    # ECMA-262 patterns: $ is the end of the input, so a trailing newline is refused (Python re let it in).
    response = predict(gateway, MODEL, {**good_body(), "user_id": "u1\n"})
    assert response.status_code == 400, response.text
    assert (response.json()["field"], response.json()["rule"]) == ("user_id", "pattern ^[A-Za-z0-9_-]+$")
    response = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=b"{not json",
                             headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 400 and response.json()["error"] == "invalid_json"
    assert predict(gateway, MODEL, good_body(), **{"Inference-Timeout": "soon"}).status_code == 400
    assert triton_inference_count(triton, MODEL) == before
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert f'modelops_gateway_errors_total{{model="{MODEL}",version="none",class="contract"}} 9' in metrics


def test_size_type_and_unknown_model(gateway: GatewayProcess) -> None:
    big = json.dumps({**good_body(), "user_id": "u" * 70000}).encode()
    response = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=big,
                             headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the gateway stops reading past the limit
        for _ in range(100):
            yield b" " * 4096

    response = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=chunks(),
                             headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 413
    response = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=json.dumps(good_body()),
                             headers={"Content-Type": "text/plain"}, timeout=5)
    assert response.status_code == 415
    response = predict(gateway, f"nosuch_{RUN}", good_body())
    assert response.status_code == 404 and response.json()["error"] == "unknown_model"


def _metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a Prometheus text exposition (None when absent).

    Read with the canary's parser, which keeps the names as exposed (``prometheus_client``'s renames
    Triton's counters to ``*_total``).
    """
    from modelops.canary.promtext import parse

    return next((s.value for s in parse(text)
                 if s.name == name and all(s.label(k) == v for k, v in labels.items())), None)


def test_deadline_504_and_header_cannot_raise_it(gateway: GatewayProcess, stack_settings: Settings) -> None:
    started = time.monotonic()
    response = predict(gateway, SLOW, good_body(), **{"Inference-Timeout": "200"})
    assert response.status_code == 504
    assert time.monotonic() - started < 1.2
    started = time.monotonic()
    response = predict(gateway, SLOW, good_body(), **{"Inference-Timeout": "100000"})
    assert response.status_code == 504, "the configured maximum (1000 ms) still applies"
    assert 0.9 < time.monotonic() - started < 1.45
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert f'modelops_gateway_errors_total{{model="{SLOW}",version="1",class="timeout"}} 2' in metrics
    assert f'modelops_gateway_requests_total{{model="{SLOW}",version="1"' not in metrics, "only answered ones"
    # The gateway gave up on both; Triton still runs them (1.5 s each): the next tests start once it has.
    wait_for(lambda: _metric(requests.get(stack_settings.triton_metrics_url, timeout=5).text,
                             "nv_inference_request_success", model=SLOW, version="1") == 2,
             10, "Triton finished the two abandoned slow requests")


def test_triton_unreachable_is_503_with_retry_after(served: dict[str, Any], stack_settings: Settings,
                                                    tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    process = GatewayProcess(free_port(), tmp_path / "spool", tmp_path / "gw.log",
                             gateway_env(stack_settings, MODELOPS_TRITON_URL=closed), ())
    process.start()
    try:
        response = predict(process, MODEL, good_body())
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        assert response.json()["error"] == "triton_unavailable"
    finally:
        process.stop()


def test_feedback_status_codes(gateway: GatewayProcess, stack_settings: Settings) -> None:
    response = predict(gateway, MODEL, good_body())
    token = response.json()["feedback_token"]
    url = f"{gateway.url}/v1/feedback"
    ok = requests.post(url, json={"feedback_token": token, "action": "click", "timestamp": time.time()}, timeout=5)
    assert ok.status_code == 202 and ok.json()["request_id"] == response.headers["X-Request-ID"]
    bad_action = requests.post(url, json={"feedback_token": token, "action": "like", "timestamp": time.time()},
                               timeout=5)
    assert bad_action.status_code == 400 and bad_action.json()["field"] == "action"
    body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["v"] = 99
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode() + "." + signature
    tampered = requests.post(url, json={"feedback_token": forged, "action": "click", "timestamp": time.time()},
                             timeout=5)
    assert tampered.status_code == 401
    secret = resolve_secret(stack_settings.feedback_secret, stack_settings.home)
    old = issue_token(secret, TokenClaims("old", MODEL, 1, "1" * 12, time.time() - 25 * 3600))
    expired = requests.post(url, json={"feedback_token": old, "action": "click", "timestamp": time.time()},
                            timeout=5)
    assert expired.status_code == 410
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    version = response.json()["model_version"]
    assert f'modelops_gateway_feedback_events_total{{model="{MODEL}",version="{version}",action="click"}} 1' in metrics


def test_routes_change_is_applied_within_two_seconds(gateway: GatewayProcess, object_store: ObjectStore) -> None:
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 2, 1, 2, 0.1)))
    started = time.monotonic()
    revision = 0
    while time.monotonic() - started < 5:
        revision = requests.get(f"{gateway.url}/v1/routes", timeout=5).json()["models"][MODEL]["revision"]
        if revision == 2:
            break
        time.sleep(0.05)
    assert revision == 2 and time.monotonic() - started < 2.0
    assert f'modelops_gateway_routes_revision{{model="{MODEL}"}} 2' in requests.get(
        f"{gateway.url}/metrics", timeout=5).text
    def routes_errors() -> float:
        text = requests.get(f"{gateway.url}/metrics", timeout=5).text
        return _metric(text, "modelops_gateway_routes_errors_total", model=MODEL) or 0.0

    errors = routes_errors()
    object_store.put_bytes(routes_key(MODEL), b"{broken")  # unreadable: the last good routes stay
    wait_for(lambda: routes_errors() > errors, 5, "the gateway read the broken routes")
    assert requests.get(f"{gateway.url}/v1/routes", timeout=5).json()["models"][MODEL]["revision"] == 2
    assert predict(gateway, MODEL, good_body()).status_code == 200
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 3, 1, 2, 0.5)))


def _log_rows(store: ObjectStore, prefix: str, column: str, wanted: set[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for key in store.list_keys(prefix + "/"):
        table = pq.read_table(io.BytesIO(store.get_bytes(key)))
        if prefix.endswith("predictions"):
            assert table.schema.equals(PREDICTIONS)
        if prefix.endswith("feedback"):
            assert table.schema.equals(FEEDBACK)
        rows.extend(r for r in table.to_pylist() if r[column] in wanted)
    return rows


def test_prediction_and_scored_sample_logs_reach_the_store(gateway: GatewayProcess,
                                                           object_store: ObjectStore) -> None:
    ids = {f"log-{RUN}-{k}" for k in range(5)}
    for request_id in ids:
        assert predict(gateway, MODEL, good_body(n=3), **{"X-Request-ID": request_id}).status_code == 200
    deadline = time.monotonic() + 30
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = _log_rows(object_store, LOG_PREFIXES["predictions"], "request_id", ids)
        if len(rows) == len(ids):
            break
        time.sleep(1)
    assert {r["request_id"] for r in rows} == ids
    assert all(r["n_items"] == 3 and r["model"] == MODEL and r["feedback_token"] for r in rows)
    samples = _log_rows(object_store, LOG_PREFIXES["scored_samples"], "request_id", ids)
    while len(samples) < 3 * len(ids) and time.monotonic() < deadline:  # sealed and uploaded on their own
        time.sleep(1)
        samples = _log_rows(object_store, LOG_PREFIXES["scored_samples"], "request_id", ids)
    assert len(samples) == 3 * len(ids)
    assert all(r["user_age_days"] is not None for r in samples)


def test_prediction_collapse_notifies_once(gateway: GatewayProcess, notifications: Any) -> None:
    before = len(notifications.messages)
    for k in range(10):
        assert predict(gateway, FLAT, good_body(f"u_{k:04d}", n=5)).status_code == 200
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(notifications.messages) == before:
        time.sleep(0.2)
    # The watch keeps running (every 1 s; each pass refreshes the gauges, the snapshot age among them):
    # after three more passes over the still-collapsed version there is still one notification.
    def snapshot_age() -> float:
        age = _metric(requests.get(f"{gateway.url}/metrics", timeout=5).text,
                      "modelops_gateway_feature_snapshot_age_seconds")
        assert age is not None
        return age

    seen = snapshot_age()
    wait_for(lambda: snapshot_age() >= seen + 3, 15, "three more passes of the collapse watch")
    ours = [m for m in notifications.messages[before:] if FLAT in json.dumps(m)]
    assert len(ours) == 1
    metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert f'ml_prediction_collapse{{model="{FLAT}",version="1"}} 1' in metrics
    assert f'ml_prediction_std{{model="{FLAT}",version="1"}} 0' in metrics


def _restart_and_find(process: GatewayProcess, store: ObjectStore, kind: str, column: str, sent: list[str],
                      acknowledged: list[str]) -> tuple[set[str], set[str]]:
    """Start ``process`` again on its spool (leftovers are sealed and uploaded at start) and wait up to 60 s
    for every acknowledged value in the ``kind`` log; returns (found, lost)."""
    process.start()
    wanted = set(acknowledged)
    deadline = time.monotonic() + 60
    found: set[str] = set()
    while time.monotonic() < deadline:
        found = logged_values(store, kind, column, sent)
        if wanted <= found:
            break
        time.sleep(1)
    process.stop()
    return found, wanted - found


def test_kill9_during_a_feedback_burst_loses_no_acknowledged_event(
        served: dict[str, Any], stack_settings: Settings, object_store: ObjectStore, tmp_path: Path) -> None:
    secret = resolve_secret(stack_settings.feedback_secret, stack_settings.home)
    process = GatewayProcess(free_port(), tmp_path / "spool", tmp_path / "gw.log", gateway_env(stack_settings),
                             ("--segment-max-age-s", "60"))  # nothing uploads before the kill
    process.start()
    now = time.time()
    tokens = [issue_token(secret, TokenClaims(f"burst-{RUN}-{k}", MODEL, 1, "1" * 12, now)) for k in range(5000)]
    acknowledged: list[str] = []
    lock = threading.Lock()
    local = threading.local()

    def send(token: str) -> None:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        try:
            response = session.post(f"{process.url}/v1/feedback", timeout=5,
                                    json={"feedback_token": token, "action": "click", "timestamp": now})
        except requests.RequestException:
            return
        if response.status_code == 202:
            with lock:
                acknowledged.append(token)

    def killer() -> None:
        while len(acknowledged) < 1500:
            time.sleep(0.005)
        assert process.proc is not None
        os.kill(process.proc.pid, signal.SIGKILL)

    kill = threading.Thread(target=killer)
    kill.start()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(send, tokens))
    kill.join()
    assert process.proc is not None
    process.proc.wait(timeout=10)
    assert 1500 <= len(acknowledged) < 5000, "the kill happened during the burst"
    assert list((tmp_path / "spool" / "feedback").glob("*.open")), "the dead gateway left an open segment"
    found, lost = _restart_and_find(process, object_store, "feedback", "feedback_token", tokens, acknowledged)
    print(f"feedback burst: {len(acknowledged)} acknowledged, {len(found)} in the store, {len(lost)} lost")
    assert not lost


def test_kill9_under_prediction_traffic_loses_no_acknowledged_prediction(
        served: dict[str, Any], stack_settings: Settings, object_store: ObjectStore, tmp_path: Path) -> None:
    process = GatewayProcess(free_port(), tmp_path / "spool", tmp_path / "gw.log", gateway_env(stack_settings),
                             ("--segment-max-age-s", "60"))  # nothing uploads before the kill
    process.start()
    ids = [f"dur-{RUN}-{k}" for k in range(4000)]
    acknowledged: list[str] = []
    lock = threading.Lock()
    local = threading.local()
    killed = threading.Event()

    def send(request_id: str) -> None:
        if killed.is_set():
            return
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        try:
            response = session.post(f"{process.url}/v1/models/{MODEL}/predict", timeout=5,
                                    json=good_body(f"u_{len(request_id) % 50:04d}", n=3),
                                    headers={"X-Request-ID": request_id})
        except requests.RequestException:
            return
        if response.status_code == 200:
            with lock:
                acknowledged.append(request_id)

    def killer() -> None:
        while len(acknowledged) < 300:
            time.sleep(0.002)
        assert process.proc is not None
        os.kill(process.proc.pid, signal.SIGKILL)
        killed.set()

    kill = threading.Thread(target=killer)
    kill.start()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(send, ids))
    kill.join()
    assert process.proc is not None
    process.proc.wait(timeout=10)
    assert 300 <= len(acknowledged) < len(ids), "the kill happened under traffic"
    assert list((tmp_path / "spool" / "predictions").glob("*.open")), "the dead gateway left an open segment"
    found, lost = _restart_and_find(process, object_store, "predictions", "request_id", ids, acknowledged)
    print(f"prediction traffic: {len(acknowledged)} acknowledged, {len(found)} in the store, {len(lost)} lost")
    assert not lost


def test_traffic_generator_sends_predictions_and_feedback_per_version(gateway: GatewayProcess) -> None:
    import asyncio

    from modelops.traffic.runner import run_traffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    def clicks(version: int) -> float:
        metrics = requests.get(f"{gateway.url}/metrics", timeout=5).text
        line = f'modelops_gateway_feedback_events_total{{model="{MODEL}",version="{version}",action="click"}} '
        return sum(float(row.split()[-1]) for row in metrics.splitlines() if row.startswith(line))

    before = {1: clicks(1), 2: clicks(2)}
    spec = TrafficSpec(model=MODEL, rate=40, max_requests=60, max_seconds=30, n_users=60, n_items=120,
                       id_width=4, default=Behaviour(click=0.0, purchase=0.0, skip=0.0),
                       per_version={2: Behaviour(click=1.0, purchase=0.0, skip=0.0)}, seed=3)
    lines: list[str] = []
    report = asyncio.run(run_traffic(spec, gateway.url, progress=lines.append))
    assert report.sent == 60 and report.status[200] == 60 and lines
    assert report.per_version[1] > 0 and report.per_version[2] > 0
    assert report.feedback_status[202] == report.per_version[2]
    assert clicks(2) - before[2] == report.per_version[2]
    assert clicks(1) == before[1]


def _schemathesis_test() -> Any:
    """Schemathesis over the document the gateway serves (built by the same pure function).

    pytest 9 broke schemathesis' fixture-based lazy loader, so the schema is built here from
    ``build_openapi`` and the test first checks that the served ``/openapi.json`` is exactly it.
    """
    import schemathesis
    from hypothesis import HealthCheck
    from hypothesis import settings as hypothesis_settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    from modelops.gateway.protocol.contract import compile_contract
    from modelops.gateway.protocol.openapi import build_openapi

    document = build_openapi(compile_contract(recommender_contract()).schema, max_body_bytes=GATEWAY_MAX_BODY)
    schema = schemathesis.openapi.from_dict(document)

    @schema.parametrize()
    @hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    def test_openapi_document_matches_behaviour(case: Any, gateway: GatewayProcess) -> None:
        """No 5xx and no response outside the documented codes, headers and schemas (Triton up)."""
        assert requests.get(f"{gateway.url}/openapi.json", timeout=5).json() == document
        if "model" in (case.path_parameters or {}):
            case.path_parameters["model"] = MODEL  # a served model, so the whole predict path runs
        if case.headers:
            # A client that asks for a deadline of a few microseconds rightly gets a 504 (tested above).
            case.headers.pop("Inference-Timeout", None)
        case.call_and_validate(base_url=gateway.url, checks=[
            not_a_server_error, status_code_conformance, content_type_conformance,
            response_headers_conformance, response_schema_conformance])

    return test_openapi_document_matches_behaviour


test_openapi_document_matches_behaviour = _schemathesis_test()


class Outage:
    """A TCP forwarder in front of the object store that the test can cut and restore.

    Stopping the shared in-memory object store would wipe every other test's data, so the
    gateway under test reaches the store through this proxy instead.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._open.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)


OUTAGE_S = 30.0


def test_object_store_outage_loses_nothing_and_the_backlog_drains(
        served: dict[str, Any], stack_settings: Settings, object_store: ObjectStore, tmp_path: Path) -> None:
    outage = Outage(stack_settings.s3_port)
    outage.start()
    process = GatewayProcess(free_port(), tmp_path / "spool", tmp_path / "gw.log",
                             gateway_env(stack_settings, MODELOPS_S3_ENDPOINT_URL=f"http://127.0.0.1:{outage.port}"),
                             ("--segment-max-age-s", "1"))
    process.start()
    secret = resolve_secret(stack_settings.feedback_secret, stack_settings.home)
    session = requests.Session()
    acknowledged: list[str] = []

    def backlog() -> float:
        metrics = session.get(f"{process.url}/metrics", timeout=5).text
        return next(float(row.split()[-1]) for row in metrics.splitlines()
                    if row.startswith("modelops_gateway_spool_backlog_bytes "))

    def traffic(seconds: float, tag: str) -> None:
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            assert predict(process, MODEL, good_body(f"u_{k % 50:04d}")).status_code == 200
            token = issue_token(secret, TokenClaims(f"outage-{RUN}-{tag}-{k}", MODEL, 1, "1" * 12, time.time()))
            response = session.post(f"{process.url}/v1/feedback", timeout=5,
                                    json={"feedback_token": token, "action": "skip", "timestamp": time.time()})
            assert response.status_code == 202
            acknowledged.append(token)
            k += 1
            time.sleep(0.05)

    try:
        traffic(2.0, "before")
        outage.stop()
        traffic(OUTAGE_S, "during")
        assert backlog() > 0, "segments wait in the spool while the store is unreachable"
        outage.start()
        traffic(2.0, "after")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and backlog() > 0:
            time.sleep(0.5)
        assert backlog() == 0, "the backlog drains once the store is back"
        found = {r["feedback_token"] for r in _log_rows(object_store, LOG_PREFIXES["feedback"], "feedback_token",
                                                        set(acknowledged))}
        print(f"object store outage: {len(acknowledged)} acknowledged, {len(set(acknowledged) - found)} lost")
        assert found == set(acknowledged)
    finally:
        process.stop()
        outage.stop()


def test_spool_over_its_budget_refuses_new_events_with_503(served: dict[str, Any], stack_settings: Settings,
                                                           tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"  # the object store is down from the start
    process = GatewayProcess(free_port(), tmp_path / "spool", tmp_path / "gw.log",
                             gateway_env(stack_settings, MODELOPS_S3_ENDPOINT_URL=unreachable),
                             ("--spool-budget-bytes", "2000", "--segment-max-age-s", "0.5"))
    process.start()
    try:
        response = predict(process, MODEL, good_body())
        assert response.status_code == 503 and response.json()["error"] == "routes_unavailable"
        secret = resolve_secret(stack_settings.feedback_secret, stack_settings.home)
        statuses: list[int] = []
        deadline = time.monotonic() + 20
        k = 0
        while time.monotonic() < deadline and 503 not in statuses:
            token = issue_token(secret, TokenClaims(f"budget-{RUN}-{k}", MODEL, 1, "1" * 12, time.time()))
            response = requests.post(f"{process.url}/v1/feedback", timeout=5,
                                     json={"feedback_token": token, "action": "click", "timestamp": time.time()})
            statuses.append(response.status_code)
            k += 1
            time.sleep(0.02)
        assert statuses[0] == 202 and statuses[-1] == 503, statuses[-5:]
        assert response.headers["Retry-After"] == "1" and response.json()["error"] == "spool_full"
        assert set(statuses) == {202, 503}
        spooled = sum(p.stat().st_size for p in (tmp_path / "spool").rglob("*") if p.is_file())
        assert spooled > 0, "what was acknowledged stays in the spool"
    finally:
        process.stop()
