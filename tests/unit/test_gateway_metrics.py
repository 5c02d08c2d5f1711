"""Prometheus rendering, the rolling score window and the collapse watch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from modelops.documents.routes import Routes, VersionRef
from modelops.gateway.metrics import CollapseWatch, Registry, ScoreWindow, route_weights


def test_render_counters_gauges_and_histograms() -> None:
    registry = Registry()
    requests = registry.counter("gw_requests_total", "Requests.")
    latency = registry.histogram("gw_latency_seconds", "Latency.")
    requests.inc((("model", "rec"), ("version", "3")))
    requests.inc((("model", "rec"), ("version", "3")))
    latency.observe((("model", "rec"),), 0.0007)
    latency.observe((("model", "rec"),), 20.0)
    text = registry.render()
    assert 'gw_requests_total{model="rec",version="3"} 2' in text
    assert 'gw_latency_seconds_bucket{model="rec",le="0.0005"} 0' in text
    assert 'gw_latency_seconds_bucket{model="rec",le="0.001"} 1' in text
    assert 'gw_latency_seconds_bucket{model="rec",le="+Inf"} 2' in text
    assert 'gw_latency_seconds_count{model="rec"} 2' in text
    assert "# TYPE gw_latency_seconds histogram" in text


def test_score_window_matches_numpy_and_forgets_old_seconds() -> None:
    rng = np.random.default_rng(3)
    window = ScoreWindow(seconds=10)
    batches = [rng.random(7) for _ in range(30)]
    for t, scores in enumerate(batches):
        window.add(100.0 + t, len(scores), float(scores.sum()), float((scores**2).sum()), float(scores.max()))
    recent = np.concatenate(batches[-10:])
    n, std, peak = window.stats(129.5)
    assert n == len(recent)
    assert std == pytest.approx(float(recent.std()), rel=1e-9)
    assert peak == pytest.approx(float(recent.max()))
    assert window.stats(500.0)[0] == 0 and math.isnan(window.stats(500.0)[1])


def test_collapse_is_announced_once_per_episode() -> None:
    watch = CollapseWatch(threshold=0.005, hold_s=30, min_scores=10)
    fired = [t for t in range(0, 100) if watch.observe("rec/3", 100, 0.001, float(t))]
    assert fired == [30]
    assert watch.flagged("rec/3")
    assert not watch.observe("rec/3", 100, 0.2, 101.0)  # recovered: the episode ends
    assert not watch.flagged("rec/3")
    again = [t for t in range(200, 260) if watch.observe("rec/3", 100, 0.0, float(t))]
    assert again == [230]


def test_collapse_needs_traffic() -> None:
    watch = CollapseWatch(threshold=0.005, hold_s=0, min_scores=10)
    assert not watch.observe("rec/3", 5, 0.0, 0.0)
    assert watch.observe("rec/3", 10, 0.0, 1.0)


def test_route_weights_split_traffic_and_forget_unrouted_versions() -> None:
    stable, canary = VersionRef(3, "a" * 64), VersionRef(4, "b" * 64)
    split = Routes("rec", 7, stable, canary, 0.25, "", "")
    alone = Routes("other", 2, VersionRef(1, "c" * 64), None, 0.0, "", "")
    assert route_weights([split, alone]) == {
        (("model", "rec"), ("version", "3"), ("variant", "stable")): 0.75,
        (("model", "rec"), ("version", "4"), ("variant", "canary")): 0.25,
        (("model", "other"), ("version", "1"), ("variant", "stable")): 1.0,
    }
    assert route_weights([Routes("rec", 8, canary, None, 0.0, "", "")]) == {
        (("model", "rec"), ("version", "4"), ("variant", "stable")): 1.0}


def test_histogram_bucket_edges() -> None:
    registry = Registry()
    latency = registry.histogram("gw_edge_seconds", "Edges.")
    for value in (0.0005, 0.00051, 0.0, float("nan"), 1e9):
        latency.observe((), value)
    text = registry.render()
    assert 'gw_edge_seconds_bucket{le="0.0005"} 2' in text  # a value on a bound counts in that bucket
    assert 'gw_edge_seconds_bucket{le="0.001"} 3' in text
    assert 'gw_edge_seconds_bucket{le="+Inf"} 5' in text  # NaN and above every bound: +Inf only
