"""bench/scale.py's pure parts: the cluster-vs-local result comparison and the replicas' CPU bound."""

from __future__ import annotations

import math

from bench.scale import _differences, _replica_bound


def test_equal_results_within_float_noise_have_no_differences() -> None:
    local = {"rows": 10, "score": {"ks": 0.125, "mean": 0.1 + 0.2, "p": math.nan}, "features": [{"name": "a"}]}
    cluster = {"rows": 10, "score": {"ks": 0.125, "mean": 0.3, "p": math.nan}, "features": [{"name": "a"}]}
    assert _differences(local, cluster) == []


def test_differences_name_the_path_of_each_mismatch() -> None:
    local = {"rows": 10, "score": {"ks": 0.125}, "features": [{"name": "a", "drifted": False}]}
    cluster = {"rows": 11, "score": {"ks": 0.126}, "features": [{"name": "a", "drifted": True}]}
    assert _differences(local, cluster) == [".rows: 10 != 11", ".score.ks: 0.125 != 0.126",
                                            ".features[0].drifted: False != True"]
    assert _differences({"a": 1}, {"b": 1}) == [": keys ['a'] != ['b']"]
    assert _differences([1, 2], [1]) == [": [1, 2] != [1]"]


def test_replica_bound_from_cpu_per_request() -> None:
    # 500 req/s; cores: client 0.125, gateways 0.5, Triton 0.375 -> 0.25 + 1.0 + 0.75 = 2.0 ms per request
    line = _replica_bound([(500.0, 10.0, 50.0, 0.125, 0.5, 0.375, 2.0, 0.0)])
    assert "client 0.25 ms, gateway 1.00 ms, Triton 0.75 ms = 2.00 ms" in line
    assert "left this bench 1.00 cores" in line and "= 500 req/s" in line
