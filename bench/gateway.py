"""Benchmark: requests straight to Triton (the anchor) vs through the gateway, same load, same client.

Needs a running stack (``modelops stack up``: Triton and the object store). The script
loads its own python-backend model (``modelops.gateway.testing``) into the stack's Triton,
publishes small feature tables and a routes document, and starts a gateway (one worker)
on a free port. Then, alternating, several rounds of ``--requests`` requests at
concurrency 1 and 16 from one asyncio client (aiohttp, keep-alive):

- direct: ``POST /v2/models/NAME/versions/1/infer`` with the binary tensor extension
  (the features the gateway would look up, computed once);
- gateway: ``POST /v1/models/NAME/predict`` with the JSON request.

It also measures what a contract rejection costs: the gateway's own time for a request
that breaks the contract (the ASGI app called in-process, no HTTP) and over HTTP.

Prints medians per mode, added p50/p99 latency, and last the throughput ratio
gateway / direct at each concurrency.

    .venv/bin/python bench/gateway.py --requests 300 --rounds 2     # quick
    .venv/bin/python bench/gateway.py                               # 2000 requests x 3 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from modelops.stack.process import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))


def setup(model: str) -> Any:
    """Load the bench model, publish features and routes; returns the feature lookup."""
    from modelops.config import settings
    from modelops.example.tables import FeatureLookup, publish_feature_tables
    from modelops.gateway.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.gateway.testing import feature_tables, write_test_model
    from modelops.objectstore import ObjectStore
    from modelops.serving.triton import TritonClient

    cfg = settings()
    write_test_model(cfg.home / "triton" / "repository", model, [1])
    TritonClient(cfg.triton_http_url).load(model)
    store = ObjectStore.from_settings(cfg)
    store.ensure_bucket()
    users, items = feature_tables(n_users=200, n_items=500)
    publish_feature_tables(store, f"bench-{model}", users, items)
    store.put_bytes(routes_key(model), serialize_routes(
        Routes(model, 1, VersionRef(1, "b" * 64), None, 0.0, "", "bench/gateway.py")))
    return FeatureLookup.from_frames(users, items)


def teardown(model: str) -> None:
    from modelops.config import settings
    from modelops.gateway.routes import routes_key
    from modelops.objectstore import ObjectStore
    from modelops.serving.triton import TritonClient

    TritonClient(settings().triton_http_url).unload(model)
    ObjectStore.from_settings().delete(routes_key(model))
    shutil.rmtree(settings().home / "triton" / "repository" / model, ignore_errors=True)


def start_gateway(port: int, spool: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "plugins"), env.get("PYTHONPATH", "")) if p)
    with log.open("ab") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "modelops.gateway", "serve", "--port", str(port),
                                 "--workers", "1", "--spool-dir", str(spool)],
                                env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
    import requests

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gateway did not start: {log.read_text()[-2000:]}")


async def run_load(url: str, bodies: list[tuple[bytes, dict[str, str]]], concurrency: int) -> tuple[float, list[float]]:
    """Send every body (round-robin) with ``concurrency`` workers; returns (seconds, latencies_ms)."""
    import aiohttp

    latencies: list[float] = []
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal next_index
            while next_index < len(bodies):
                body, headers = bodies[next_index]
                next_index += 1
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise SystemExit(f"{url}: HTTP {response.status}")
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


def direct_bodies(lookup: Any, requests: list[dict[str, Any]]) -> list[tuple[bytes, dict[str, str]]]:
    out = []
    for request in requests:
        features = lookup.matrix([request["user_id"]] * len(request["item_ids"]), request["item_ids"])
        data = np.ascontiguousarray(features, dtype=np.float32)
        header = json.dumps({
            "inputs": [{"name": "features", "shape": list(data.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": data.nbytes}}],
            "outputs": [{"name": "score", "parameters": {"binary_data": True}}]}).encode()
        out.append((header + data.tobytes(), {"Content-Type": "application/octet-stream",
                                              "Inference-Header-Content-Length": str(len(header))}))
    return out


def rejection_cost_in_process(n: int) -> float:
    """Median microseconds the ASGI app spends on a contract rejection (no HTTP, no network)."""
    from modelops.config import settings
    from modelops.gateway.app import Gateway
    from modelops.gateway.options import GatewayOptions
    from modelops.gateway.routes import Routes, VersionRef

    with tempfile.TemporaryDirectory() as spool:
        app = Gateway(settings(), GatewayOptions(spool_dir=spool))
        app.routes = {"m": Routes("m", 1, VersionRef(1, "a" * 64), None, 0.0, "", "")}
        app.routes_loaded = True
        body = json.dumps({"user_id": "u_1", "item_ids": ["i_1", "i_2", "i_3", "x" * 33],
                           "timestamp": 1764460800}).encode()
        scope = {"type": "http", "method": "POST", "path": "/v1/models/m/predict",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        async def measure() -> list[float]:
            times = []
            for _ in range(n):
                started = time.perf_counter()
                await app(scope, receive, send)
                times.append((time.perf_counter() - started) * 1e6)
            return times

        times = asyncio.run(measure())
        assert set(statuses) == {400}, statuses
        return statistics.median(times)


def cpu_seconds(proc: Any) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=10, help="items per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()

    from modelops.config import settings

    cfg = settings()
    model = f"bench_{uuid.uuid4().hex[:6]}"
    lookup = setup(model)
    rng = np.random.default_rng(1)
    requests = [{"user_id": f"u_{rng.integers(0, 220):04d}",
                 "item_ids": [f"i_{k:04d}" for k in rng.integers(0, 520, size=args.items)],
                 "timestamp": 1764460800} for _ in range(args.requests)]
    direct = direct_bodies(lookup, requests)
    via = [(json.dumps(r).encode(), {"Content-Type": "application/json"}) for r in requests]
    bad = [(json.dumps({**r, "item_ids": [*r["item_ids"][:3], "x" * 33]}).encode(),
            {"Content-Type": "application/json"}) for r in requests[:300]]
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    proc = start_gateway(port, work / "spool", work / "gateway.log")
    direct_url = f"{cfg.triton_http_url}/v2/models/{model}/versions/1/infer"
    gateway_url = f"http://127.0.0.1:{port}/v1/models/{model}/predict"
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    gateway_cpu: dict[int, list[float]] = {}
    import psutil

    gateway_proc = psutil.Process(proc.pid)
    load_before = os.getloadavg()[0]
    try:
        for conc in args.concurrency:  # warm-up both paths
            asyncio.run(run_load(direct_url, direct[:100], conc))
            asyncio.run(run_load(gateway_url, via[:100], conc))
        for round_ in range(args.rounds):
            for conc in args.concurrency:
                for mode, url, bodies in (("direct", direct_url, direct), ("gateway", gateway_url, via)):
                    cpu_before = cpu_seconds(gateway_proc)
                    seconds, lat = asyncio.run(run_load(url, bodies, conc))
                    cpu_ms = (cpu_seconds(gateway_proc) - cpu_before) * 1000 / len(bodies)
                    results.setdefault((mode, conc), []).append((len(bodies) / seconds, pct(lat, 50), pct(lat, 99)))
                    if mode == "gateway":
                        gateway_cpu.setdefault(conc, []).append(cpu_ms)
                    print(f"round {round_ + 1} c={conc:<2} {mode:<7} {len(bodies) / seconds:8.0f} req/s  "
                          f"p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms"
                          + (f"  gateway CPU {cpu_ms:.2f} ms/request" if mode == "gateway" else ""), flush=True)

        async def rejections() -> list[float]:
            import aiohttp

            times = []
            async with aiohttp.ClientSession() as session:
                for body, headers in bad:
                    started = time.perf_counter()
                    async with session.post(gateway_url, data=body, headers=headers) as response:
                        await response.read()
                        assert response.status == 400
                    times.append((time.perf_counter() - started) * 1000)
            return times

        http_reject = statistics.median(asyncio.run(rejections()))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        teardown(model)
    in_process_us = rejection_cost_in_process(3000)

    print("\nmedians over rounds")
    med: dict[tuple[str, int], tuple[float, float, float]] = {
        key: tuple(statistics.median(v[i] for v in runs) for i in range(3))  # type: ignore[misc]
        for key, runs in results.items()}
    for (mode, conc), (tput, p50, p99) in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"  c={conc:<2} {mode:<7} {tput:8.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
    for conc in args.concurrency:
        d, g = med[("direct", conc)], med[("gateway", conc)]
        print(f"  c={conc:<2} added latency: p50 {g[1] - d[1]:+.2f} ms  p99 {g[2] - d[2]:+.2f} ms")
    for conc, values in sorted(gateway_cpu.items()):
        print(f"  c={conc:<2} gateway CPU per request: {statistics.median(values):.2f} ms (user+system, one worker)")
    print(f"  load average at start {load_before:.1f} on {os.cpu_count()} CPUs (shared machine: compare ratios)")
    print(f"  contract rejection: {in_process_us:.0f} us of gateway time (in-process, median); "
          f"{http_reject:.2f} ms round trip over HTTP (median)")
    for conc in args.concurrency:
        d, g = med[("direct", conc)], med[("gateway", conc)]
        print(f"throughput ratio gateway/direct c={conc}: {g[0] / d[0]:.2f}")


if __name__ == "__main__":
    main()
