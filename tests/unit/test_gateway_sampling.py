"""Scored-sample selection: a share of the requests, at most max_per_s a second."""

from __future__ import annotations

import pytest

from modelops.gateway.logs.sampling import ScoredSampling, sampled


def _run(sampling: ScoredSampling, rate_per_s: float, seconds: float, start: float = 0.0) -> tuple[int, int]:
    """(requests, logged) for requests arriving evenly at ``rate_per_s`` for ``seconds``."""
    n = int(rate_per_s * seconds)
    logged = sum(sampling.take(f"req-{start}-{k}", start + k / rate_per_s) for k in range(n))
    return n, logged


def test_below_the_cap_every_request_is_logged_and_above_it_the_cap_a_second() -> None:
    sampling = ScoredSampling(1.0, 200)
    assert _run(sampling, 150, 10) == (1500, 1500)
    n, logged = _run(sampling, 2000, 10, start=10.0)
    assert n == 20000 and 10 * 200 <= logged <= 10 * 200 + 200 + 1  # one second's burst on top at most
    assert sampling.current == pytest.approx(0.1, abs=0.01)  # the metric: the share logged lately
    n, logged = _run(sampling, 50, 4, start=30.0)  # the load is gone: back to every request
    assert logged == n


def test_the_share_is_a_deterministic_hash_draw_and_the_cap_applies_on_top() -> None:
    ids = [f"r{k}" for k in range(20000)]
    chosen = [i for i in ids if sampled(i, 0.25)]
    assert 0.23 < len(chosen) / len(ids) < 0.27
    assert chosen == [i for i in ids if sampled(i, 0.25)]  # the same request ids, the same answer
    sampling = ScoredSampling(0.25, 0)  # no cap: exactly the hash draw
    assert [i for k, i in enumerate(ids) if sampling.take(i, k / 1000)] == chosen
    capped = ScoredSampling(0.25, 100)
    logged = [i for k, i in enumerate(ids) if capped.take(i, k / 1000)]  # 1000 requests/s for 20 s
    assert set(logged) <= set(chosen) and 20 * 100 <= len(logged) <= 20 * 100 + 101


def test_a_burst_after_a_flood_is_logged_once_the_bucket_refills() -> None:
    sampling = ScoredSampling(1.0, 200)
    _run(sampling, 5000, 2)  # the bucket is empty
    assert [sampling.take(f"slow-{k}", 2.0 + 0.01 * (k + 1)) for k in range(5)] == [True] * 5  # 2 tokens / 10 ms


@pytest.mark.parametrize(("share", "cap", "message"), [
    (1.5, 200, "share: must be between 0 and 1, got 1.5"),
    (1.0, -1, "max_per_s: must be 0 (no cap) or positive, got -1"),
])
def test_bad_settings_are_refused(share: float, cap: float, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ScoredSampling(share, cap)
