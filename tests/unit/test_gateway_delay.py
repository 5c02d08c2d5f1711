"""The delay origin's pure parts: Triton statistics differenced, the split, the origin, Server-Timing."""

from __future__ import annotations

from typing import Any

import pytest

from modelops.gateway.delay import (
    ORIGINS,
    LoopLag,
    TritonCumulative,
    TritonDelays,
    TritonShare,
    origin,
    parse_stats,
    server_timing,
    share_between,
    split,
)


def stats_doc(version: str, queue: tuple[int, int], infer: tuple[int, int], in_out_ns: int = 0) -> dict[str, Any]:
    """A ``/v2/models/m/versions/v/stats`` answer of Triton 2.51's shape."""
    part = {"count": infer[0], "ns": in_out_ns}
    return {"model_stats": [{"name": "m", "version": version, "inference_count": infer[0], "inference_stats": {
        "success": {"count": infer[0], "ns": 1}, "fail": {"count": 0, "ns": 0},
        "queue": {"count": queue[0], "ns": queue[1]}, "compute_input": part,
        "compute_infer": {"count": infer[0], "ns": infer[1]}, "compute_output": part,
        "cache_hit": {"count": 0, "ns": 0}, "cache_miss": {"count": 0, "ns": 0}}}]}


def test_parse_stats_sums_the_three_compute_parts_of_the_asked_version() -> None:
    doc = stats_doc("3", (4, 400), (4, 1000), in_out_ns=50)
    assert parse_stats(doc, 3) == TritonCumulative(queue_count=4, queue_ns=400, compute_count=4, compute_ns=1100)
    assert parse_stats(doc, 2) is None


def test_parse_stats_names_a_malformed_document() -> None:
    with pytest.raises(ValueError, match="not a Triton statistics document"):
        parse_stats({"model_stats": [{"version": "1", "inference_stats": {"queue": {}}}]}, 1)
    with pytest.raises(ValueError, match="not a Triton statistics document"):
        parse_stats({"error": "requested model 'x' is not available"}, 1)


def test_share_is_the_per_request_mean_of_the_interval() -> None:
    before = TritonCumulative(10, 1_000_000, 10, 5_000_000)
    after = TritonCumulative(14, 1_000_000 + 4 * 2_000_000, 14, 5_000_000 + 4 * 30_000_000)
    assert share_between(before, after) == TritonShare(queue_s=pytest.approx(0.002), compute_s=pytest.approx(0.030))


@pytest.mark.parametrize("after", [
    TritonCumulative(10, 1_000_000, 10, 5_000_000),  # nothing finished in between
    TritonCumulative(2, 10, 2, 10),  # the version was reloaded: the counters restarted
])
def test_share_is_none_without_finished_requests_or_after_a_reset(after: TritonCumulative) -> None:
    assert share_between(TritonCumulative(10, 1_000_000, 10, 5_000_000), after) is None


def test_triton_delays_keep_the_newest_interval_that_had_requests() -> None:
    delays = TritonDelays()
    assert delays.observe("m", 1, TritonCumulative(0, 0, 0, 0)) is None
    assert delays.share("m", 1) is None  # one reading is no interval
    delays.observe("m", 1, TritonCumulative(2, 2_000_000, 2, 20_000_000))
    assert delays.share("m", 1) == TritonShare(0.001, 0.010)
    delays.observe("m", 1, TritonCumulative(2, 2_000_000, 2, 20_000_000))  # an idle interval keeps the last means
    assert delays.share("m", 1) == TritonShare(0.001, 0.010)
    assert delays.share("m", 2) is None
    delays.forget("m", 1)
    assert delays.share("m", 1) is None


def test_split_gives_a_lagging_gateway_the_rest_of_the_call() -> None:
    # A 60 ms call of which Triton reports 1 ms queue and 4 ms compute, while the gateway's loop lags 80 ms:
    # the gateway picked the answer up late.
    parts = split(total_s=0.070, features_s=0.002, triton_wall_s=0.060, share=TritonShare(0.001, 0.004),
                  loop_lag_s=0.079)
    # The 55 ms Triton's means leave: lag 79 : queue mean 1 -> 54.3 ms gateway, 0.7 ms more queue.
    assert parts == pytest.approx({"gateway": 0.008 + 0.055 * 79 / 80, "feature_lookup": 0.002,
                                   "triton_queue": 0.001 + 0.055 / 80, "triton_compute": 0.004})
    assert sum(parts.values()) == pytest.approx(0.070)
    assert origin(parts) == "gateway"


def test_split_gives_the_rest_of_a_burst_to_triton_queue() -> None:
    # The last of four requests of a burst to a one-instance 250 ms model: it waited 750 ms, the mean was 375 ms.
    parts = split(total_s=1.002, features_s=0.0005, triton_wall_s=1.0, share=TritonShare(0.375, 0.25),
                  loop_lag_s=0.001)
    # The 375 ms the means leave: lag 1 : queue mean 375 -> 1 ms gateway, 374 ms more queue.
    assert parts == pytest.approx({"gateway": 0.0015 + 0.375 / 376, "feature_lookup": 0.0005,
                                   "triton_queue": 0.375 + 0.375 * 375 / 376, "triton_compute": 0.25})
    assert origin(parts) == "triton_queue"


def test_split_caps_triton_means_by_the_measured_call() -> None:
    # A slow interval's means larger than this (faster) call: queue first, then compute, never more than the call.
    parts = split(total_s=0.012, features_s=0.001, triton_wall_s=0.010, share=TritonShare(0.006, 0.5))
    assert parts == pytest.approx({"gateway": 0.001, "feature_lookup": 0.001, "triton_queue": 0.006,
                                   "triton_compute": 0.004})
    assert origin(parts) == "triton_queue"


def test_split_counts_calls_in_flight_ahead_as_queue_before_the_statistics_do() -> None:
    # The same burst while the newest statistics are those of quiet sequential calls (no queue): the gateway
    # had 3 calls to the version in flight ahead of this one, 3 x 250 ms of queue evidence against a 1 ms lag.
    parts = split(total_s=1.002, features_s=0.0005, triton_wall_s=1.0, share=TritonShare(0.0, 0.25),
                  loop_lag_s=0.001, calls_ahead=3)
    assert parts == pytest.approx({"gateway": 0.0015 + 0.75 / 751, "feature_lookup": 0.0005,
                                   "triton_queue": 0.75 * 750 / 751, "triton_compute": 0.25})
    assert origin(parts) == "triton_queue"
    alone = split(total_s=1.002, features_s=0.0005, triton_wall_s=1.0, share=TritonShare(0.0, 0.25),
                  loop_lag_s=0.001, calls_ahead=0)
    assert origin(alone) == "gateway"  # nothing queued ahead, nothing Triton reports: the gateway was late


def test_split_gives_the_rest_to_the_gateway_when_neither_lags_nor_queues() -> None:
    parts = split(total_s=0.004, features_s=0.0, triton_wall_s=0.003, share=TritonShare(0.0, 0.002))
    assert parts == pytest.approx({"gateway": 0.002, "feature_lookup": 0.0, "triton_queue": 0.0,
                                   "triton_compute": 0.002})


def test_split_without_statistics_counts_the_call_beyond_the_loop_lag_as_compute() -> None:
    parts = split(total_s=0.5, features_s=0.0, triton_wall_s=0.45, share=None)
    assert parts == pytest.approx({"gateway": 0.05, "feature_lookup": 0.0, "triton_queue": 0.0,
                                   "triton_compute": 0.45})
    assert origin(parts) == "triton_compute"
    lagging = split(total_s=0.5, features_s=0.0, triton_wall_s=0.45, share=None, loop_lag_s=0.3)
    assert lagging == pytest.approx({"gateway": 0.35, "feature_lookup": 0.0, "triton_queue": 0.0,
                                     "triton_compute": 0.15})


def test_loop_lag_is_the_largest_recent_probe() -> None:
    lag = LoopLag(window_s=1.0)
    assert lag.current(100.0) == 0.0
    lag.add(100.0, 0.002)
    lag.add(100.5, 0.040)
    lag.add(100.9, -0.001)  # a probe that woke early counts as no lag
    assert lag.current(101.0) == pytest.approx(0.040)
    assert lag.current(101.6) == 0.0  # every probe is older than the window


@pytest.mark.parametrize(("parts", "expected"), [
    ({"gateway": 0.001, "feature_lookup": 0.3, "triton_queue": 0.0, "triton_compute": 0.002}, "feature_lookup"),
    ({"gateway": 0.001, "feature_lookup": 0.0, "triton_queue": 0.2, "triton_compute": 0.1}, "triton_queue"),
    ({"gateway": 0.0, "feature_lookup": 0.0, "triton_queue": 0.0, "triton_compute": 0.0}, "gateway"),
    ({"gateway": 0.004}, "gateway"),  # a request rejected before any lookup
])
def test_origin_is_the_part_with_the_most_time(parts: dict[str, float], expected: str) -> None:
    assert origin(parts) == expected


def test_server_timing_lists_every_origin_in_milliseconds() -> None:
    value = server_timing({"gateway": 0.0012, "feature_lookup": 0.0, "triton_queue": 0.25, "triton_compute": 1.5})
    assert value == ("gateway;dur=1.200, feature_lookup;dur=0.000, triton_queue;dur=250.000, "
                     "triton_compute;dur=1500.000")
    assert [entry.split(";")[0] for entry in value.split(", ")] == list(ORIGINS)


def test_loop_lag_maximum_follows_expiry() -> None:
    lag = LoopLag(window_s=1.0)
    lag.add(100.0, 0.050)
    lag.add(100.4, 0.010)
    lag.add(100.8, 0.030)
    assert lag.current(100.9) == pytest.approx(0.050)
    assert lag.current(101.2) == pytest.approx(0.030)  # the 0.050 probe left the window
    lag.add(101.3, 0.020)
    assert lag.current(101.3) == pytest.approx(0.030)
    assert lag.current(101.85) == pytest.approx(0.020)
