"""The gateway's pool of Triton servers: choice, the one retry elsewhere, health, summed statistics.

The servers are stand-in clients (the pool's own logic is under test; the HTTP client has its own tests
and the compose test kills a real Triton under traffic).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from modelops.gateway.delay import parse_stats
from modelops.gateway.triton.inference import (
    TritonFailed,
    TritonUnavailable,
    TritonUnreachable,
    VersionNotServed,
    _parse_scores,
)
from modelops.gateway.triton.pool import TritonPool, attempt_order, merge_stats, retryable

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


def test_attempt_order_rotates_over_healthy_servers_and_retries_on_the_next() -> None:
    servers, healthy = (A, B, C), {A, B, C}
    firsts = [attempt_order(servers, healthy, set(), turn)[0] for turn in range(6)]
    assert firsts == [A, B, C, A, B, C]
    assert attempt_order(servers, healthy, set(), 1) == (B, C)  # one retry, on another server
    assert attempt_order(servers, {A, C}, set(), 1) == (C, A)  # B is not healthy: never first
    assert attempt_order(servers, healthy, {A}, 0) == (B, C)  # A lacks the version


def test_attempt_order_without_alternatives() -> None:
    assert attempt_order((A,), {A}, set(), 5) == (A,)  # a pool of one: nowhere to retry
    assert attempt_order((A,), set(), set(), 5) == (A,)  # unhealthy: still tried (its own error surfaces)
    assert attempt_order((A, B), set(), set(), 0) == (A, B)  # none healthy: every server, in turn
    assert attempt_order((A, B), {A}, set(), 0) == (A, B)  # the retry may go to an unhealthy one
    assert attempt_order((A, B), {A}, {A}, 0) == (A, B)  # the only healthy one lacks it: still first
    assert attempt_order((), set(), set(), 0) == ()


def test_only_server_failures_are_retryable() -> None:
    assert retryable(TritonUnreachable("refused")) and retryable(VersionNotServed("not loaded"))
    assert not retryable(TritonFailed("HTTP 400: bad input")) and not retryable(TritonUnavailable("?"))
    assert not retryable(TimeoutError())


def _refusal(status: int, message: str) -> BaseException:
    with pytest.raises(Exception) as caught:
        _parse_scores(status, {}, json.dumps({"error": message}).encode(), "m", 7, 1)
    return caught.value


def test_triton_answers_are_classified_for_the_retry() -> None:
    assert isinstance(_refusal(400, "Request for unknown model: 'm' version 7 is not found"), VersionNotServed)
    assert isinstance(_refusal(503, "Server is shutting down"), TritonUnreachable)
    assert type(_refusal(400, "unexpected shape for input 'features'")) is TritonFailed  # the request's fault
    assert type(_refusal(500, "division by zero")) is TritonFailed  # the model's own failure


class FakeServer:
    """Stands in for one TritonHTTP: answers scores, or raises the error it is given."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fail: BaseException | None = None
        self.is_ready = True
        self.calls = 0
        self.stats: dict[str, Any] = {}
        self.closed = False

    async def infer_scores(self, model: str, version: int, features: Any) -> Any:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return np.full(len(features), float(self.url[-6]), dtype=np.float32)  # which server answered

    async def version_stats(self, model: str, version: int) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        return self.stats

    async def ready(self) -> bool:
        if not self.is_ready:
            raise TritonUnreachable("refused")
        return True

    async def close(self) -> None:
        self.closed = True


def _pool(addresses: list[str]) -> tuple[TritonPool, dict[str, FakeServer]]:
    fakes: dict[str, FakeServer] = {}
    pool = TritonPool("dns+http://triton:8000", resolve=lambda host, port: list(addresses))

    def client(url: str) -> Any:
        fakes[url] = FakeServer(url)
        return fakes[url]

    pool._client = client  # type: ignore[method-assign]
    return pool, fakes


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


FEATURES = np.zeros((2, 4), dtype=np.float32)


def test_discovered_servers_share_the_calls_and_a_dead_one_costs_one_retry() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
        await pool.refresh()
        assert pool.servers == (A, B, C) and pool.healthy == {A, B, C}
        for _ in range(6):
            await pool.infer_scores("m", 1, FEATURES)
        assert [f.calls for f in fakes.values()] == [2, 2, 2]
        fakes[B].fail = TritonUnreachable("connection refused")
        answered = [float((await pool.infer_scores("m", 1, FEATURES))[0]) for _ in range(6)]
        assert set(answered) <= {1.0, 3.0}  # every call answered, by A or C
        assert fakes[B].calls == 3  # tried once, then out of the healthy set
        assert pool.retries["unreachable"] == 1 and B not in pool.healthy
        fakes[B].is_ready = False
        await pool.refresh()
        assert B not in pool.healthy
        fakes[B].fail, fakes[B].is_ready = None, True
        await pool.refresh()  # restarted: ready again, back in the rotation
        assert pool.healthy == {A, B, C}
        await pool.close()

    _run(main())


def test_a_request_the_model_refuses_is_not_retried_and_two_failures_give_up() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        await pool.refresh()
        for fake in fakes.values():
            fake.fail = TritonFailed("HTTP 400: unexpected shape")
        with pytest.raises(TritonFailed):
            await pool.infer_scores("m", 1, FEATURES)
        assert sum(f.calls for f in fakes.values()) == 1 and pool.healthy == {A, B}
        for fake in fakes.values():
            fake.fail = TritonUnreachable("reset")
        with pytest.raises(TritonUnreachable):
            await pool.infer_scores("m", 1, FEATURES)
        assert sum(f.calls for f in fakes.values()) == 3  # one call plus exactly one retry
        await pool.close()

    _run(main())


def test_a_server_without_the_version_is_skipped_for_that_version_only() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        await pool.refresh()
        fakes[A].fail = VersionNotServed("unknown model 'm' version 2")
        for _ in range(4):
            assert float((await pool.infer_scores("m", 2, FEATURES))[0]) == 2.0
        assert fakes[A].calls == 1 and pool.retries["not_served"] == 1
        assert A in pool.healthy  # the server is fine: other versions still go there
        assert {pool.order("m", 1)[0] for _ in range(2)} == {A, B}
        await pool.close()

    _run(main())


def test_servers_join_and_leave_with_the_name() -> None:
    async def main() -> None:
        addresses = ["10.0.0.1", "10.0.0.2"]
        pool, fakes = _pool(addresses)
        await pool.refresh()
        addresses[:] = ["10.0.0.2", "10.0.0.3"]
        await pool.refresh()
        assert pool.servers == (B, C) and fakes[A].closed
        addresses.clear()  # nothing resolves (every server restarting): the known ones are kept
        await pool.refresh()
        assert pool.servers == (B, C)
        await pool.close()

    _run(main())


def test_a_plain_url_is_a_pool_of_one() -> None:
    pool = TritonPool("http://127.0.0.1:8300")
    assert pool.servers == ("http://127.0.0.1:8300",) and not pool.discovered
    assert pool.order("m", 1) == ("http://127.0.0.1:8300",)
    with pytest.raises(Exception, match="http://host:port"):
        TritonPool("ftp://triton")


def _stats(queue: tuple[int, int], compute: tuple[int, int]) -> dict[str, Any]:
    parts = {"queue": {"count": queue[0], "ns": queue[1]}, "compute_infer": {"count": compute[0], "ns": compute[1]},
             "compute_input": {"count": compute[0], "ns": 0}, "compute_output": {"count": compute[0], "ns": 0}}
    return {"model_stats": [{"name": "m", "version": "3", "inference_stats": parts},
                            {"name": "m", "version": "4", "inference_stats": parts}]}


def test_statistics_are_summed_over_the_servers() -> None:
    merged = merge_stats([_stats((10, 1000), (10, 5000)), _stats((30, 9000), (30, 3000))], 3)
    reading = parse_stats(merged, 3)
    assert reading is not None
    assert (reading.queue_count, reading.queue_ns, reading.compute_count, reading.compute_ns) == (40, 10000, 40, 8000)
    assert merge_stats([{"model_stats": []}], 3) == {"model_stats": []}
    with pytest.raises(ValueError, match="statistics"):
        merge_stats([{"nope": 1}], 3)

    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
        await pool.refresh()
        fakes[A].stats, fakes[B].stats = _stats((1, 100), (1, 200)), _stats((2, 100), (2, 200))
        fakes[C].fail = TritonUnreachable("down")  # one server unreadable: the others still count
        reading = parse_stats(await pool.version_stats("m", 3), 3)
        assert reading is not None and (reading.queue_count, reading.compute_ns) == (3, 400)
        await pool.close()

    _run(main())


def test_a_call_in_flight_on_a_server_that_fails_its_health_check_goes_elsewhere() -> None:
    """A server killed without a reset (its container's network gone) never answers a call in flight: the health
    round that finds it gone abandons the call and sends it to another server, long before the caller's deadline."""

    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        await pool.refresh()
        hung = asyncio.Event()

        async def never_answers(model: str, version: int, features: Any) -> Any:
            hung.set()
            await asyncio.Event().wait()

        fakes[A].infer_scores = never_answers  # type: ignore[method-assign]
        pool._turn = 1  # the next call's first choice is A  (order() adds one: turn 2 % 2 == 0)
        call = asyncio.ensure_future(pool.infer_scores("m", 1, FEATURES))
        await asyncio.wait_for(hung.wait(), 1.0)
        assert not call.done()
        fakes[A].is_ready = False
        await pool.refresh()  # A fails its health check
        answer = await asyncio.wait_for(call, 1.0)
        assert float(answer[0]) == 2.0 and fakes[B].calls == 1  # answered by B
        assert pool.retries["lost"] == 1 and A not in pool.healthy

    _run(main())


def test_a_call_on_a_server_that_stays_healthy_is_left_to_finish() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        await pool.refresh()
        release = asyncio.Event()
        original = fakes[A].infer_scores

        async def slow(model: str, version: int, features: Any) -> Any:
            await release.wait()
            return await original(model, version, features)

        fakes[A].infer_scores = slow  # type: ignore[method-assign]
        pool._turn = 1
        call = asyncio.ensure_future(pool.infer_scores("m", 1, FEATURES))
        await asyncio.sleep(0.01)
        await pool.refresh()  # A still healthy: its call goes on
        assert not call.done()
        release.set()
        assert float((await call)[0]) == 1.0 and fakes[B].calls == 0 and pool.retries["lost"] == 0

    _run(main())


def _slow_first(pool: TritonPool, fakes: dict[str, FakeServer], seconds: float) -> None:
    original = fakes[A].infer_scores

    async def slow(model: str, version: int, features: Any) -> Any:
        await asyncio.sleep(seconds)
        return await original(model, version, features)

    fakes[A].infer_scores = slow  # type: ignore[method-assign]
    pool._turn = 1  # the next call's first choice is A


def test_a_call_unanswered_after_the_hedge_delay_is_also_sent_to_the_next_server() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        pool.hedge_after_s = 0.05
        await pool.refresh()
        _slow_first(pool, fakes, 5.0)
        started = asyncio.get_running_loop().time()
        answer = await asyncio.wait_for(pool.infer_scores("m", 1, FEATURES), 1.0)
        assert float(answer[0]) == 2.0 and asyncio.get_running_loop().time() - started < 1.0  # B answered
        assert pool.retries["hedged"] == 1 and pool._hedges_in_flight == 0
        assert A in pool.healthy  # a slow server is not a failed one

    _run(main())


def test_hedges_are_bounded_and_both_failures_raise_the_first_error() -> None:
    async def main() -> None:
        pool, fakes = _pool(["10.0.0.1", "10.0.0.2"])
        pool.hedge_after_s, pool.max_hedges_in_flight = 0.01, 0
        await pool.refresh()
        _slow_first(pool, fakes, 0.1)
        assert float((await pool.infer_scores("m", 1, FEATURES))[0]) == 1.0  # no budget: A's own answer
        assert pool.retries["hedged"] == 0 and fakes[B].calls == 0
        pool.max_hedges_in_flight = 4
        _slow_first(pool, fakes, 0.1)
        fakes[A].fail = TritonFailed("HTTP 500: the model failed")
        fakes[B].fail = TritonFailed("HTTP 500: the model failed on B")
        with pytest.raises(TritonFailed, match=r"the model failed$"):
            await pool.infer_scores("m", 1, FEATURES)
        assert pool.retries["hedged"] == 1

    _run(main())
