"""Metrics sources: text parser, counter differencing across resets, scrape and Prometheus adapters.

Samples in ``tests/unit/data``: ``canary_*_real_t0/t1.txt`` are real captures of a gateway
and Triton around 120 predictions (taken by ``tests/integration/test_canary_metrics.py``
with ``MODELOPS_CANARY_CAPTURE``); ``canary_triton_real.txt`` is a real capture of Triton
2.51's ``/metrics`` (embedded stack); ``canary_triton_t0/t1.txt`` are that capture with
the ``recommender`` counts edited into a window in which version 1's counters reset;
``canary_gateway_*.txt`` were rendered by the gateway's own renderer
(``modelops.gateway.metrics.Registry``) with the gateway's metric families: gateway a
runs through the window, gateway b restarts inside it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modelops.canary.gates import p99_ms
from modelops.canary.promtext import parse, parse_series
from modelops.canary.sources import (
    PrometheusSource,
    ScrapeSource,
    Snapshot,
    counter_delta,
    deltas,
    keep,
    measure_snapshots,
    promql,
)
from modelops.errors import ContractError

DATA = Path(__file__).parent / "data"
GW_A, GW_B, TRITON = "http://127.0.0.1:8400/metrics", "http://127.0.0.1:8401/metrics", "http://127.0.0.1:8302/metrics"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_parse_real_triton_capture() -> None:
    series = parse_series(text("canary_triton_real.txt"))
    assert series[("nv_inference_request_success", (("model", "recommender"), ("version", "1")))] == 2.0
    key = ("nv_inference_request_failure", (("model", "recommender"), ("reason", "BACKEND"), ("version", "1")))
    assert series[key] == 0.0
    assert any(name == "nv_cpu_utilization" for name, _ in series)


def test_parse_edge_cases() -> None:
    doc = ('# HELP x help with "quotes"\n# TYPE x counter\n'
           'x{a="q\\"uote",b="back\\\\slash",c="new\\nline",} 3 1700000000000\n'
           "plain 1.5e-3\n"
           'g{le="+Inf"} +Inf\nh NaN\nk{v="a b"} -Inf\n\n')
    samples = list(parse(doc))
    assert samples[0].labels == (("a", 'q"uote'), ("b", "back\\slash"), ("c", "new\nline"))
    assert samples[0].value == 3.0 and samples[0].label("a") == 'q"uote'
    assert samples[1].name == "plain" and samples[1].value == pytest.approx(0.0015)
    assert samples[2].value == math.inf and math.isnan(samples[3].value) and samples[4].value == -math.inf
    assert samples[4].labels == (("v", "a b"),)
    with pytest.raises(ContractError, match="line 1"):
        list(parse("x{a=1} 3"))
    with pytest.raises(ContractError, match="not a number"):
        list(parse("x{a=\"1\"} three"))
    with pytest.raises(ContractError, match="expected"):
        list(parse("lonely"))


@pytest.mark.parametrize(("before", "after", "delta"), [
    (10.0, 15.0, 5.0),
    (10.0, 10.0, 0.0),
    (10.0, 3.0, 3.0),  # reset: 3 since the restart
    (None, 4.0, 4.0),  # new series (a version loaded inside the window)
    (math.nan, 4.0, 4.0),
])
def test_counter_delta(before: float | None, after: float, delta: float) -> None:
    assert counter_delta(before, after) == delta


def test_histogram_reset_is_judged_on_count() -> None:
    h = "lat_bucket"
    before = {(h, (("le", "0.1"),)): 50.0, (h, (("le", "+Inf"),)): 100.0, ("lat_count", ()): 100.0}
    # after a restart: 60 observations, 5 of them fast; bucket 0.1 alone did not go down (50 -> 55)
    after = {(h, (("le", "0.1"),)): 55.0, (h, (("le", "+Inf"),)): 60.0, ("lat_count", ()): 60.0}
    d = deltas(before, after)
    assert d[(h, (("le", "0.1"),))] == 55.0 and d[(h, (("le", "+Inf"),))] == 60.0


def snapshots() -> tuple[Snapshot, Snapshot]:
    def snap(at: float, a: str, b: str, t: str) -> Snapshot:
        return Snapshot(at, {url: keep(((s.key, s.value) for s in parse(text(name))), "recommender")
                             for url, name in ((GW_A, a), (GW_B, b), (TRITON, t))})
    return (snap(100.0, "canary_gateway_a0.txt", "canary_gateway_b0.txt", "canary_triton_t0.txt"),
            snap(110.0, "canary_gateway_a1.txt", "canary_gateway_b1.txt", "canary_triton_t1.txt"))


def test_measure_from_recorded_samples_across_resets() -> None:
    before, after = snapshots()
    m = measure_snapshots(before, after, "recommender", stable_version=1, canary_version=2, triton_url=TRITON)
    assert (m.window_start, m.window_end, m.unreachable) == (100.0, 110.0, ())
    # answered: a +950 / +50; b restarted: 800 / 10. Triton: v1 failures reset 3 -> 1; v2 0 -> 9.
    assert (m.stable.requests, m.stable.errors) == (1751.0, 1.0)
    assert (m.canary.requests, m.canary.errors) == (69.0, 9.0)
    # canary latency: a adds 20 fast + 30 at 0.7 s, b (restarted) 10 at 0.7 s
    buckets = dict(m.canary.latency_buckets)
    assert buckets[0.025] == 20.0 and buckets[1.0] == 60.0 and buckets[math.inf] == 60.0
    assert 500.0 < p99_ms(m.canary) <= 1000.0
    assert p99_ms(m.stable) < 250.0
    assert m.canary.score_std == 0.0004 and m.stable.score_std == 0.108  # NaN on gateway b ignored
    assert m.canary.feedback == {"click": 2.0, "skip": 20.0}
    assert m.stable.feedback == {"click": 50.0, "skip": 450.0}


def test_version_labelled_gateway_errors_count_once() -> None:
    def doc(ok: int, upstream: int, timeout: int) -> str:
        return (f'modelops_gateway_requests_total{{model="m",version="2",code="200"}} {ok}\n'
                f'modelops_gateway_errors_total{{model="m",version="2",class="upstream"}} {upstream}\n'
                f'modelops_gateway_errors_total{{model="m",version="2",class="timeout"}} {timeout}\n'
                f'modelops_gateway_errors_total{{model="m",version="2",class="contract"}} 99\n')
    triton = 'nv_inference_request_failure{model="m",reason="BACKEND",version="2"} %d\n'
    pages = {GW_A: [doc(0, 0, 0), doc(100, 6, 4)], TRITON: [triton % 0, triton % 6]}
    source = ScrapeSource([GW_A], TRITON, fetch=lambda url: pages[url].pop(0))
    opened = json.loads(json.dumps(source.open_window("m", 0.0)))  # the marker survives persistence
    m = source.measure("m", 1, 2, opened, 5.0)
    assert m.canary.errors == 10.0  # max(6 upstream + 4 timeout, 6 Triton), contract errors excluded
    assert m.canary.requests == 110.0


def test_unreachable_target_is_listed_not_raised() -> None:
    calls = {"n": 0}

    def fetch(url: str) -> str:
        calls["n"] += 1
        if url == GW_B and calls["n"] > 3:
            raise ConnectionError("refused")
        return {GW_A: text("canary_gateway_a0.txt"), GW_B: text("canary_gateway_b0.txt"),
                TRITON: text("canary_triton_t0.txt")}[url]

    source = ScrapeSource([GW_A, GW_B], TRITON, fetch=fetch)
    opened = source.open_window("recommender", 0.0)
    m = source.measure("recommender", 1, 2, opened, 10.0)
    assert m.unreachable == (GW_B,)


def test_triton_unreachable_leaves_unlabelled_errors_unmeasured() -> None:
    def fetch(url: str) -> str:
        if url == TRITON:
            raise ConnectionError("down")
        return text("canary_gateway_a0.txt")

    source = ScrapeSource([GW_A], TRITON, fetch=fetch)
    m = source.measure("recommender", 1, 2, source.open_window("recommender", 0.0), 10.0)
    assert m.unreachable == (TRITON,)
    assert math.isnan(m.canary.errors) and math.isnan(m.canary.requests)


def test_snapshot_json_round_trip() -> None:
    before, _ = snapshots()
    restored = Snapshot.from_dict(json.loads(json.dumps(before.to_dict())))
    assert restored.at == before.at and set(restored.targets) == set(before.targets)
    assert restored.targets[TRITON] == before.targets[TRITON]
    assert not any(name.startswith("nv_cpu") for name, _ in restored.targets[TRITON] or {})


class FakePrometheus:
    """Answers /api/v1/query from canned vectors, keyed by the purpose of the query."""

    def __init__(self, vectors: Mapping[str, list[tuple[dict[str, str], float]]], fail: bool = False) -> None:
        self.vectors = vectors
        self.fail = fail
        self.seen: list[Mapping[str, str]] = []

    def __call__(self, url: str, params: Mapping[str, str]) -> Any:
        assert url == "http://prom:9090/api/v1/query"
        self.seen.append(params)
        if self.fail:
            raise ConnectionError("refused")
        queries = promql("recommender", (1, 2), 10, 'job="gw"')
        purpose = next(k for k, q in queries.items() if q == params["query"])
        result = [{"metric": labels, "value": [float(params["time"]), str(value)]}
                  for labels, value in self.vectors.get(purpose, [])]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_prometheus_source_builds_the_measurement() -> None:
    fake = FakePrometheus({
        "requests": [({"version": "1"}, 1000.0), ({"version": "2"}, 95.0)],
        "errors": [({"version": "2"}, 5.0)],
        "triton_failures": [({"version": "2"}, 4.0), ({"version": "1"}, 1.0)],
        "buckets": [({"version": "2", "le": "0.025"}, 50.0), ({"version": "2", "le": "+Inf"}, 100.0),
                    ({"version": "1", "le": "0.025"}, 1001.0), ({"version": "1", "le": "+Inf"}, 1001.0)],
        "std": [({"version": "2"}, 0.05), ({"version": "1"}, float("nan"))],
        "feedback": [({"version": "2", "action": "click"}, 7.0)],
    })
    source = PrometheusSource("http://prom:9090/", get_json=fake, up_selector='job="gw"')
    m = source.measure("recommender", 1, 2, source.open_window("recommender", 100.0), 110.0)
    assert (m.canary.requests, m.canary.errors) == (100.0, 5.0)
    assert (m.stable.requests, m.stable.errors) == (1001.0, 1.0)
    assert dict(m.canary.latency_buckets) == {0.025: 50.0, math.inf: 100.0}
    assert m.canary.score_std == 0.05 and math.isnan(m.stable.score_std)
    assert m.canary.feedback == {"click": 7.0} and m.unreachable == ()
    assert {p["time"] for p in fake.seen} == {"110.000"}
    assert any("increase(modelops_gateway_requests_total{" in p["query"] and "[10s]" in p["query"] for p in fake.seen)


def test_prometheus_down_target_and_outage() -> None:
    fake = FakePrometheus({"down": [({"instance": "gw-2:8400"}, 0.0)], "requests": [({"version": "1"}, 5.0)]})
    source = PrometheusSource("http://prom:9090", get_json=fake, up_selector='job="gw"')
    m = source.measure("recommender", 1, 2, {"at": 100.0}, 110.0)
    assert m.unreachable == ("gw-2:8400",)
    assert math.isnan(m.canary.requests)  # no canary series at all: not measured, not zero
    outage = PrometheusSource("http://prom:9090", get_json=FakePrometheus({}, fail=True))
    m = outage.measure("recommender", 1, 2, {"at": 100.0}, 110.0)
    assert m.unreachable == ("prometheus http://prom:9090",)


def test_measure_from_a_real_gateway_and_triton_capture() -> None:
    """Captured by tests/integration/test_canary_metrics.py: 120 predictions, 50 on v1, 70 on v2."""
    model = "canarym_835a9df9"

    def snap(at: float, gateway: str, triton: str) -> Snapshot:
        return Snapshot(at, {url: keep(((s.key, s.value) for s in parse(text(name))), model)
                             for url, name in ((GW_A, gateway), (TRITON, triton))})

    before = snap(0.0, "canary_gateway_real_t0.txt", "canary_triton_real_t0.txt")
    after = snap(10.0, "canary_gateway_real_t1.txt", "canary_triton_real_t1.txt")
    m = measure_snapshots(before, after, model, stable_version=1, canary_version=2, triton_url=TRITON)
    assert (m.stable.requests, m.canary.requests) == (50.0, 70.0)
    assert (m.stable.errors, m.canary.errors) == (0.0, 0.0)
    assert dict(m.canary.latency_buckets)[math.inf] == 70.0
    assert 0.0 < p99_ms(m.stable) < 1000.0
    assert m.stable.score_std == pytest.approx(0.1069013754911906)


def test_latency_gate_reads_online_answers_only() -> None:
    """Precomputed answers (only the stable version has snapshots) stay out of the canary's p99."""
    def doc(fast: int, slow: int) -> str:
        lines = []
        for source, le_fast, n in (("precomputed", fast, fast), ("online", 0, slow)):
            for le in ("0.005", "0.1", "+Inf"):
                value = le_fast if le == "0.005" else n
                lines.append(f'modelops_gateway_request_duration_seconds_bucket'
                             f'{{model="m",version="1",source="{source}",le="{le}"}} {value}')
        # an older gateway's series without the label counts as online
        for le in ("0.1", "+Inf"):
            lines.append(f'modelops_gateway_request_duration_seconds_bucket{{model="m",version="2",le="{le}"}} {slow}')
        return "\n".join(lines) + "\n"
    pages = {GW_A: [doc(0, 0), doc(990, 10)], TRITON: ["", ""]}
    source = ScrapeSource([GW_A], TRITON, fetch=lambda url: pages[url].pop(0))
    m = source.measure("m", 1, 2, source.open_window("m", 0.0), 5.0)
    assert dict(m.stable.latency_buckets) == {0.005: 0.0, 0.1: 10.0, math.inf: 10.0}
    assert p99_ms(m.stable) > 5.0  # 990 precomputed answers at < 5 ms would have made it < 5 ms
    assert dict(m.canary.latency_buckets) == {0.1: 10.0, math.inf: 10.0}
    assert 'source!="precomputed"' in promql("m", (1, 2), 10)["buckets"]


def test_triton_failures_are_summed_over_every_server() -> None:
    """Several Triton servers behind the gateways: a version's Triton failures are those of all of them."""
    t1, t2 = "http://10.0.0.1:8002/metrics", "http://10.0.0.2:8002/metrics"
    gateway = ('modelops_gateway_requests_total{model="m",version="2",code="200"} %d\n'
               'modelops_gateway_errors_total{model="m",version="2",class="timeout"} 1\n')
    triton = 'nv_inference_request_failure{model="m",reason="BACKEND",version="2"} %d\n'
    pages = {GW_A: [gateway % 0, gateway % 90], t1: [triton % 10, triton % 14], t2: [triton % 0, triton % 5]}
    source = ScrapeSource([GW_A], [t1, t2], fetch=lambda url: pages[url].pop(0))
    m = source.measure("m", 1, 2, source.open_window("m", 0.0), 5.0)
    assert m.canary.errors == 9.0  # 4 on one server + 5 on the other, more than the gateway's 0 new errors
    assert m.canary.requests == 99.0 and m.unreachable == ()
    # one server unreadable at the end: listed (the window is judged with what the others said)
    pages = {GW_A: [gateway % 0, gateway % 90], t1: [triton % 10, triton % 14], t2: [triton % 0]}

    def fetch(url: str) -> str:
        if not pages[url]:
            raise ConnectionError("refused")
        return pages[url].pop(0)

    source = ScrapeSource([GW_A], [t1, t2], fetch=fetch)
    m = source.measure("m", 1, 2, source.open_window("m", 0.0), 5.0)
    assert m.unreachable == (t2,) and m.canary.errors == 4.0
