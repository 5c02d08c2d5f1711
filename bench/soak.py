"""Soak: 30 minutes of generated traffic with a release every 5 minutes; nothing may grow without bound.

Not part of CI (``make soak``). On its own stack (the canary benchmark's set-up: object
store, MLflow, Triton, gateway on ports 26xxx in a temporary ``MODELOPS_HOME``), a stable
version serves ``--rate`` req/s of generated traffic for ``--minutes``; every
``--release-every-min`` minutes a release runs with the default spec (steps 25,50,100),
alternating a good and a 5 %-faulty candidate, through the same Runner the Airflow operator
drives (``bench/canary.py``'s trial). Once a minute it samples the gateway's and Triton's
RSS and open file descriptors, the gateway's spool size and the gateway's p99 over that
minute (from its latency histogram).

Pass when every decision is right (good promoted, faulty rolled back) and no resource grows
without bound: for RSS, file descriptors and spool bytes, the mean of the last third of the
samples is at most ``--growth`` (default 1.25) times the mean of the first third, plus a
small absolute slack (16 MiB, 16 descriptors, 4 MiB of spool). Prints the samples, the
decisions and PASS/FAIL last; exit code 1 on FAIL.

    make soak                                          # 30 min, releases every 5 min
    .venv/bin/python bench/soak.py --minutes 6 --release-every-min 2   # a short rehearsal
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
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

import canary as bench_canary  # bench/canary.py: stack, traffic and trial helpers

SLACK = {"gateway_rss_mib": 16.0, "triton_rss_mib": 16.0, "gateway_fds": 16.0, "triton_fds": 16.0,
         "spool_mib": 4.0}


@dataclass(frozen=True)
class Sample:
    minute: int
    gateway_rss_mib: float
    triton_rss_mib: float
    gateway_fds: float
    triton_fds: float
    spool_mib: float
    p99_ms: float


def _process(home: Path, name: str) -> Any:
    import psutil

    from modelops.process import live_pid

    pid = live_pid(home / "run" / f"{name}.pid")
    if pid is None:
        raise RuntimeError(f"soak: the {name} process of {home} is not running")
    return psutil.Process(pid)


def _tree_rss_fds(proc: Any) -> tuple[float, float]:
    import psutil

    rss = fds = 0.0
    for p in (proc, *proc.children(recursive=True)):
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
        except psutil.Error:
            continue
    return rss / 2**20, fds


def _spool_mib(home: Path) -> float:
    root = home / "gateway" / "spool"
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20 if root.exists() else 0.0


def _latency(cfg: Any) -> dict[float, float]:
    import urllib.request

    from modelops.canary.promtext import parse

    text = urllib.request.urlopen(f"{cfg.gateway_url}/metrics", timeout=5).read().decode()
    buckets: dict[float, float] = {}
    for sample in parse(text):
        if sample.name == f"{bench_canary.LATENCY}_bucket":
            le = sample.label("le")
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def _sampler(cfg: Any, home: Path, samples: list[Sample], stop: threading.Event) -> None:
    from modelops.canary.gates import bucket_quantile

    gateway, triton = _process(home, "gateway"), _process(home, "triton")
    previous, minute = _latency(cfg), 0
    while not stop.wait(60.0):
        minute += 1
        current = _latency(cfg)
        p99 = bucket_quantile(0.99, [(b, current[b] - previous.get(b, 0.0)) for b in current]) * 1000.0
        previous = current
        g_rss, g_fds = _tree_rss_fds(gateway)
        t_rss, t_fds = _tree_rss_fds(triton)
        samples.append(Sample(minute, g_rss, t_rss, g_fds, t_fds, _spool_mib(home), p99))
        print(f"  minute {minute:>3}: gateway {g_rss:7.1f} MiB {g_fds:4.0f} fds | triton {t_rss:7.1f} MiB "
              f"{t_fds:4.0f} fds | spool {samples[-1].spool_mib:6.2f} MiB | p99 {p99:6.1f} ms", flush=True)


def _bounded(samples: list[Sample], growth: float) -> list[str]:
    third = max(1, len(samples) // 3)
    problems = []
    for name, slack in SLACK.items():
        first = statistics.mean(getattr(s, name) for s in samples[:third])
        last = statistics.mean(getattr(s, name) for s in samples[-third:])
        if last > growth * first + slack:
            problems.append(f"{name} grew from {first:.1f} to {last:.1f} (limit {growth:g} x first + {slack:g})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--release-every-min", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--growth", type=float, default=1.25)
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="modelops-soak-"))
    os.environ.update(bench_canary.BENCH_ENV)
    os.environ["MODELOPS_HOME"] = str(home)
    from modelops.canary.params import spec_from_params
    from modelops.config import settings
    from modelops.example.synthetic import WorldSpec
    from modelops.example.train import TrainSpec, train
    from modelops.objectstore import ObjectStore
    from modelops.stack import launcher

    settings.cache_clear()
    cfg = settings()
    print(f"load at start: {os.getloadavg()}; stack on ports {bench_canary.PORT_BASE}+ (home {home})", flush=True)
    launcher.up(cfg, progress=lambda line: None, only=("gateway", "mlflow"))
    samples: list[Sample] = []
    decisions: list[tuple[str, str, float | None]] = []
    stop = threading.Event()
    try:
        store = ObjectStore.from_settings(cfg)
        store.ensure_bucket()
        model = f"soak_{uuid.uuid4().hex[:6]}"
        with bench_canary._quiet():
            trained = train(TrainSpec(world=replace(WorldSpec(), n_requests=1500), hidden=(16,), max_iter=25))
            bench_canary._publish_features(store)
        bench_canary._serve_stable(cfg, store, trained, model)
        spec = spec_from_params({"canary_steps": "25,50,100", "analysis_interval_s": 5, "min_requests": 20})
        documents = [{"variant": "good"}, {"variant": "faulty-errors", "error_rate": 0.05}]
        with bench_canary._traffic(cfg, model, args.rate):
            sampler = threading.Thread(target=_sampler, args=(cfg, home, samples, stop), daemon=True)
            sampler.start()
            started = time.monotonic()
            k = 0
            while time.monotonic() - started < args.minutes * 60.0:
                due = started + k * args.release_every_min * 60.0
                if time.monotonic() >= due:
                    document = documents[k % 2]
                    trial = bench_canary._run_trial(document["variant"], bench_canary._with_variant(trained, document),
                                                    cfg, model, spec, cap_s=180.0)
                    decisions.append((trial.variant, trial.decision, trial.mttr_s))
                    print(f"release {k + 1}: {trial.variant} -> {trial.decision} (MTTR {trial.mttr_s})", flush=True)
                    k += 1
                time.sleep(1.0)
            stop.set()
            sampler.join(timeout=70)
    finally:
        stop.set()
        launcher.down(cfg, progress=lambda line: None)
    wrong = [d for d in decisions if (d[0] == "good") != (d[1] == "promoted")]
    problems = _bounded(samples, args.growth) if len(samples) >= 3 else ["fewer than 3 samples"]
    print(f"load at end: {os.getloadavg()}")
    print(f"{len(decisions)} releases, {len(wrong)} wrong: {decisions}")
    for problem in problems:
        print("  " + problem)
    passed = not wrong and not problems
    print("PASS" if passed else "FAIL")
    if passed:
        shutil.rmtree(home, ignore_errors=True)
    else:
        print(f"state and logs kept in {home}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
