"""X-Delay-Origin against the real stack: a slow Triton, a slow feature store and an overloaded gateway.

Three python-backend Triton models of the gateway tests: ``MID`` computes 30 ms per
request (its idle answers are Triton compute), ``SLOW`` 250 ms. Each slow path is
injected on its own and must flip the origin of a request that is otherwise the same:

* a slow Triton: the ``SLOW`` version (and a burst to it: the requests that waited behind
  others are Triton's queue, as Triton's statistics say);
* a slow feature store: a second gateway whose feature lookup takes 150 ms longer
  (``--drill-feature-delay-ms``; the online lookup is in memory, so it is injected);
* an overloaded gateway: 256 keep-alive connections flood the gateway with requests it
  must parse and validate (they break the contract and never reach Triton), so its
  event loop picks Triton's answers up late: the gateway, not Triton, is named. (A loop
  turn serves every ready connection, so an answer waits for the refusals in between:
  48 connections held it 7-9 ms here once the refusals got cheaper, less than ``MID``'s
  30 ms of compute; 128 held it 40-65 ms.)
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from modelops.config import Settings
from modelops.documents.routes import routes_key, serialize_routes
from modelops.errors import ServingError
from modelops.example.tables import publish_feature_tables
from modelops.gateway.delay import ORIGINS
from modelops.gateway.testing import feature_tables, write_test_model
from modelops.objectstore import ObjectStore
from modelops.serving.triton import TritonClient
from tests.integration.test_gateway import ROOT, GatewayProcess, free_port, gateway_env, good_body, predict, routes_doc

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:8]
MID = f"dlmid_{RUN}"
SLOW = f"dlslow_{RUN}"
MID_S, SLOW_S, FEATURE_DELAY_MS = 0.03, 0.25, 150.0
STATS_POLL_S = 0.2
GATEWAY_ARGS = ("--triton-stats-poll-s", str(STATS_POLL_S), "--routes-poll-s", "0.3", "--max-deadline-ms", "5000",
                "--segment-max-age-s", "1")


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> Iterator[None]:
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, MID, [1], delay_s=MID_S)
    write_test_model(repository, SLOW, [1], delay_s=SLOW_S)
    triton = TritonClient(triton_url)
    for name in (MID, SLOW):
        triton.load(name)
    object_store.ensure_bucket()
    users, items = feature_tables()
    publish_feature_tables(object_store, f"dltest-{RUN}", users, items)
    for name in (MID, SLOW):
        object_store.put_bytes(routes_key(name), serialize_routes(routes_doc(name, 1, 1, None, 0.0)))
    yield
    for name in (MID, SLOW):
        with contextlib.suppress(ServingError):  # best-effort cleanup of a shared stack
            triton.unload(name)
        shutil.rmtree(repository / name, ignore_errors=True)
        object_store.delete(routes_key(name))


def start_gateway(cfg: Settings, base: Path, *extra: str) -> GatewayProcess:
    base.mkdir(parents=True, exist_ok=True)
    return GatewayProcess(free_port(), base / "spool", base / "gateway.log", gateway_env(cfg),
                          (*GATEWAY_ARGS, *extra)).start()


@pytest.fixture(scope="module")
def gateway(served: None, stack_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        GatewayProcess]:
    process = start_gateway(stack_settings, tmp_path_factory.mktemp("delay-gateway"))
    yield process
    process.stop()


def delays(response: requests.Response) -> tuple[str, dict[str, float]]:
    """The answer's X-Delay-Origin and its Server-Timing parts in seconds."""
    parts = {name: float(ms) / 1000.0 for name, ms in re.findall(r"([a-z_]+);dur=([0-9.]+)",
                                                                 response.headers["Server-Timing"])}
    assert list(parts) == list(ORIGINS), response.headers["Server-Timing"]
    return response.headers["X-Delay-Origin"], parts


def scored(gw: GatewayProcess, model: str, k: int) -> tuple[str, dict[str, float]]:
    response = predict(gw, model, good_body(f"u_{k % 60:04d}", n=20))
    assert response.status_code == 200, response.text
    return delays(response)


def origin_count(gw: GatewayProcess, model: str, origin: str) -> int:
    metrics = requests.get(f"{gw.url}/metrics", timeout=10).text
    found = re.search(rf'modelops_gateway_request_duration_by_origin_seconds_count'
                      rf'{{model="{model}",origin="{origin}"}} (\d+)', metrics)
    return int(found.group(1)) if found else 0


def test_an_idle_gateway_names_triton_compute_and_a_slow_triton_too(gateway: GatewayProcess) -> None:
    for k in range(4):
        origin, parts = scored(gateway, MID, k)
        assert origin == "triton_compute", parts
        assert parts["triton_compute"] >= MID_S * 0.5 and parts["triton_queue"] < MID_S / 2, parts
    for k in range(3):
        origin, parts = scored(gateway, SLOW, k)
        assert origin == "triton_compute", parts
        assert parts["triton_compute"] >= SLOW_S * 0.8 and parts["gateway"] < SLOW_S / 2, parts
    assert origin_count(gateway, SLOW, "triton_compute") == 3
    assert origin_count(gateway, MID, "triton_compute") == 4
    metrics = requests.get(f"{gateway.url}/metrics", timeout=10).text
    assert f'modelops_gateway_delay_seconds_count{{model="{SLOW}",origin="triton_queue"}} 3' in metrics


def test_a_burst_to_a_slow_triton_waits_in_triton_queue(gateway: GatewayProcess) -> None:
    # One instance, four requests at once: Triton runs them one after the other, the last waits ~3 x 250 ms.
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda k: scored(gateway, SLOW, 10 + k), range(4)))
    slowest_origin, slowest = max(answers, key=lambda answer: sum(answer[1].values()))
    assert slowest_origin == "triton_queue", answers
    assert slowest["triton_queue"] >= 2 * SLOW_S * 0.9 and slowest["gateway"] < SLOW_S / 2, answers


def test_a_slow_feature_store_names_feature_lookup(served: None, stack_settings: Settings,
                                                   tmp_path: Path) -> None:
    process = start_gateway(stack_settings, tmp_path, "--drill-feature-delay-ms", str(FEATURE_DELAY_MS))
    try:
        # A fresh gateway has no Triton statistics yet: its first calls count as compute less the event
        # loop's lag, which a loaded machine inflates (CI 2026-12-01: 9 ms of MID's 30). Two calls a
        # statistics poll apart (0.2 s) give it Triton's means first, as a gateway in service has them.
        for k in range(2):
            scored(process, MID, 50 + k)
            time.sleep(2 * STATS_POLL_S)
        before = origin_count(process, MID, "feature_lookup")
        for k in range(3):
            origin, parts = scored(process, MID, k)
            assert origin == "feature_lookup", parts
            assert parts["feature_lookup"] >= FEATURE_DELAY_MS / 1000.0 * 0.9, parts
            assert parts["triton_compute"] >= MID_S * 0.5, parts  # Triton's own part is still there
        assert origin_count(process, MID, "feature_lookup") - before == 3
    finally:
        process.stop()


def test_an_overloaded_gateway_names_the_gateway(gateway: GatewayProcess, tmp_path: Path) -> None:
    idle = [scored(gateway, MID, k) for k in range(3)]
    assert all(origin == "triton_compute" for origin, _parts in idle), idle
    body = tmp_path / "flood.json"
    body.write_text(json.dumps({**good_body(n=50), "timestamp": "now"}))  # parsed, validated, refused: 400
    flood = subprocess.Popen(
        [sys.executable, "-m", "tests.support.flood", "--url", gateway.url, "--path",
         f"/v1/models/{MID}/predict", "--body", str(body), "--connections", "256", "--seconds", "60"],
        cwd=ROOT, env=gateway.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "ready"
        loaded = [scored(gateway, MID, k) for k in range(8)]
    finally:
        flood.terminate()
        output, _ = flood.communicate(timeout=30)
    assert re.search(r"answered [1-9]\d{2,}", output), output  # the flood ran: hundreds of refusals at least
    named = [origin for origin, _parts in loaded]
    # Most answers name the gateway (on a starved machine Triton may rightly report some queue time too).
    assert named.count("gateway") >= 5, loaded
    idle_gateway = statistics.median(parts["gateway"] for _origin, parts in idle)
    loaded_gateway = statistics.median(parts["gateway"] for _origin, parts in loaded)
    print(f"overloaded gateway: gateway part median {idle_gateway * 1000:.2f} ms idle, "
          f"{loaded_gateway * 1000:.2f} ms under the flood; origins {named}")
    assert loaded_gateway > max(MID_S, 5 * idle_gateway), (idle, loaded)


def test_errors_say_where_their_time_went(gateway: GatewayProcess) -> None:
    refused = predict(gateway, MID, {**good_body(), "timestamp": "now"})
    assert refused.status_code == 400 and delays(refused)[0] == "gateway"
    late = predict(gateway, SLOW, good_body(), **{"Inference-Timeout": "100"})
    assert late.status_code == 504
    origin, parts = delays(late)
    assert origin in {"triton_compute", "triton_queue"} and parts["triton_compute"] + parts["triton_queue"] > 0.08
    unknown = predict(gateway, f"nosuch_{RUN}", good_body())
    assert unknown.status_code == 404 and delays(unknown)[0] == "gateway"
