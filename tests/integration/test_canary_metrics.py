"""The canary's scrape source against a real gateway and Triton of the embedded stack.

Sends predictions split 50/50 between two versions, then checks that the per-version
counts the source derives from ``/metrics`` differences equal what was sent, across a
gateway restart too (a counter reset, never a negative count). Set
``MODELOPS_CANARY_CAPTURE=<dir>`` to keep the scraped ``/metrics`` texts (samples for the
unit tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from modelops.canary.gates import p99_ms
from modelops.canary.sources import ScrapeSource
from modelops.config import Settings
from modelops.documents.routes import choose_version, routes_key, serialize_routes
from modelops.errors import ServingError
from modelops.example.tables import publish_feature_tables
from modelops.gateway.testing import feature_tables, write_test_model
from modelops.objectstore import ObjectStore
from modelops.serving.triton import TritonClient
from tests.integration.test_gateway import GatewayProcess, free_port, gateway_env, routes_doc

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:8]
MODEL = f"canarym_{RUN}"


@pytest.fixture(scope="module")
def served(stack_settings: Settings, object_store: ObjectStore, triton_url: str) -> Iterator[TritonClient]:
    repository = stack_settings.home / "triton" / "repository"
    write_test_model(repository, MODEL, [1, 2])
    triton = TritonClient(triton_url)
    triton.load(MODEL)
    object_store.ensure_bucket()
    users, items = feature_tables()
    publish_feature_tables(object_store, f"canarym-{RUN}", users, items)
    object_store.put_bytes(routes_key(MODEL), serialize_routes(routes_doc(MODEL, 1, 1, 2, 0.5)))
    yield triton
    with contextlib.suppress(ServingError):
        triton.unload(MODEL)
    shutil.rmtree(repository / MODEL, ignore_errors=True)
    object_store.delete(routes_key(MODEL))


@pytest.fixture(scope="module")
def gateway(served: TritonClient, stack_settings: Settings,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    base = tmp_path_factory.mktemp("canary-gateway")
    process = GatewayProcess(free_port(), base / "spool", base / "gateway.log", gateway_env(stack_settings),
                             ("--routes-poll-s", "0.3", "--segment-max-age-s", "1"))
    process.start()
    yield process
    process.stop()


def send(gw: GatewayProcess, users: range, latencies: dict[int, list[float]] | None = None) -> dict[int, int]:
    """Predictions for the given users; returns the count per served version.

    ``latencies`` (when given) gets each answer's round trip in seconds, by served version.
    """
    counts: dict[int, int] = {}
    routes = routes_doc(MODEL, 1, 1, 2, 0.5)
    for k in users:
        user = f"u_{k % 60:04d}"
        body: dict[str, Any] = {"user_id": user, "item_ids": [f"i_{(k + j) % 120:04d}" for j in range(4)],
                                "timestamp": 1764460800}
        started = time.perf_counter()
        response = requests.post(f"{gw.url}/v1/models/{MODEL}/predict", json=body, timeout=10)
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.text
        version = int(response.json()["model_version"])
        if latencies is not None:
            latencies.setdefault(version, []).append(elapsed)
        assert version == choose_version(routes, user).version
        counts[version] = counts.get(version, 0) + 1
    return counts


def capture(source: ScrapeSource, name: str) -> None:
    folder = os.environ.get("MODELOPS_CANARY_CAPTURE")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for i, url in enumerate((*source.gateway_urls, source.triton_url)):
            Path(folder, f"{name}_{i}.txt").write_text(source.fetch(url))


def test_scraped_counts_match_the_requests_sent(gateway: GatewayProcess, stack_settings: Settings) -> None:
    source = ScrapeSource([f"{gateway.url}/metrics"], stack_settings.triton_metrics_url)
    opened = source.open_window(MODEL, 0.0)
    capture(source, "t0")
    latencies: dict[int, list[float]] = {}
    sent = send(gateway, range(120), latencies)
    capture(source, "t1")
    m = source.measure(MODEL, 1, 2, opened, 10.0)
    assert m.unreachable == ()
    assert set(sent) == {1, 2}
    assert (m.stable.requests, m.canary.requests) == (sent[1], sent[2])
    assert (m.stable.errors, m.canary.errors) == (0.0, 0.0)
    assert dict(m.canary.latency_buckets)[float("inf")] == sent[2]
    # The gateway's own time of a request is within the client's round trip, so the p99 read from the
    # scraped histogram lies below the bound of the bucket that holds the client's p99 (bucket_quantile
    # interpolates inside the bucket of the 99th rank), and above nothing but zero.
    bounds = sorted(bound for bound, _count in m.canary.latency_buckets)
    client_p99 = float(np.quantile(latencies[2], 0.99, method="higher"))
    ceiling = next(bound for bound in bounds if bound >= client_p99)
    assert 0.0 < p99_ms(m.canary) <= ceiling * 1000.0, (p99_ms(m.canary), client_p99, bounds)
    assert m.canary.score_std > 0.005 and m.stable.score_std > 0.005


def test_gateway_restart_inside_the_window_is_a_reset(gateway: GatewayProcess, stack_settings: Settings) -> None:
    source = ScrapeSource([f"{gateway.url}/metrics"], stack_settings.triton_metrics_url)
    send(gateway, range(30))
    opened = source.open_window(MODEL, 0.0)
    send(gateway, range(30, 60))
    gateway.stop()
    gateway.start()
    after_restart = send(gateway, range(60, 80))
    m = source.measure(MODEL, 1, 2, opened, 10.0)
    assert m.unreachable == ()
    # what was sent before the restart is lost with the old process; never a negative count
    assert (m.stable.requests, m.canary.requests) == (after_restart.get(1, 0), after_restart.get(2, 0))


def test_an_unreachable_gateway_is_reported(stack_settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    source = ScrapeSource([dead], stack_settings.triton_metrics_url)
    m = source.measure(MODEL, 1, 2, source.open_window(MODEL, 0.0), 1.0)
    assert m.unreachable == (dead,)
