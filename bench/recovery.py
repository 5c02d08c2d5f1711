"""Recovery benchmark: how fast the platform serves again after a crash, and what durability costs.

Three measurements on a stack of its own (``--port-base``, default 25000, temporary
``MODELOPS_HOME``):

1. **Triton SIGKILL → champion served again** (``--rounds``, default 5; goal <= 10 s): a
   champion (small ONNX pipeline, published to the object store) is routed 100 % through
   the gateway; Triton's process group is SIGKILLed, restarted as a supervisor would
   (``stack up``), and the clock stops at the first 200 from the gateway. The reconciler
   service reloads the routed version (nothing else does). Printed per round: Triton's
   restart, and the reload until the gateway answered.
2. **Whole-stack kill -9 → serving** (``--full-rounds``, default 3; goal <= 90 s; 0 skips
   it): every process of the full stack (object store, MLflow, Triton, reconciler, gateway,
   Airflow) is SIGKILLed at once (a power cut), then ``stack up``; the clock stops at the
   first 200 from the gateway for the champion.
3. **Object store for the gateway's log uploads, SeaweedFS vs moto** (the anchor: the
   in-memory mock the stack used before): ``--objects`` puts then gets of ``--object-kib``
   KiB objects (the size of a spooled Parquet segment) through the platform's
   :class:`~modelops.objectstore.ObjectStore` (as the gateway's uploader does), contenders
   alternated, ``--store-rounds`` rounds (>= 3): throughput (objects/s) and p99 latency,
   medians over rounds, the ratio SeaweedFS/moto last.

Load average is printed at the start and the end. Run: ``.venv/bin/python bench/recovery.py``
(~4 minutes without the full-stack part, ~10 minutes with it on 2 shared cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._stack import load_average, private_stack  # after the path: runnable without the install

from modelops.modelspec.recommender import recommender_features
from modelops.process import free_port

GOAL_TRITON_S = 10.0
GOAL_FULL_S = 90.0


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _serve_champion(cfg: Any) -> tuple[str, dict[str, Any]]:
    """A published pipeline routed 100 % through the gateway; returns (model, a request body)."""
    import requests

    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables
    from modelops.objectstore import ObjectStore
    from modelops.serving.publisher import Provenance, publish_artifacts
    from modelops.serving.testing import fixture_artifacts
    from tests.support.stackops import wait_for

    store = ObjectStore.from_settings(cfg)
    model = f"benchrec_{uuid.uuid4().hex[:6]}"
    published = publish_artifacts(model, fixture_artifacts(1), Provenance(owner="bench"), cfg=cfg, store=store,
                                  load=False)
    users, items = generate_tables(recommender_features(), replace(WorldSpec(), seed=3, n_users=20, n_items=20))
    publish_feature_tables(store, f"bench-{uuid.uuid4().hex[:6]}", users, items)
    store.put_bytes(routes_key(model), serialize_routes(Routes(
        model, 1, VersionRef(published.triton_version, published.sha256), None, 0.0,
        datetime.now(UTC).isoformat(), "bench")))
    body = {"user_id": "u_000001", "item_ids": ["i_000001", "i_000002", "i_000003"], "timestamp": int(time.time())}
    wait_for(lambda: requests.post(f"{cfg.gateway_url}/v1/models/{model}/predict", json=body,
                                   timeout=5).status_code == 200, 120, "the gateway serves the champion")
    return model, body


def _until_served(cfg: Any, model: str, body: dict[str, Any], timeout_s: float = 600.0) -> float:
    import requests

    deadline = time.monotonic() + timeout_s
    session = requests.Session()
    while time.monotonic() < deadline:
        try:
            if session.post(f"{cfg.gateway_url}/v1/models/{model}/predict", json=body, timeout=5).status_code == 200:
                return time.monotonic()
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{model} not served again within {timeout_s:.0f} s")


def bench_triton(cfg: Any, model: str, body: dict[str, Any], rounds: int) -> list[float]:
    from modelops.stack import launcher
    from tests.support.stackops import kill_service

    times = []
    for k in range(rounds):
        killed = time.monotonic()
        kill_service(cfg, "triton", signal.SIGKILL)
        launcher.up(cfg, progress=lambda line: None, only=["triton"])
        restarted = time.monotonic()
        served = _until_served(cfg, model, body)
        times.append(served - killed)
        print(f"  triton round {k + 1}: restarted {restarted - killed:5.1f} s, champion served "
              f"{served - killed:5.1f} s after the SIGKILL", flush=True)
    return times


def bench_full(cfg: Any, model: str, body: dict[str, Any], rounds: int) -> list[float]:
    from modelops.stack import launcher
    from tests.support.stackops import kill_everything

    times = []
    for k in range(rounds):
        killed = time.monotonic()
        names = kill_everything(cfg)
        launcher.up(cfg, progress=lambda line: None)
        up = time.monotonic()
        served = _until_served(cfg, model, body)
        times.append(served - killed)
        print(f"  full round {k + 1}: {len(names)} services SIGKILLed, stack up {up - killed:5.1f} s, champion "
              f"served {served - killed:5.1f} s after the kill", flush=True)
    return times


def _store_round(store: Any, n: int, size: int, prefix: str) -> tuple[float, float, float, float]:
    """(put objects/s, put p99 ms, get objects/s, get p99 ms)."""
    payloads = [os.urandom(size) for _ in range(8)]
    put_lat, get_lat = [], []
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        store.put_bytes(f"{prefix}/{i:05d}.parquet", payloads[i % 8])
        put_lat.append(time.perf_counter() - t0)
    put_s = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        store.get_bytes(f"{prefix}/{i:05d}.parquet")
        get_lat.append(time.perf_counter() - t0)
    get_s = time.perf_counter() - started
    return n / put_s, _p99(put_lat) * 1000, n / get_s, _p99(get_lat) * 1000


def bench_store(cfg: Any, home: Path, objects: int, kib: int, rounds: int) -> None:
    from modelops import process
    from modelops.objectstore import ObjectStore

    seaweed = ObjectStore.from_settings(cfg)
    port = free_port()
    moto_log = home / "logs" / "bench-moto.log"
    moto_pid = home / "run" / "bench-moto.pid"
    venv_bin = Path(sys.executable).parent
    process.start((str(venv_bin / "moto_server"), "-H", "127.0.0.1", "-p", str(port)),
                  env={**os.environ, "NO_PROXY": "127.0.0.1"}, log_file=moto_log, pid_file=moto_pid)
    try:
        moto = ObjectStore(f"http://127.0.0.1:{port}", "bench", "bench", "bench-secret")
        from tests.support.stackops import wait_for

        wait_for(lambda: moto.ensure_bucket() is None, 30, "moto answers")
        contenders = {"seaweedfs": seaweed, "moto": moto}
        results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in contenders}
        for store in contenders.values():  # warm-up, not counted
            _store_round(store, 20, kib * 1024, f"bench/warmup-{uuid.uuid4().hex[:6]}")
        for k in range(rounds):
            order = list(contenders) if k % 2 == 0 else list(reversed(contenders))
            for name in order:
                results[name].append(_store_round(contenders[name], objects, kib * 1024,
                                                  f"bench/{name}-{k}-{uuid.uuid4().hex[:6]}"))
        print(f"object store, {objects} puts then gets of {kib} KiB through ObjectStore, medians of {rounds} rounds:")
        medians = {}
        for name, rows in results.items():
            medians[name] = tuple(statistics.median(r[i] for r in rows) for i in range(4))
            put_rate, put_p99, get_rate, get_p99 = medians[name]
            print(f"  {name:9} put {put_rate:7.1f} obj/s (p99 {put_p99:6.1f} ms)   "
                  f"get {get_rate:7.1f} obj/s (p99 {get_p99:6.1f} ms)")
        sw, mo = medians["seaweedfs"], medians["moto"]
        print(f"  ratio seaweedfs/moto: put throughput {sw[0] / mo[0]:.2f}x, put p99 {sw[1] / mo[1]:.2f}x, "
              f"get throughput {sw[2] / mo[2]:.2f}x, get p99 {sw[3] / mo[3]:.2f}x")
    finally:
        process.stop(moto_pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-base", type=int, default=25000)
    parser.add_argument("--rounds", type=int, default=5, help="Triton SIGKILL rounds (median)")
    parser.add_argument("--full-rounds", type=int, default=3, help="whole-stack kill -9 rounds (0: skip)")
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--object-kib", type=int, default=64)
    parser.add_argument("--store-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.store_rounds < 3:
        parser.error("--store-rounds: at least 3 (medians)")
    cfg, home = private_stack(args.port_base, "modelops-bench-recovery-",
                              MODELOPS_FEEDBACK_SECRET="modelops-bench-recovery-secret")
    from modelops.stack import launcher

    print(f"start: {load_average()}; stack on ports {args.port_base}+ in {home}", flush=True)
    finished = False
    try:
        launcher.up(cfg, progress=lambda line: None, only=["gateway", "reconciler"])
        model, body = _serve_champion(cfg)
        bench_store(cfg, home, args.objects, args.object_kib, args.store_rounds)
        triton = bench_triton(cfg, model, body, args.rounds)
        full: list[float] = []
        if args.full_rounds:
            print("starting the rest of the stack (MLflow, Airflow) for the whole-stack rounds ...", flush=True)
            launcher.up(cfg, progress=lambda line: None)
            full = bench_full(cfg, model, body, args.full_rounds)
        print(f"end: {load_average()}")
        triton_median = statistics.median(triton)
        print(f"Triton SIGKILL -> champion served: median {triton_median:.1f} s of {len(triton)} "
              f"(goal <= {GOAL_TRITON_S:g} s): ratio to goal {triton_median / GOAL_TRITON_S:.2f}")
        if full:
            full_median = statistics.median(full)
            print(f"whole-stack kill -9 -> champion served: median {full_median:.1f} s of {len(full)} "
                  f"(goal <= {GOAL_FULL_S:g} s): ratio to goal {full_median / GOAL_FULL_S:.2f}")
        finished = True
        return 0
    finally:
        launcher.down(cfg, progress=lambda line: None)
        if finished:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"stack stopped; its state and logs are kept in {home}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
