"""Sends the simulated traffic to a gateway: open-loop rate, bounded in count and time.

Requests start on a fixed schedule (``rate`` per second), not when the previous one
answered, so a slow gateway shows up as latency and errors rather than as a lower
rate. At most ``concurrency`` requests are in flight; feedback goes out right after each
answer through its ``feedback_token``.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from modelops.traffic.simulation import TrafficSpec, make_request, reactions


@dataclass
class TrafficReport:
    """What a run did (also printed as progress)."""

    sent: int = 0
    status: Counter[int] = field(default_factory=Counter)
    per_version: Counter[int] = field(default_factory=Counter)
    feedback: Counter[str] = field(default_factory=Counter)
    feedback_status: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        ok = self.status.get(200, 0)
        lat = sorted(self.latencies_ms)
        p50 = lat[len(lat) // 2] if lat else float("nan")
        versions = " ".join(f"v{v}:{n}" for v, n in sorted(self.per_version.items()))
        others = " ".join(f"{code}:{n}" for code, n in sorted(self.status.items()) if code != 200)
        actions = " ".join(f"{a}:{n}" for a, n in sorted(self.feedback.items()))
        return (f"{self.seconds:6.1f}s sent {self.sent} ok {ok} [{versions}] p50 {p50:.1f} ms"
                f"{' errors ' + others if others else ''}"
                f"{' transport ' + str(self.transport_errors) if self.transport_errors else ''}"
                f" feedback [{actions}] 202:{self.feedback_status.get(202, 0)}")


Bodies = Callable[[random.Random, float], Mapping[str, Any]]
"""A request body from a random source and the wall time (the recommender's: ``make_request``)."""


async def run_traffic(spec: TrafficSpec, url: str, *, progress: Callable[[str], None] = print,
                      progress_every_s: float = 1.0, bodies: Bodies | None = None,
                      stop: threading.Event | None = None) -> TrafficReport:
    """Run ``spec`` against the gateway at ``url``; returns the report.

    ``bodies`` makes each request's body (default: the recommender's feature-lookup requests of
    ``spec``); a model of another form sends its own, e.g. :func:`modelops.traffic.tabular.tabular_bodies`.
    ``stop``: set it to end the run early (the requests in flight are still answered and counted).
    """
    import aiohttp

    rng = random.Random(spec.seed)
    report = TrafficReport()
    started = time.monotonic()
    gate = asyncio.Semaphore(spec.concurrency)
    predict_url = f"{url.rstrip('/')}/v1/models/{spec.model}/predict"
    feedback_url = f"{url.rstrip('/')}/v1/feedback"
    timeout = aiohttp.ClientTimeout(total=10)

    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(body: Mapping[str, Any], decide: random.Random) -> None:
            async with gate:
                t0 = time.perf_counter()
                try:
                    async with session.post(predict_url, json=body) as response:
                        answer = await response.json(content_type=None)
                        report.status[response.status] += 1
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    report.transport_errors += 1
                    return
                report.latencies_ms.append((time.perf_counter() - t0) * 1000)
                if response.status != 200:
                    return
                version = int(answer["model_version"])
                report.per_version[version] += 1
                for action in reactions(decide, spec.behaviour(version)):
                    report.feedback[action] += 1
                    try:
                        async with session.post(feedback_url, json={
                                "feedback_token": answer["feedback_token"], "action": action,
                                "timestamp": time.time()}) as fb:
                            report.feedback_status[fb.status] += 1
                    except (aiohttp.ClientError, TimeoutError):
                        report.transport_errors += 1

        tasks: set[asyncio.Task[None]] = set()
        next_progress = started + progress_every_s
        interval = 1.0 / spec.rate
        while report.sent < spec.max_requests:
            now = time.monotonic()
            if now - started >= spec.max_seconds or (stop is not None and stop.is_set()):
                break
            due = started + report.sent * interval
            if due > now:
                await asyncio.sleep(min(due - now, max(0.0, next_progress - now)))
                if time.monotonic() < due:
                    report.seconds = time.monotonic() - started
                    if time.monotonic() >= next_progress:
                        progress(report.line())
                        next_progress += progress_every_s
                    continue
            body = bodies(rng, time.time()) if bodies is not None else make_request(rng, spec, time.time())
            task = asyncio.get_running_loop().create_task(one(body, random.Random(rng.random())))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            report.sent += 1
            if time.monotonic() >= next_progress:
                report.seconds = time.monotonic() - started
                progress(report.line())
                next_progress += progress_every_s
        if tasks:
            await asyncio.wait(tasks, timeout=15)
    report.seconds = time.monotonic() - started
    progress(report.line())
    return report


class BackgroundTraffic:
    """Run a traffic spec in a background thread for the length of a ``with`` block (a release, a test)."""

    def __init__(self, spec: TrafficSpec, url: str, bodies: Bodies | None = None) -> None:
        self.spec = spec
        self.url = url
        self.bodies = bodies
        self.stop = threading.Event()
        self.report: TrafficReport | None = None
        """What the run did, once the ``with`` block has ended."""
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self.report = await run_traffic(self.spec, self.url, progress=lambda line: None, bodies=self.bodies,
                                        stop=self.stop)

    def __enter__(self) -> BackgroundTraffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=20)
