"""Benchmark: requests straight to Triton (the anchor) vs through the gateway, same load, same client.

Needs Triton and the object store: those of a running stack (``modelops stack up``), or,
with ``--port-base N``, a private stack of its own (just those two, at N + their offsets,
stopped at the end). The script
loads its own python-backend model (``modelops.gateway.testing``) into the stack's Triton,
publishes small feature tables and a routes document, and starts a gateway (one worker)
on a free port. Then, alternating, several rounds of ``--requests`` requests at
concurrency 1 and 16 from one asyncio client (aiohttp, keep-alive):

- direct: ``POST /v2/models/NAME/versions/1/infer`` with the binary tensor extension
  (the features the gateway would look up, computed once);
- gateway: ``POST /v1/models/NAME/predict`` with the JSON request;
- gateway+mirror100: the same gateway and requests while the routes name version 2 as the shadow of
  100 % of them (each answered request then also goes to version 2, after its answer: the stable's
  p50 it adds at c=1, and the throughput at c=16 with and without, side by side).

It also measures what a contract rejection costs: the gateway's own time for a request
that breaks the contract (the ASGI app called in-process, no HTTP) and over HTTP, each
beside the same server's cheapest answer (a 404): with the aiohttp client and with a
lean client (one raw keep-alive socket), whose own cost does not hide the gateway's.

Prints medians per mode, added p50/p99 latency, and last the throughput ratio
gateway / direct at each concurrency.

    .venv/bin/python bench/gateway.py --requests 300 --rounds 3     # quick
    .venv/bin/python bench/gateway.py                               # 2000 requests x 3 rounds
    .venv/bin/python bench/gateway.py --port-base 8900              # same, on a private stack
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
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modelops.process import free_port

ROOT = Path(__file__).resolve().parents[1]
MIRRORED = "gateway+mirror100"  # the gateway while the routes mirror every answered request to version 2
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))


def setup(model: str) -> Any:
    """Load the bench model, publish features and routes; returns the feature lookup."""
    from modelops.config import settings
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.example.tables import FeatureLookup, publish_feature_tables
    from modelops.gateway.testing import feature_tables, write_test_model
    from modelops.objectstore import ObjectStore
    from modelops.serving.triton import TritonClient

    cfg = settings()
    write_test_model(cfg.home / "triton" / "repository", model, [1, 2])  # 2: the shadow of the mirrored rounds
    TritonClient(cfg.triton_http_url).load(model)
    store = ObjectStore.from_settings(cfg)
    store.ensure_bucket()
    users, items = feature_tables(n_users=200, n_items=500)
    publish_feature_tables(store, f"bench-{model}", users, items)
    store.put_bytes(routes_key(model), serialize_routes(
        Routes(model, 1, VersionRef(1, "b" * 64), None, 0.0, "", "bench/gateway.py")))
    return FeatureLookup.from_frames(users, items)


def set_mirroring(model: str, on: bool, gateway_urls: Sequence[str]) -> None:
    """Route ``model`` with (version 2 as the shadow of 100 % of its requests) or without mirroring; wait
    until every gateway applied it."""
    import requests

    from modelops.documents.routes import Routes, Shadow, VersionRef, load_routes, routes_key, serialize_routes
    from modelops.objectstore import ObjectStore

    store = ObjectStore.from_settings()
    current = load_routes(store.get_bytes(routes_key(model)))
    if (current.shadow is not None) == on:
        return
    shadow = Shadow(VersionRef(2, "c" * 64), 1.0, 5) if on else None
    routes = Routes(model, current.revision + 1, current.stable, None, 0.0, "", "bench/gateway.py", shadow=shadow)
    store.put_bytes(routes_key(model), serialize_routes(routes))
    for url in gateway_urls:
        base = url.split("/v1/")[0]
        deadline = time.monotonic() + 30
        while requests.get(f"{base}/v1/routes", timeout=5).json()["models"][model]["revision"] < routes.revision:
            if time.monotonic() > deadline:
                raise SystemExit(f"{base} never applied routes revision {routes.revision}")
            time.sleep(0.05)


def teardown(model: str) -> None:
    from modelops.config import settings
    from modelops.documents.routes import routes_key
    from modelops.objectstore import ObjectStore
    from modelops.serving.triton import TritonClient

    TritonClient(settings().triton_http_url).unload(model)
    ObjectStore.from_settings().delete(routes_key(model))
    shutil.rmtree(settings().home / "triton" / "repository" / model, ignore_errors=True)


def start_gateway(port: int, spool: Path, log: Path, plugins: Path = ROOT / "plugins") -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugins), env.get("PYTHONPATH", "")) if p)
    with log.open("ab") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "modelops.gateway", "serve", "--port", str(port),
                                 "--workers", "1", "--spool-dir", str(spool)],
                                env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=plugins.parent)
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


def export_plugins(rev: str, into: Path) -> Path:
    """The tree of git revision ``rev`` (a gateway to compare with) unpacked in ``into``; its ``plugins/``."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "plugins"


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (a dev tool, not a dependency: ``pip install py-spy``) on the gateway, GIL-holding samples."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    extra = os.environ.get("BENCH_PYSPY_ARGS", "--gil --nonblocking").split()
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", *extra, "--output", str(out),
                             "--format", "flamegraph" if out.suffix == ".svg" else "raw"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def run_load(url: str | Sequence[str], bodies: list[tuple[bytes, dict[str, str]]],
                   concurrency: int) -> tuple[float, list[float]]:
    """Send every body (round-robin) with ``concurrency`` workers; returns (seconds, latencies_ms).

    With several URLs (replicas of one server) worker ``k`` sends to ``url[k % len(url)]``.
    """
    import aiohttp

    urls = [url] if isinstance(url, str) else list(url)
    latencies: list[float] = []
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(url: str) -> None:
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
        await asyncio.gather(*(worker(urls[k % len(urls)]) for k in range(concurrency)))
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
    from modelops.documents.routes import Routes, VersionRef
    from modelops.gateway.app import Gateway
    from modelops.gateway.options import GatewayOptions

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

        async def send(message: MutableMapping[str, Any]) -> None:
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
    """User + system seconds of the gateway process and its live worker processes."""
    import psutil

    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


async def rejection_round_trips(url: str, bodies: list[tuple[bytes, dict[str, str]]], status: int) -> list[float]:
    import aiohttp

    times = []
    async with aiohttp.ClientSession() as session:
        for body, headers in bodies:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                assert response.status == status, (url, response.status)
            times.append((time.perf_counter() - started) * 1000)
    return times


def raw_rejection_round_trips(url: str, unknown_url: str, bodies: list[tuple[bytes, dict[str, str]]]
                              ) -> tuple[list[float], list[float]]:
    """Round trips (ms) of contract rejections (400) and of the server's 404, alternated, with a lean client.

    One keep-alive socket (TCP_NODELAY), the request written as prepared bytes and the answer
    read by its Content-Length: the client's own cost is a few microseconds, where the
    ``aiohttp``/``requests`` clients add ~0.3 ms and would hide the gateway's part.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    def prepared(path: str, body: bytes) -> bytes:
        return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    requests = [(prepared(urlsplit(u).path, body), status)
                for body, _headers in bodies for u, status in ((url, 400), (unknown_url, 404))]
    times: dict[int, list[float]] = {400: [], 404: []}
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        for request, status in requests:
            started = time.perf_counter()
            sock.sendall(request)
            while b"\r\n\r\n" not in buffer:
                buffer += sock.recv(65536)
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(buffer) < length:
                buffer += sock.recv(65536)
            buffer = buffer[length:]
            times[status].append((time.perf_counter() - started) * 1000)
            got = int(head.split(b" ", 2)[1])
            assert got == status, (request[:80], got)
    return times[400], times[404]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=10, help="items per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--compare-rev", nargs="+", default=[],
                        help="also run the gateway of each of these git revisions (e.g. HEAD~3) as contenders")
    parser.add_argument("--flame", type=Path, default=None,
                        help="record the gateway with py-spy into this file (.svg: flame graph, else collapsed "
                             "stacks); BENCH_PYSPY_ARGS overrides '--gil --nonblocking'")
    parser.add_argument("--no-mirror", action="store_true",
                        help="leave out the gateway with 100 %% of its requests mirrored to a shadow version")
    parser.add_argument("--port-base", type=int, default=None,
                        help="start a private stack (Triton and the object store only) at this port base "
                             "instead of using the running one")
    args = parser.parse_args()
    if args.rounds < 3 or args.requests < 100:
        parser.error(f"--rounds: at least 3 (medians), --requests: at least 100; got {args.rounds} and {args.requests}")
    from bench._stack import on_private_stack

    on_private_stack(args.port_base, "modelops-bench-gateway-", lambda: bench(args), only=["objectstore", "triton"],
                     MODELOPS_FEEDBACK_SECRET="modelops-bench-gateway-secret", MODELOPS_OBSERVABILITY="off")


def bench(args: argparse.Namespace) -> None:
    from modelops.config import settings

    cfg = settings()
    model = f"bench_{uuid.uuid4().hex[:6]}"
    lookup = setup(model)
    rng = np.random.default_rng(1)
    requests: list[dict[str, Any]] = [{"user_id": f"u_{rng.integers(0, 220):04d}",
                 "item_ids": [f"i_{k:04d}" for k in rng.integers(0, 520, size=args.items)],
                 "timestamp": 1764460800} for _ in range(args.requests)]
    direct = direct_bodies(lookup, requests)
    via = [(json.dumps(r).encode(), {"Content-Type": "application/json"}) for r in requests]
    bad = [(json.dumps({**r, "item_ids": [*r["item_ids"][:3], "x" * 33]}).encode(),
            {"Content-Type": "application/json"}) for r in requests[:300]]
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    gateways: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    profiler = None
    import psutil

    print(f"start: {load()}", flush=True)
    try:
        trees = {"gateway": ROOT / "plugins"}
        for k, rev in enumerate(args.compare_rev):
            (work / f"rev{k}").mkdir()
            trees[f"gateway@{rev[:12]}"] = export_plugins(rev, work / f"rev{k}")
        for name, plugins in trees.items():
            port = free_port()
            proc = start_gateway(port, work / f"spool-{len(gateways)}", work / f"{len(gateways)}.log", plugins)
            gateways[name] = (proc, f"http://127.0.0.1:{port}/v1/models/{model}/predict")
        contenders = [("direct", f"{cfg.triton_http_url}/v2/models/{model}/versions/1/infer", direct),
                      *((name, url, via) for name, (_proc, url) in gateways.items())]
        if not args.no_mirror:  # the same gateway with every answered request mirrored to version 2 afterwards
            contenders.insert(2, (MIRRORED, gateways["gateway"][1], via))
        procs = {name: psutil.Process(proc.pid) for name, (proc, _url) in gateways.items()}
        if not args.no_mirror:
            procs[MIRRORED] = procs["gateway"]
        gateway_urls = [url for _proc, url in gateways.values()]
        if args.flame is not None:  # idle samples are left out, so the other contenders' rounds add nothing
            profiler = start_profiler(gateways["gateway"][0].pid, args.flame)
        results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        cpu: dict[tuple[str, int], list[float]] = {}
        for conc in args.concurrency:  # warm-up every path
            for name, url, bodies in contenders:
                set_mirroring(model, name == MIRRORED, gateway_urls)
                asyncio.run(run_load(url, bodies[:100], conc))
        for round_ in range(args.rounds):
            for conc in args.concurrency:
                order = contenders if round_ % 2 == 0 else contenders[::-1]  # alternate who goes first
                for name, url, bodies in order:
                    set_mirroring(model, name == MIRRORED, gateway_urls)
                    before = cpu_seconds(procs[name]) if name in procs else 0.0
                    seconds, lat = asyncio.run(run_load(url, bodies, conc))
                    line = (f"round {round_ + 1} c={conc:<2} {name:<16} {len(bodies) / seconds:8.0f} req/s  "
                            f"p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms")
                    results.setdefault((name, conc), []).append((len(bodies) / seconds, pct(lat, 50), pct(lat, 99)))
                    if name in procs:
                        cpu_ms = (cpu_seconds(procs[name]) - before) * 1000 / len(bodies)
                        cpu.setdefault((name, conc), []).append(cpu_ms)
                        line += f"  gateway CPU {cpu_ms:.2f} ms/request"
                    print(line, flush=True)
        # Contract rejections over HTTP, beside the same server's cheapest answer (404, unknown model).
        reject: dict[str, float] = {}
        floor: dict[str, float] = {}
        raw: dict[str, tuple[float, float]] = {}
        for name, (_proc, url) in gateways.items():
            unknown = url.replace(f"/models/{model}/", "/models/no_such_model/")
            asyncio.run(rejection_round_trips(url, bad[:50], 400))
            reject[name] = statistics.median(asyncio.run(rejection_round_trips(url, bad, 400)))
            floor[name] = statistics.median(asyncio.run(rejection_round_trips(unknown, bad, 404)))
            raw_rejected, raw_floor = raw_rejection_round_trips(url, unknown, bad)
            raw[name] = (statistics.median(raw_rejected), statistics.median(raw_floor))
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=120)
        for proc, _url in gateways.values():
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        teardown(model)
        shutil.rmtree(work, ignore_errors=True)
    in_process_us = rejection_cost_in_process(3000)
    print(f"end: {load()}")

    print("\nmedians over rounds")
    med: dict[tuple[str, int], tuple[float, float, float]] = {
        key: tuple(statistics.median(v[i] for v in runs) for i in range(3))  # type: ignore[misc]
        for key, runs in results.items()}
    names = [name for name, _url, _bodies in contenders]
    for conc in args.concurrency:
        for name in names:
            tput, p50, p99 = med[(name, conc)]
            print(f"  c={conc:<2} {name:<16} {tput:8.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
    mirror_lines = []
    if not args.no_mirror:
        for conc in args.concurrency:
            g, m = med[("gateway", conc)], med[(MIRRORED, conc)]
            mirror_lines.append(
                f"  c={conc:<2} mirroring 100 %: p50 {m[1] - g[1]:+.3f} ms, p99 {m[2] - g[2]:+.2f} ms added to the "
                f"stable's answers; throughput {m[0]:.0f} vs {g[0]:.0f} req/s without (ratio {m[0] / g[0]:.2f}); "
                f"gateway CPU {statistics.median(cpu[(MIRRORED, conc)]):.2f} vs "
                f"{statistics.median(cpu[('gateway', conc)]):.2f} ms/request")
    for conc in args.concurrency:
        d = med[("direct", conc)]
        for name in gateways:
            g = med[(name, conc)]
            print(f"  c={conc:<2} {name:<16} added latency: p50 {g[1] - d[1]:+.2f} ms  p99 {g[2] - d[2]:+.2f} ms  "
                  f"CPU {statistics.median(cpu[(name, conc)]):.2f} ms/request (user+system, one worker)")
    for name in gateways:
        print(f"  {name:<16} contract rejection over HTTP: {reject[name]:.2f} ms round trip (median); the "
              f"server's cheapest answer (404 unknown model) {floor[name]:.2f} ms: the rejection adds "
              f"{reject[name] - floor[name]:+.2f} ms")
    for name in gateways:
        rejected, floor_ms = raw[name]
        print(f"  {name:<16} contract rejection, lean client (raw keep-alive socket, alternated with the 404): "
              f"{rejected:.3f} ms round trip (median); 404 floor {floor_ms:.3f} ms: the gateway adds "
              f"{rejected - floor_ms:+.3f} ms")
    print(f"  contract rejection in-process (ASGI app, no HTTP): {in_process_us:.0f} us (median)")
    for line in mirror_lines:
        print(line)
    for conc in args.concurrency:
        for name in (*gateways, *(() if args.no_mirror else (MIRRORED,))):
            print(f"throughput ratio {name}/direct c={conc}: {med[(name, conc)][0] / med[('direct', conc)][0]:.2f}")


if __name__ == "__main__":
    main()
