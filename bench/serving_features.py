"""Benchmark: predict with ``explain=true`` vs the same predict without it (the anchor), 20 items.

Needs a running stack (``modelops stack up``: Triton and the object store). The script
serves two models of different shape: the reference model (``modelops.example``'s MLP,
trained small), published like a release (an ensemble with ``max_batch_size`` 64, so one
explanation is many batched Triton calls) and a python-backend model (``max_batch_size``
0: one call), and
starts a gateway (one worker) on a free port. Each round sends ``--requests`` requests
per contender, alternating plain / explained request by request, from one client at
concurrency 1. Prints load at start and end, per round p50 / p99 / throughput, the
medians over the rounds and, last, the p50 ratio explain / plain per model (goal <= 3).

Precomputed vs online (``--part precomputed``): the batch of the ``precompute_predictions`` DAG
scores the 200 users x 500 items with each model's stable version (its rows/s printed), and two
gateways (one worker each) serve the same requests: one answers from the snapshot
(``X-Prediction-Source: precomputed``, checked), the other online (its freshness limit set below
the snapshot's age, so every answer is scored by Triton: the anchor). Requests alternate between
the two, one client at concurrency 1; per round p50 / p99 / throughput, medians and, last, the p50
ratio precomputed / online per model (goal <= 0.5).

Queue time with the scaling controller on vs off is ``bench/triton_scaling.py``.

    .venv/bin/python bench/serving_features.py --requests 50 --rounds 3
    .venv/bin/python bench/serving_features.py --part precomputed --requests 200 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np

from modelops.process import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))


def setup(run: str) -> tuple[str, str]:
    """Serve the two models and route them; returns (pipeline, python model) names."""
    from modelops.config import settings
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
    from modelops.example.synthetic import WorldSpec
    from modelops.example.tables import publish_feature_tables
    from modelops.example.train import TrainSpec, train
    from modelops.gateway.testing import feature_tables, write_test_model
    from modelops.objectstore import ObjectStore
    from modelops.serving.builder import Artifacts
    from modelops.serving.publisher import Provenance, publish_artifacts
    from modelops.serving.triton import TritonClient

    cfg = settings()
    store = ObjectStore.from_settings(cfg)
    store.ensure_bucket()
    pipeline, python_model = f"benchexpipe_{run}", f"benchexpy_{run}"
    reference = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25))
    published = publish_artifacts(pipeline, Artifacts(reference.preprocess_onnx, reference.model_onnx,
                                                      reference.variant_json),
                                  Provenance(owner="bench"), cfg=cfg, store=store)
    write_test_model(cfg.home / "triton" / "repository", python_model, [1], focus=70)
    TritonClient(cfg.triton_http_url).load(python_model)
    users, items = feature_tables(n_users=200, n_items=500)
    publish_feature_tables(store, f"bench-{run}", users, items)
    store.put_bytes(routes_key(pipeline), serialize_routes(Routes(
        pipeline, 1, VersionRef(published.triton_version, published.sha256), None, 0.0, "", "bench")))
    store.put_bytes(routes_key(python_model), serialize_routes(Routes(
        python_model, 1, VersionRef(1, "b" * 64), None, 0.0, "", "bench")))
    return pipeline, python_model


def teardown(pipeline: str, python_model: str) -> None:
    from modelops.config import settings
    from modelops.documents.routes import routes_key
    from modelops.errors import ServingError
    from modelops.objectstore import ObjectStore
    from modelops.serving.pbtxt import step_names
    from modelops.serving.triton import TritonClient

    cfg = settings()
    client, store = TritonClient(cfg.triton_http_url), ObjectStore.from_settings(cfg)
    for name in (pipeline, python_model):
        store.delete(routes_key(name))
        for key in list(store.list_keys(f"precomputed/{name}/")):  # bench_precomputed's snapshots
            store.delete(key)
    with contextlib.suppress(ServingError):
        client.unload(python_model)
        for triton_model in step_names(pipeline).values():
            if client.ready_versions(triton_model):
                client.unload(triton_model)
    shutil.rmtree(cfg.home / "triton" / "repository" / python_model, ignore_errors=True)


def start_gateway(port: int, base: Path, extra: list[str], **env_extra: str) -> subprocess.Popen[bytes]:
    import requests

    env = {**os.environ, **env_extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "plugins"), env.get("PYTHONPATH", "")) if p)
    with (base / f"gateway-{port}.log").open("ab") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "modelops.gateway", "serve", "--port", str(port),
                                 "--workers", "1", "--spool-dir", str(base / "spool"), "--max-deadline-ms", "10000",
                                 *extra],
                                env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gateway did not start: {(base / f'gateway-{port}.log').read_text()[-2000:]}")


def one_round(url: str, model: str, n: int, items: int) -> dict[str, tuple[float, float, float]]:
    """Alternating plain / explain requests; per contender (p50 ms, p99 ms, requests per second)."""
    import requests

    session = requests.Session()
    latencies: dict[str, list[float]] = {"plain": [], "explain": []}
    for k in range(n):
        body = {"user_id": f"u_{k % 200:04d}", "item_ids": [f"i_{(k * 7 + j) % 500:04d}" for j in range(items)],
                "timestamp": 1764460800}
        for kind, query in (("plain", ""), ("explain", "?explain=true")):
            started = time.perf_counter()
            response = session.post(f"{url}/v1/models/{model}/predict{query}", json=body, timeout=30)
            latencies[kind].append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"{model} {kind}: HTTP {response.status_code} {response.text[:300]}")
    return {kind: (float(np.percentile(v, 50)), float(np.percentile(v, 99)), 1000.0 * len(v) / sum(v))
            for kind, v in latencies.items()}


def precompute_snapshots(models: tuple[str, ...]) -> None:
    """The DAG's batch for each model's stable version (users x items of the served feature snapshot)."""
    from datetime import UTC, datetime

    from modelops.jobs.precompute_tasks import champions, precompute
    from modelops.objectstore import ObjectStore

    store = ObjectStore.from_settings()
    for champion in champions(store, list(models)):
        summary = precompute(champion, datetime.now(UTC), store=store)
        print(f"precompute {champion.model} v{champion.version}: {summary['rows']} rows in {summary['seconds']:.1f} s "
              f"({summary['rows'] / summary['seconds']:.0f} rows/s, scores + manifest written)")


def precomputed_round(urls: dict[str, str], model: str, n: int, items: int) -> dict[str, tuple[float, float, float]]:
    """The same requests to the precomputed and the online gateway, alternating; per contender p50, p99, req/s."""
    import requests

    session = requests.Session()
    latencies: dict[str, list[float]] = {kind: [] for kind in urls}
    for k in range(n):
        body = {"user_id": f"u_{k % 200:04d}", "item_ids": [f"i_{(k * 7 + j) % 500:04d}" for j in range(items)],
                "timestamp": 1764460800}
        order = list(urls.items()) if k % 2 == 0 else list(reversed(urls.items()))
        for kind, url in order:
            started = time.perf_counter()
            response = session.post(f"{url}/v1/models/{model}/predict", json=body, timeout=30)
            latencies[kind].append((time.perf_counter() - started) * 1000)
            if response.status_code != 200 or response.headers.get("x-prediction-source") != kind:
                raise SystemExit(f"{model} {kind}: HTTP {response.status_code} "
                                 f"source {response.headers.get('x-prediction-source')} {response.text[:300]}")
    return {kind: (float(np.percentile(v, 50)), float(np.percentile(v, 99)), 1000.0 * len(v) / sum(v))
            for kind, v in latencies.items()}


def report(model: str, rounds: list[dict[str, tuple[float, float, float]]], kinds: tuple[str, str]) -> float:
    """Print each round and the medians; returns the p50 ratio kinds[1] / kinds[0]."""
    for r, figures in enumerate(rounds):
        print(f"{model} round {r + 1}: " + ", ".join(
            f"{kind} p50 {p50:.1f} ms p99 {p99:.1f} ms {rps:.1f} req/s" for kind, (p50, p99, rps) in figures.items()))
    medians = {kind: [statistics.median(r[kind][i] for r in rounds) for i in range(3)] for kind in kinds}
    print(f"{model} medians of {len(rounds)} rounds: " + ", ".join(
        f"{kind} p50 {m[0]:.1f} ms p99 {m[1]:.1f} ms {m[2]:.1f} req/s" for kind, m in medians.items()))
    return medians[kinds[1]][0] / medians[kinds[0]][0]


def precomputed_part(args: argparse.Namespace, models: tuple[str, ...], base: Path) -> dict[str, float]:
    precompute_snapshots(models)
    ports = {"precomputed": free_port(), "online": free_port()}
    procs = [start_gateway(ports["precomputed"], base, [], MODELOPS_PRECOMPUTED_POLL_S="0.5"),
             start_gateway(ports["online"], base, [], MODELOPS_PRECOMPUTED_MAX_AGE_S="0.000001")]
    urls = {kind: f"http://127.0.0.1:{port}" for kind, port in ports.items()}
    ratios: dict[str, float] = {}
    try:
        for model in models:
            deadline = time.monotonic() + 30
            while True:  # the precomputed gateway has loaded the snapshot (readiness, not a sleep)
                try:
                    precomputed_round(urls, model, 2, args.items)
                    break
                except SystemExit:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            rounds = [precomputed_round(urls, model, args.requests, args.items) for _ in range(args.rounds)]
            ratios[model] = report(model, rounds, ("online", "precomputed"))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("explain", "precomputed", "all"), default="all")
    parser.add_argument("--requests", type=int, default=50, help="requests per contender per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--explain-permutations", type=int, default=2)
    parser.add_argument("--explain-concurrency", type=int, default=8)
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()}")
    run = uuid.uuid4().hex[:8]
    pipeline, python_model = setup(run)
    base = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    precomputed_ratios: dict[str, float] = {}
    if args.part in ("precomputed", "all"):
        try:
            precomputed_ratios = precomputed_part(args, (pipeline, python_model), base)
        except BaseException:
            teardown(pipeline, python_model)
            shutil.rmtree(base, ignore_errors=True)
            raise
    if args.part == "precomputed":
        teardown(pipeline, python_model)
        shutil.rmtree(base, ignore_errors=True)
        print(f"load at end: {os.getloadavg()}")
        for model, ratio in precomputed_ratios.items():
            print(f"p50 precomputed / online ({args.items} items) {model}: {ratio:.2f}x (goal <= 0.5)")
        return
    port = free_port()
    proc = start_gateway(port, base, ["--explain-permutations", str(args.explain_permutations),
                                      "--explain-concurrency", str(args.explain_concurrency)])
    ratios: dict[str, float] = {}
    try:
        url = f"http://127.0.0.1:{port}"
        for model in (pipeline, python_model):
            one_round(url, model, 3, args.items)  # warm-up: connections, model config, statistics
            rounds = [one_round(url, model, args.requests, args.items) for _ in range(args.rounds)]
            for r, figures in enumerate(rounds):
                print(f"{model} round {r + 1}: " + ", ".join(
                    f"{kind} p50 {p50:.1f} ms p99 {p99:.1f} ms {rps:.1f} req/s"
                    for kind, (p50, p99, rps) in figures.items()))
            medians = {kind: [statistics.median(r[kind][i] for r in rounds) for i in range(3)]
                       for kind in ("plain", "explain")}
            print(f"{model} medians of {args.rounds} rounds: " + ", ".join(
                f"{kind} p50 {m[0]:.1f} ms p99 {m[1]:.1f} ms {m[2]:.1f} req/s" for kind, m in medians.items()))
            ratios[model] = medians["explain"][0] / medians["plain"][0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        teardown(pipeline, python_model)
        shutil.rmtree(base, ignore_errors=True)
        print(f"load at end: {os.getloadavg()}")
    for model, ratio in precomputed_ratios.items():
        print(f"p50 precomputed / online ({args.items} items) {model}: {ratio:.2f}x (goal <= 0.5)")
    for model, ratio in ratios.items():
        print(f"p50 explain / plain ({args.items} items) {model}: {ratio:.2f}x (goal <= 3)")


if __name__ == "__main__":
    main()
