"""Scale-out benchmark on loopback processes: gateway replicas, a Spark standalone cluster, Triton recovery.

Three parts on a stack of its own (``--port-base``, default 22000; a temporary MODELOPS_HOME),
everything it starts stopped by PID at the end:

1. **Gateway replicas** (``gateway``): one Triton (the stack's) serves a small published champion
   (``bench/recovery.py``'s champion: an ONNX pipeline published to the object store, loaded by the
   reconciler); 3 gateway processes (``bench/gateway.py``'s ``start_gateway``: one uvicorn process
   each, ports ``--replica-port``..+2) serve it. Contenders 1, 2 and 3 replicas, alternated per
   round: one asyncio client (``bench/gateway.py``'s ``run_load``) sends ``--requests`` requests at
   ``--concurrency`` (default 12: an equal share per replica), its connections dealt round-robin over
   the contender's replicas. Printed per window: throughput, p50/p99, and the CPU cores the client,
   the gateways, Triton and the whole machine used; at the end the CPU per request of each part
   and the ceilings they set. On one 2-core machine all of them share the same two cores: a
   replica adds a process, not CPU, so the ratio to one replica is bounded by what the client,
   Triton and the machine's other work leave over; on separate machines each replica brings its
   own cores.
2. **Drift on a Spark standalone cluster** (``drift``): a master and 2 workers of 1 core each from
   pyspark's ``spark-class`` on loopback vs ``local[2]``, the same data (``bench/drift.py``'s
   generator, ``--rows`` per side), each contender in a driver process of its own with a warm
   session (started and warmed once, not timed), alternated per round; the results are asserted
   equal and the cluster's executors asserted on both workers; the cores each contender's processes
   used are printed. Both have the same 2 cores on this one machine: the ratio cluster / ``local[2]``
   shows the cluster's overhead (executors in other JVMs, tasks over RPC) or, on a machine busy
   with other work, its more numerous processes' larger share of the contended cores, not a
   speed-up; a speed-up needs workers on other machines.
3. **Triton SIGKILL -> champion served again** (``recovery``): ``bench/recovery.py``'s
   ``bench_triton`` (Triton's process group SIGKILLed, restarted as a supervisor would, the
   reconciler reloads the routed version), median of ``--recovery-rounds`` (5).

Load average is printed at start and end; medians of ``--rounds`` (>= 3); the ratios last.

    .venv/bin/python bench/scale.py --quick      # smoke run: small windows, 50k rows, 3 kills (~6 min)
    .venv/bin/python bench/scale.py              # 2000 requests, 200k rows per side, 5 kills
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

from bench._stack import SparkCluster, load_average, private_stack  # noqa: E402  (after the path: runnable uninstalled)

REPLICAS = (1, 2, 3)
_RESULT = "BENCH-RESULT "

# ------------------------------------------------------------------------------------------ gateway replicas


def _bodies(n: int, seed: int) -> list[tuple[bytes, dict[str, str]]]:
    """Requests over the champion's 20 users and 20 items (the feature tables ``_serve_champion`` publishes)."""
    rng = np.random.default_rng(seed)
    return [(json.dumps({"user_id": f"u_{rng.integers(0, 20):06d}",
                         "item_ids": [f"i_{k:06d}" for k in rng.choice(20, size=10, replace=False)],
                         "timestamp": int(time.time())}).encode(), {"Content-Type": "application/json"})
            for _ in range(n)]


def _serves(url: str, body: bytes) -> bool:
    import requests

    return requests.post(url, data=body, timeout=5, headers={"Content-Type": "application/json"}).status_code == 200


def _cpu(procs: list[Any]) -> float:
    """CPU seconds (user + system) of these processes, their live descendants and the children they reaped.

    The reaped children count too: PySpark's daemon forks the Python workers and reaps them.
    """
    import psutil

    total = 0.0
    for root in procs:
        try:
            family = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    return total


def _machine() -> tuple[float, float]:
    """CPU seconds of the whole machine so far: (busy, waiting for I/O)."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - times.iowait, times.iowait


def bench_replicas(cfg: Any, home: Path, model: str, args: argparse.Namespace) -> dict[int, list[tuple[float, ...]]]:
    """Per replica count, each round: (req/s, p50 ms, p99 ms, cores used by the client, the gateways, Triton,
    and by the whole machine, cores waiting for I/O)."""
    import psutil
    from bench.gateway import run_load, start_gateway

    from tests.support.stackops import service_pid, wait_for

    replicas: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(max(REPLICAS)):
            replicas.append(start_gateway(args.replica_port + i, home / f"replica-spool-{i}",
                                          home / "logs" / f"replica-{i}.log"))
        urls = [f"http://127.0.0.1:{args.replica_port + i}/v1/models/{model}/predict" for i in range(max(REPLICAS))]
        probe = _bodies(1, 0)[0][0]
        for url in urls:
            wait_for(functools.partial(_serves, url, probe), 120, f"replica {url} serves the champion")
        client = psutil.Process()
        gateways = [psutil.Process(p.pid) for p in replicas]
        triton_pid = service_pid(cfg, "triton")
        assert triton_pid is not None, "Triton is not running"
        triton = psutil.Process(triton_pid)
        bodies = _bodies(args.requests, 1)
        for n in REPLICAS:  # warm-up of every replica's connections and Triton
            asyncio.run(run_load(urls[:n], bodies[:100], args.concurrency))
        results: dict[int, list[tuple[float, ...]]] = {n: [] for n in REPLICAS}
        for r in range(args.rounds):
            for n in REPLICAS if r % 2 == 0 else REPLICAS[::-1]:
                before = (client.cpu_times(), _cpu(gateways), _cpu([triton]), *_machine())
                seconds, lat = asyncio.run(run_load(urls[:n], bodies, args.concurrency))
                own, machine = client.cpu_times(), _machine()
                cores = ((own.user + own.system - before[0].user - before[0].system) / seconds,
                         (_cpu(gateways) - before[1]) / seconds, (_cpu([triton]) - before[2]) / seconds,
                         (machine[0] - before[3]) / seconds, (machine[1] - before[4]) / seconds)
                row = (len(bodies) / seconds, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), *cores)
                results[n].append(row)
                print(f"  round {r + 1} {n} replica(s): {row[0]:7.0f} req/s  p50 {row[1]:6.2f} ms  "
                      f"p99 {row[2]:6.2f} ms  cores used: client {row[3]:.2f}, gateways {row[4]:.2f}, "
                      f"Triton {row[5]:.2f}; machine busy {row[6]:.2f}, I/O wait {row[7]:.2f}", flush=True)
        return results
    finally:
        for proc in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc in replicas:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _replica_bound(windows: list[tuple[float, ...]]) -> str:
    """What bounds the replicas' throughput on this machine, from the CPU each part spent per request."""
    client, gateway, triton = (statistics.median(w[i] / w[0] * 1000 for w in windows) for i in (3, 4, 5))
    total, cores = client + gateway + triton, os.cpu_count() or 1
    ours = statistics.median(w[3] + w[4] + w[5] for w in windows)
    return (f"  CPU per request (median of every window): client {client:.2f} ms, gateway {gateway:.2f} ms, Triton "
            f"{triton:.2f} ms = {total:.2f} ms. The client, the gateways and Triton share the same {cores} cores: "
            f"whatever the replica count the machine serves at most {cores} / {total:.2f} ms = "
            f"{cores * 1000 / total:.0f} req/s, and one gateway process (one core) alone "
            f"{1000 / gateway:.0f} req/s, so on this machine "
            + ("a replica adds a process, not capacity" if gateway * cores <= total else
               "replicas can raise one process' ceiling up to the machine's") + ". Here the other "
            f"processes on the machine left this bench {ours:.2f} cores (machine busy above): "
            f"{ours:.2f} / {total:.2f} ms = {ours * 1000 / total:.0f} req/s. On separate machines each replica "
            "brings its own cores and Triton its own")


# ------------------------------------------------------------------------------------------ drift on a cluster

_DRIVER = f"""
import dataclasses, json, sys, time
from modelops.drift.job import compute_drift
from modelops.features import load_features
from modelops.spark import spark_session
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES

master, base, cur, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spark = spark_session("bench-scale-drift", master)
features = load_features(RECOMMENDER_FEATURES)
compute_drift(spark, base, cur, features, max_rows=rows)  # warm-up: executors, Python workers, page cache
print({_RESULT!r} + json.dumps({{"app": spark.sparkContext.applicationId}}), flush=True)
for _ in sys.stdin:
    started = time.perf_counter()
    summary = compute_drift(spark, base, cur, features, max_rows=rows).summary
    seconds = time.perf_counter() - started
    print({_RESULT!r} + json.dumps({{"seconds": seconds, "summary": dataclasses.asdict(summary)}}), flush=True)
spark.stop()
"""


class Driver:
    """One drift driver process with a warm session on ``master``; :meth:`run` times one job."""

    def __init__(self, master: str, base: Path, cur: Path, rows: int, log: Path, env: dict[str, str]) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle: IO[bytes] = log.open("ab")
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "plugins"), env.get("PYTHONPATH", ""))
                                                    if p)}
        self.proc = subprocess.Popen([sys.executable, "-c", _DRIVER, master, str(base), str(cur), str(rows)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log_handle, text=True)
        self.app_id: str = self._answer()["app"]

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(_RESULT):
                answer: dict[str, Any] = json.loads(line[len(_RESULT):])
                return answer
        raise SystemExit(f"drift driver exited ({self.proc.wait()}): {self.log.read_text()[-3000:]}")

    def run(self) -> tuple[float, dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return float(answer["seconds"]), answer["summary"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log_handle.close()


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two results differ: floats beyond 1e-9 relative (a sum's order may differ), anything else at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return [] if same else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def bench_drift(home: Path, args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    """Per round, (seconds, cores used) of the drift job on ``local[2]`` and on the 2-worker cluster.

    Cores used: CPU seconds of the contender's processes (its driver with its Python workers; for
    the cluster also the master and workers with their executors) per second of the job. The
    results are asserted equal.
    """
    import psutil
    from bench.drift import generate

    started = time.perf_counter()
    base, cur = generate(args.drift_cache, args.rows, 7)
    print(f"  data: {args.rows} rows x 129 columns per side ({time.perf_counter() - started:.1f} s to generate or "
          f"find in {args.drift_cache})", flush=True)
    cluster = SparkCluster(home / "spark", args.spark_port)
    drivers: dict[str, Driver] = {}
    try:
        started = time.perf_counter()
        cluster.start()
        print(f"  cluster up in {time.perf_counter() - started:.1f} s: {cluster.master_url}, 2 workers x 1 core",
              flush=True)
        env = {**cluster.env(), "MODELOPS_SPARK_DRIVER_MEMORY": "2g"}
        for name, master, log in (("local[2]", "local[2]", "drift-local.log"),
                                  ("cluster", cluster.master_url, "drift-cluster.log")):
            started = time.perf_counter()
            drivers[name] = Driver(master, base, cur, args.rows, home / "logs" / log, env)
            print(f"  {name}: session and warm-up run {time.perf_counter() - started:.1f} s (not counted)",
                  flush=True)
        spread = cluster.executors_per_worker(drivers["cluster"].app_id)
        assert all(spread), f"the cluster application's executors per worker: {spread} (expected some on each)"
        procs = {"local[2]": [psutil.Process(drivers["local[2]"].proc.pid)],
                 "cluster": [psutil.Process(pid) for pid in (drivers["cluster"].proc.pid, *cluster.pids())]}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in drivers}
        summaries: dict[str, Any] = {}
        for r in range(args.rounds):
            for name in drivers if r % 2 == 0 else list(drivers)[::-1]:
                before = _cpu(procs[name])
                took, summaries[name] = drivers[name].run()
                results[name].append((took, (_cpu(procs[name]) - before) / took))
            differences = _differences(summaries["local[2]"], summaries["cluster"])
            assert not differences, "cluster and local[2] results differ:\n  " + "\n  ".join(differences[:10])
            print(f"  round {r + 1}: " + ", ".join(f"{name} {rows[-1][0]:.2f} s ({rows[-1][1]:.2f} cores used)"
                                                    for name, rows in results.items())
                  + f"; results equal; executors per worker {spread}", flush=True)
        return results
    finally:
        for driver in drivers.values():
            driver.close()
        cluster.stop()


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="gateway,drift,recovery",
                        help="comma-separated subset of gateway,drift,recovery (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 400 requests, 50k rows per side, 3 kills (other flags still win)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per part (medians; at least 3)")
    parser.add_argument("--requests", type=int, default=None, help="requests per window (default 2000)")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--rows", type=int, default=None, help="drift rows per side (default 200,000)")
    parser.add_argument("--recovery-rounds", type=int, default=None, help="Triton SIGKILLs (default 5)")
    parser.add_argument("--port-base", type=int, default=22000)
    parser.add_argument("--replica-port", type=int, default=22500, help="gateway replicas at this port and the next 2")
    parser.add_argument("--spark-port", type=int, default=22700, help="Spark master here, its UI +1, workers +10..")
    parser.add_argument("--drift-cache", type=Path, default=Path("/tmp/modelops-drift-bench"))
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts or parts - {"gateway", "drift", "recovery"}:
        parser.error(f"--parts: a comma-separated subset of gateway,drift,recovery (got {args.parts!r}), "
                     "e.g. --parts gateway,recovery")
    if args.rounds < 3:
        parser.error(f"--rounds: at least 3 (medians), got {args.rounds}")
    args.requests = args.requests or (400 if args.quick else 2000)
    args.rows = args.rows or (50_000 if args.quick else 200_000)
    args.recovery_rounds = args.recovery_rounds or (3 if args.quick else 5)

    cfg, home = private_stack(args.port_base, "modelops-bench-scale-",
                              MODELOPS_FEEDBACK_SECRET="modelops-bench-scale-secret", MODELOPS_OBSERVABILITY="off")
    from bench.recovery import GOAL_TRITON_S, _serve_champion, bench_triton

    from modelops.stack import launcher

    print(f"start: {load_average()}; stack on ports {args.port_base}+ in {home}", flush=True)
    replicas: dict[int, list[tuple[float, ...]]] = {}
    drift: dict[str, list[tuple[float, float]]] = {}
    recovery: list[float] = []
    finished = False
    try:
        if "drift" in parts:
            print(f"drift job, Spark standalone (2 workers x 1 core) vs local[2], {args.rows} rows per side:",
                  flush=True)
            drift = bench_drift(home, args)
        if parts & {"gateway", "recovery"}:
            launcher.up(cfg, progress=lambda line: None, only=["gateway", "reconciler"])
            model, body = _serve_champion(cfg)
            if "gateway" in parts:
                print(f"gateway replicas against one Triton, {args.requests} requests at concurrency "
                      f"{args.concurrency}:", flush=True)
                replicas = bench_replicas(cfg, home, model, args)
            if "recovery" in parts:
                print("Triton SIGKILL -> champion served again through the gateway:", flush=True)
                recovery = bench_triton(cfg, model, body, args.recovery_rounds)
        finished = True
    finally:
        launcher.down(cfg, progress=lambda line: None)
        if finished:
            shutil.rmtree(home, ignore_errors=True)
        print(f"end: {load_average()}" + ("" if finished else f"; state and logs kept in {home}"), flush=True)

    print(f"\nmedians of {args.rounds} rounds (one {os.cpu_count()}-core machine shared by every process):")
    med = {n: [statistics.median(row[i] for row in rows) for i in range(8)] for n, rows in replicas.items()}
    for n, (rate, p50, p99, client, gateways, triton, busy, iowait) in med.items():
        print(f"  {n} gateway replica(s): {rate:7.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  cores used: "
              f"client {client:.2f}, gateways {gateways:.2f}, Triton {triton:.2f} (this bench "
              f"{client + gateways + triton:.2f}; the machine busy {busy:.2f}, I/O wait {iowait:.2f}, of "
              f"{os.cpu_count()})")
    if med:
        print(_replica_bound([row for rows in replicas.values() for row in rows]))
    drift_med = {name: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
                 for name, rows in drift.items()}
    for name, (value, cores) in drift_med.items():
        print(f"  drift job on {name}: {value:.2f} s ({cores:.2f} cores used)")
    if drift_med:
        print(f"  both drift contenders have the same {os.cpu_count()} cores on this one machine: the cluster / "
              "local[2] ratio is the cluster's overhead (executors in other JVMs, tasks over RPC) or, on a busy "
              "machine, its processes' share of the contended cores (cores used above), not a speed-up: that needs "
              "workers on other machines")
    if recovery:
        print(f"  Triton SIGKILL -> champion served: median {statistics.median(recovery):.1f} s of {len(recovery)} "
              f"(goal <= {GOAL_TRITON_S:g} s)")
    for n in REPLICAS[1:]:
        if n in med:
            print(f"throughput {n} replicas / 1 replica: {med[n][0] / med[1][0]:.2f}")
    if drift_med:
        print(f"drift job cluster / local[2] (time; overhead, not speed-up, on one machine): "
              f"{drift_med['cluster'][0] / drift_med['local[2]'][0]:.2f}")
    if recovery:
        print(f"Triton recovery median / goal: {statistics.median(recovery) / GOAL_TRITON_S:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
