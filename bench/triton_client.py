"""Benchmark: the gateway's own Triton client against ``tritonclient.http.aio`` (the anchor), same load.

Both clients run in one asyncio process against the same Triton and the same model (the gateway
benchmark's python-backend model, ``modelops.gateway.testing``), with the same request: ``features``
FP32 ``[rows, 128]`` in, ``score`` out, an explicit version, Triton's binary tensor extension both ways.

- ``library``: ``tritonclient.http.aio.InferenceServerClient`` (aiohttp, keep-alive, ``conn_limit`` =
  the concurrency), ``infer(..., binary_data=True)`` and ``as_numpy``;
- ``gateway``: :class:`modelops.gateway.triton.inference.TritonHTTP` ``infer_scores``, as the gateway calls it.

Rounds alternate between the two (so drift of the machine hits both alike); each round sends
``--requests`` requests at concurrency 1 and at 16. Prints the median per mode (throughput, p50,
p99) and last the ratio gateway / library: throughput at c=16 and p50 at c=1. Needs Triton: the
running stack's, or with ``--port-base N`` a private one (stopped at the end).

    .venv/bin/python bench/triton_client.py --requests 300 --rounds 3     # quick
    .venv/bin/python bench/triton_client.py --port-base 8900              # 2000 x 5 rounds, private stack
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

MODEL = "bench_triton_client"
Call = Callable[[], Awaitable[Any]]


async def _round(call: Call, requests: int, concurrency: int) -> tuple[float, list[float]]:
    """``requests`` calls from ``concurrency`` workers; (throughput per s, latencies in ms)."""
    latencies: list[float] = []
    per_worker = [requests // concurrency + (1 if k < requests % concurrency else 0) for k in range(concurrency)]

    async def worker(count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - started) * 1000.0)

    started = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in per_worker))
    return requests / (time.perf_counter() - started), latencies


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


async def _bench(url: str, rows: int, requests: int, rounds: int) -> dict[tuple[str, int], list[tuple[float, ...]]]:
    from tritonclient.http import aio as triton_aio

    from modelops.gateway.triton.inference import TritonHTTP

    features = np.random.default_rng(3).random((rows, 128), dtype=np.float32)
    ours = TritonHTTP(url)
    library = triton_aio.InferenceServerClient(url.removeprefix("http://"), conn_limit=16)

    async def via_library() -> Any:
        tensor = triton_aio.InferInput("features", [rows, 128], "FP32")
        tensor.set_data_from_numpy(features, binary_data=True)
        result = await library.infer(MODEL, [tensor], model_version="1",
                                     outputs=[triton_aio.InferRequestedOutput("score", binary_data=True)])
        return result.as_numpy("score").reshape(-1)

    async def via_gateway() -> Any:
        return await ours.infer_scores(MODEL, 1, features)

    contenders: dict[str, Call] = {"library": via_library, "gateway": via_gateway}
    first, second = await via_library(), await via_gateway()
    if not np.allclose(first, second):
        raise SystemExit(f"the two clients disagree: {first[:3]} vs {second[:3]}")
    for call in contenders.values():  # warm both: connections, Triton's first calls
        await _round(call, 200, 16)
    results: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    try:
        for k in range(rounds):
            order = list(contenders) if k % 2 == 0 else list(reversed(contenders))
            for concurrency in (1, 16):
                for name in order:
                    throughput, latencies = await _round(contenders[name], requests, concurrency)
                    results.setdefault((name, concurrency), []).append(
                        (throughput, _pct(latencies, 50), _pct(latencies, 99)))
                    print(f"round {k + 1} c={concurrency:<2} {name:8} {throughput:8.0f} req/s  "
                          f"p50 {_pct(latencies, 50):6.2f} ms  p99 {_pct(latencies, 99):6.2f} ms", flush=True)
    finally:
        await library.close()
        await ours.close()
    return results


def bench(args: argparse.Namespace) -> None:
    from bench._stack import load_average

    from modelops.config import settings
    from modelops.gateway.testing import write_test_model
    from modelops.serving.triton import TritonClient

    cfg = settings()
    repository = cfg.home / "triton" / "repository"
    write_test_model(repository, MODEL, [1])
    triton = TritonClient(cfg.triton_http_url)
    triton.load(MODEL)
    try:
        print(f"{load_average()}; {args.rows} rows per request, {args.requests} requests x {args.rounds} rounds")
        results = asyncio.run(_bench(cfg.triton_http_url, args.rows, args.requests, args.rounds))
    finally:
        triton.unload(MODEL)
        shutil.rmtree(repository / MODEL, ignore_errors=True)
    print("\nmedians:")
    median: dict[tuple[str, int], tuple[float, float, float]] = {}
    for key, rows in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        median[key] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
                       statistics.median(r[2] for r in rows))
        print(f"  c={key[1]:<2} {key[0]:8} {median[key][0]:8.0f} req/s  p50 {median[key][1]:6.2f} ms  "
              f"p99 {median[key][2]:6.2f} ms")
    print(f"gateway / library: p50 at c=1 {median['gateway', 1][1] / median['library', 1][1]:.2f}x; "
          f"throughput at c=16 {median['gateway', 16][0] / median['library', 16][0]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per round and concurrency")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10, help="feature rows per request (items to score)")
    parser.add_argument("--port-base", type=int, default=None,
                        help="start a private stack (Triton and the object store only) at this port base")
    args = parser.parse_args()
    from bench._stack import on_private_stack

    on_private_stack(args.port_base, "modelops-bench-triton-client-", lambda: bench(args),
                     only=["objectstore", "triton"], MODELOPS_OBSERVABILITY="off")


if __name__ == "__main__":
    main()
