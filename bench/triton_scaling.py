"""Benchmark: Triton's queue time at a fixed overload with the scaling controller on vs off.

Starts a Triton of its own (the embedded stack's, ``--port-base`` for its ports, a temporary
MODELOPS_HOME) serving a python-backend model of ``--delay-ms`` per request (one instance
serves 1000/delay requests/s), and sends it ``--clients`` closed-loop clients for
``--seconds`` per contender. Contenders, alternated within each round, each starting from one
instance (the model reloaded from its file):

- ``off``: one instance throughout (the controller off: what the stack runs by default);
- ``on``: the controller (in this process: interval 1 s, cool-down ``--cooldown-s``, 1 to
  ``--max-instances``, mode replace) starts with the load;
- ``static-max`` (the anchor): ``--max-instances`` instances from the start, the best a fixed
  provisioning does (at the cost of the idle instances when there is no load).

Figure: the mean queue time per request over the whole contender window from Triton's own
counters (``nv_inference_queue_duration_us`` / requests), with requests served and failed.
Prints load at start and end, per round, medians of ``--rounds`` and, last, the ratio
on / off (and on / static-max).

    .venv/bin/python bench/triton_scaling.py --rounds 3 --seconds 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

MODEL = "bench_scaling"


def reset(triton: object, count: int) -> None:
    from modelops.serving.scaler import set_instance_count
    from modelops.serving.triton import TritonClient

    assert isinstance(triton, TritonClient)
    triton.unload(MODEL)
    while triton.ready_versions(MODEL):
        time.sleep(0.1)
    triton.load(MODEL)
    if count != 1:
        set_instance_count(triton, MODEL, count)


def contender(kind: str, args: argparse.Namespace, triton: object, metrics_url: str) -> tuple[float, int, int]:
    """(mean queue ms per request, requests served, requests failed) of one contender window."""
    from modelops.errors import ServingError
    from modelops.serving.scaler import Controller, scrape
    from modelops.serving.scaling import Policy, window_load
    from modelops.serving.triton import TritonClient

    assert isinstance(triton, TritonClient)
    reset(triton, args.max_instances if kind == "static-max" else 1)
    stop, failed, served = threading.Event(), [0], [0]

    def client() -> None:
        own = TritonClient(triton.base_url, timeout_s=120.0)
        features = {"features": np.zeros((1, 128), np.float32)}
        while not stop.is_set():
            try:
                own.infer(MODEL, 1, features, ("score",))
                served[0] += 1
            except ServingError:
                failed[0] += 1

    before = scrape(metrics_url)[(MODEL, 1)]
    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    if kind == "on":
        policy = Policy(1, args.max_instances, 100.0, 10.0, 4, args.cooldown_s)
        home = Path(tempfile.mkdtemp(prefix="bench-scaling-audit-"))
        controller = Controller(triton, metrics_url, policy, MODEL, home / "audit.jsonl")
        while time.monotonic() - started < args.seconds:
            tick = time.monotonic()
            controller.tick()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        shutil.rmtree(home, ignore_errors=True)
    else:
        time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    # Triton keeps a version's counters across the controller's reloads (one reporter per model and version);
    # a window whose counters went backwards would print nan.
    after = scrape(metrics_url)[(MODEL, 1)]
    load = window_load(before, after)
    queue = load.queue_ms if load is not None else float("nan")
    return queue, served[0], failed[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="load per contender (default 20)")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--max-instances", type=int, default=3)
    parser.add_argument("--cooldown-s", type=float, default=4.0)
    parser.add_argument("--port-base", type=int, default=30000, help="Triton at base+300..302 (default 30000)")
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()}", flush=True)
    from modelops.config import stack_port_env

    home = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    os.environ.update({**stack_port_env(args.port_base), "MODELOPS_HOME": str(home), "MODELOPS_OBSERVABILITY": "off"})
    from modelops.config import settings
    from modelops.gateway.testing import write_test_model
    from modelops.serving.triton import TritonClient
    from modelops.stack import launcher

    cfg = settings()
    results: dict[str, list[tuple[float, int, int]]] = {"off": [], "on": [], "static-max": []}
    try:
        launcher.up(cfg, progress=lambda line: None, only=["triton"])
        write_test_model(home / "triton" / "repository", MODEL, [1], delay_s=args.delay_ms / 1000.0)
        triton = TritonClient(cfg.triton_http_url, load_timeout_s=300.0)
        triton.load(MODEL)
        for r in range(args.rounds):
            order = ["off", "on", "static-max"] if r % 2 == 0 else ["static-max", "on", "off"]
            for kind in order:
                results[kind].append(contender(kind, args, triton, cfg.triton_metrics_url))
            print(f"round {r + 1}: " + ", ".join(
                f"{kind} queue {results[kind][-1][0]:.0f} ms/request ({results[kind][-1][1]} served, "
                f"{results[kind][-1][2]} failed)" for kind in results), flush=True)
    finally:
        launcher.down(cfg, progress=lambda line: None)
        shutil.rmtree(home, ignore_errors=True)
        print(f"load at end: {os.getloadavg()}", flush=True)
    medians = {kind: statistics.median(x[0] for x in rows) for kind, rows in results.items()}
    print(f"medians of {args.rounds} rounds ({args.clients} clients, {args.delay_ms:g} ms/request, "
          f"{args.seconds:g} s): " + ", ".join(f"{kind} {value:.0f} ms/request" for kind, value in medians.items()))
    print(f"queue time on / off: {medians['on'] / medians['off']:.2f}x; on / static-max: "
          f"{medians['on'] / medians['static-max']:.2f}x")


if __name__ == "__main__":
    main()
