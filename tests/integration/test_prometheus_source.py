"""The canary's Prometheus source against a real Prometheus scraping the embedded stack.

A Prometheus (Debian 12's package, unpacked under ``.cache/prometheus``, see
``tests/support/prometheus.py``) scrapes the stack's gateway and Triton every second,
plus a target where nothing listens. A stable version and a canary that fails 30 % of its
requests are served 50/50 through the gateway under generated traffic; one window is
measured by :class:`ScrapeSource` (the exact counter differences at both ends) and by
:class:`PrometheusSource` (PromQL ``increase()`` over the same window), and the two must
tell the same story. Every query the Prometheus source issues must be accepted.

Without the binary (and no way to fetch it) the tests fail when ``CI`` is set and are
skipped otherwise.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from modelops.canary.gates import p99_ms
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.sources import PrometheusSource, ScrapeSource, promql
from modelops.config import Settings
from modelops.objectstore import ObjectStore
from tests.integration import test_canary_release as canary
from tests.integration.test_gateway import GatewayProcess, gateway_env
from tests.support.prometheus import PrometheusServer, PrometheusUnavailable, ScrapeJob, prometheus_binary

pytestmark = pytest.mark.integration

# The module fixtures of the canary release tests: a trained reference model, published features.
trained = canary.trained
features_published = canary.features_published

_BASE = int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000"))
PROMETHEUS_PORT = _BASE + 90
DEAD_PORT = _BASE + 91  # nothing listens here: the "unreachable" job's target is always down
EXTRA_GATEWAY_PORT = _BASE + 92  # a second gateway, started and stopped by a test
INTERVAL_S = 1.0  # scrape interval
WINDOW_S = 24.5  # the measured window: not whole seconds, as when a trigger fires late
SERVED_JOBS = ("modelops-gateway", "triton")


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """The binary, looked for before the stack starts (each test requests it first)."""
    try:
        return prometheus_binary()
    except PrometheusUnavailable as exc:
        reason = f"no Prometheus binary (run `make prometheus` or set MODELOPS_PROMETHEUS_BIN): {exc}"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def prometheus(prometheus_bin: Path, stack_settings: Settings,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    jobs = [ScrapeJob("modelops-gateway", (f"{stack_settings.gateway_url}/metrics",)),
            ScrapeJob("triton", (stack_settings.triton_metrics_url,)),
            ScrapeJob("unreachable", (f"http://127.0.0.1:{DEAD_PORT}/metrics",)),
            ScrapeJob("extra-gateway", (f"http://127.0.0.1:{EXTRA_GATEWAY_PORT}/metrics",))]
    server = PrometheusServer(prometheus_bin, PROMETHEUS_PORT, tmp_path_factory.mktemp("prometheus"), jobs,
                              interval_s=INTERVAL_S)
    with server:
        server.wait_until_up(SERVED_JOBS)
        yield server


@pytest.fixture(scope="module")
def canary_served(stack_settings: Settings, object_store: ObjectStore, mlflow_uri: str, trained: Any,
                  features_published: None) -> dict[str, Any]:
    """A good stable and a canary failing 30 % of its requests, routed 50/50 through the stack's gateway."""
    from modelops.documents.routes import VersionRef, load_routes, routes_key, serialize_routes
    from modelops.registry.mlflow_registry import MlflowRegistry
    from modelops.serving.publisher import publish_version

    model = f"prom_{uuid.uuid4().hex[:6]}"
    stable = canary._serve_stable(stack_settings, object_store, trained, mlflow_uri, model)
    version = canary._register(canary._variant(trained, {"variant": "faulty-errors", "error_rate": 0.3}),
                               mlflow_uri, model)
    MlflowRegistry.from_settings().to_staging(model, version, contract_passed=True, contract_result="passed")
    published = publish_version(model, version)
    routes = replace(load_routes(object_store.get_bytes(routes_key(model))), revision=2,
                     canary=VersionRef(published.triton_version, published.sha256), canary_weight=0.5,
                     updated_at=datetime.now(UTC).isoformat(), updated_by="tests")
    object_store.put_bytes(routes_key(model), serialize_routes(routes))
    return {"model": model, "stable": int(stable["triton_version"]), "canary": published.triton_version}


@dataclass(frozen=True)
class Answer:
    """One /api/v1/query call the Prometheus source made, and how the server answered it."""

    query: str
    http_status: int
    status: str
    error: str
    series: int


def recording_get_json(answers: list[Answer]) -> Any:
    """The source's HTTP GET (real requests), recording each answer; a 4xx body is returned as is."""

    def get(url: str, params: Mapping[str, str]) -> Any:
        response = requests.get(url, params=dict(params), timeout=10)
        body = response.json()
        result = body.get("data", {}).get("result", [])
        answers.append(Answer(params["query"], response.status_code, str(body.get("status")),
                              str(body.get("error", "")), len(result)))
        return body

    return get


def tolerance(count: float, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S) -> float:
    """How far ``increase()`` may be from the exact difference of a counter over the window.

    Prometheus only has the samples scraped inside the window; it extrapolates from the
    first and the last one to the window's ends at the average rate. The exact delta
    differs by what arrived in the partial scrape interval at each end beyond that average:
    at most two intervals' worth of traffic. One more interval, and 3 counts, absorb
    the second-to-second variation of a version's share (each request's version is drawn).
    """
    return 3.0 * interval_s * count / window_s + 3.0


def assert_close(label: str, prometheus: float, exact: float) -> None:
    assert abs(prometheus - exact) <= tolerance(exact), f"{label}: prometheus {prometheus:.1f} vs exact {exact:.1f}"


def _wait_for_both_versions(source: ScrapeSource, served: Mapping[str, Any], timeout_s: float = 60.0) -> None:
    """Until the gateway routes to the canary (routes poll) and both versions have answered and failed."""
    opened = source.open_window(served["model"], 0.0)
    deadline = time.monotonic() + timeout_s
    m: Measurement | None = None
    while time.monotonic() < deadline:
        time.sleep(1.0)
        m = source.measure(served["model"], served["stable"], served["canary"], opened, 1.0)
        if m.stable.requests > 0 and m.canary.requests > 0 and m.canary.errors > 0:
            return
    raise AssertionError(f"traffic never reached both versions: {m}")


def test_prometheus_measures_the_window_as_the_scrape_source_does(
    prometheus_bin: Path, prometheus: PrometheusServer, canary_served: dict[str, Any], stack_settings: Settings,
) -> None:
    model, stable, canary_v = canary_served["model"], canary_served["stable"], canary_served["canary"]
    scrape = ScrapeSource([f"{stack_settings.gateway_url}/metrics"], stack_settings.triton_metrics_url)
    answers: list[Answer] = []
    source = PrometheusSource(prometheus.url, get_json=recording_get_json(answers),
                              up_selector=f'job=~"{"|".join(SERVED_JOBS)}"')
    with canary.Traffic(stack_settings, model):
        _wait_for_both_versions(scrape, canary_served)
        # increase() starts a series at its first sample: let Prometheus see every series before t0.
        time.sleep(3 * INTERVAL_S)
        t0 = time.time()
        scrape_opened = scrape.open_window(model, t0)
        prom_opened = source.open_window(model, t0)
        t1 = t0 + WINDOW_S
        time.sleep(max(0.0, t1 - time.time()))
        exact = scrape.measure(model, stable, canary_v, scrape_opened, t1)
    time.sleep(2 * INTERVAL_S)  # the scrapes stamped before t1 are stored
    measured = source.measure(model, stable, canary_v, prom_opened, t1)

    # Every query was accepted and answered with data (only "down" is empty: the served targets are up).
    expected = promql(model, (stable, canary_v), WINDOW_S, source.up_selector)
    assert "[24500ms]" in expected["requests"]  # the window as opened, not rounded to whole seconds
    assert sorted(a.query for a in answers) == sorted(expected.values())
    rejected = [a for a in answers if a.http_status != 200 or a.status != "success"]
    assert rejected == [], rejected
    empty = {name for name, q in expected.items() for a in answers if a.query == q and a.series == 0}
    assert empty == {"down"}, answers

    assert exact.unreachable == () and measured.unreachable == ()
    for label, prom, scraped in (("stable", measured.stable, exact.stable), ("canary", measured.canary, exact.canary)):
        _compare(label, prom, scraped)
    # The same verdict: the canary fails about 30 % of its requests, the stable none.
    for m in (exact, measured):
        assert m.canary.error_rate > 0.15 and m.stable.error_rate < 0.05, m
        assert m.canary.error_rate - m.stable.error_rate > 0.1, m
    assert measured.canary.error_rate == pytest.approx(exact.canary.error_rate, abs=0.05)
    print(f"\nwindow {WINDOW_S} s: exact {exact.to_dict()}\nprometheus {measured.to_dict()}")


def _compare(label: str, prom: VersionWindow, scraped: VersionWindow) -> None:
    assert scraped.requests > 5 * WINDOW_S, f"{label}: too little traffic for a comparison: {scraped}"
    assert_close(f"{label} requests", prom.requests, scraped.requests)
    assert_close(f"{label} errors", prom.errors, scraped.errors)
    prom_buckets, scraped_buckets = dict(prom.latency_buckets), dict(scraped.latency_buckets)
    assert set(prom_buckets) == set(scraped_buckets) and math.inf in prom_buckets
    for bound, count in scraped_buckets.items():
        assert_close(f"{label} latency bucket le={bound}", prom_buckets[bound], count)
    p99_prom, p99_exact = p99_ms(prom), p99_ms(scraped)
    assert 0 < p99_exact < 10_000 and 0 < p99_prom < 10_000, (p99_prom, p99_exact)
    assert 1 / 3 <= p99_prom / p99_exact <= 3, f"{label} p99: prometheus {p99_prom:.1f} ms vs {p99_exact:.1f} ms"
    # A 60 s rolling gauge: Prometheus' last sample is at most one interval older than the scrape at t1.
    assert scraped.score_std > 0.005
    assert prom.score_std == pytest.approx(scraped.score_std, rel=0.1), label
    assert set(prom.feedback) == set(scraped.feedback) and scraped.feedback, (prom.feedback, scraped.feedback)
    for action, count in scraped.feedback.items():
        assert_close(f"{label} feedback {action}", prom.feedback[action], count)


def test_a_target_prometheus_cannot_scrape_is_reported_unreachable(
    prometheus_bin: Path, prometheus: PrometheusServer, canary_served: dict[str, Any], stack_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A gateway that served the model and stopped is down; a target never serving it counts only when selected."""
    model, stable, canary_v = canary_served["model"], canary_served["stable"], canary_served["canary"]
    dead, stopped = f"127.0.0.1:{DEAD_PORT}", f"127.0.0.1:{EXTRA_GATEWAY_PORT}"
    base = tmp_path_factory.mktemp("extra-gateway")
    extra = GatewayProcess(EXTRA_GATEWAY_PORT, base / "spool", base / "gateway.log", gateway_env(stack_settings),
                           ("--routes-poll-s", "0.3"))
    extra.start()
    try:
        with canary.Traffic(replace(stack_settings, gateway_port=EXTRA_GATEWAY_PORT), model, rate=10.0):
            time.sleep(4 * INTERVAL_S)  # scraped while serving the model
        prometheus.wait_until_up(["extra-gateway"])
    finally:
        extra.stop()
    time.sleep(3 * INTERVAL_S)  # failed scrapes of the stopped gateway
    assert prometheus.target_health()["extra-gateway"] == ["down"]
    assert prometheus.target_health()["unreachable"] == ["down"]
    now = time.time()
    cases = {
        # No selector: the targets that exported the model's series (the stopped gateway), not the dead one.
        "": (stopped,),
        f'job=~"{"|".join(SERVED_JOBS)}|unreachable|extra-gateway"': (dead, stopped),
        f'job=~"{"|".join(SERVED_JOBS)}"': (),
    }
    for selector, down in cases.items():
        answers: list[Answer] = []
        source = PrometheusSource(prometheus.url, get_json=recording_get_json(answers), up_selector=selector)
        m = source.measure(model, stable, canary_v, source.open_window(model, now - 10.2), now)
        assert m.unreachable == down, (selector, m.unreachable, answers)
        assert answers and all(a.http_status == 200 and a.status == "success" for a in answers), answers
    # Prometheus itself unreachable: one entry naming it, nothing raised.
    gone = PrometheusSource(f"http://127.0.0.1:{DEAD_PORT}")
    assert gone.measure(model, stable, canary_v, gone.open_window(model, now - 10), now).unreachable == (
        f"prometheus http://127.0.0.1:{DEAD_PORT}",)
