"""Benchmark: cold and warm `stack up` per service, and the whole stack's memory.

cold = a fresh state directory (databases created, Triton unpacked); warm = the same
directory after `down` (databases exist). Each round runs cold then warm, in the same
process, on ports 23xxx (so a developer's stack on the default ports is untouched).
Memory is the sum of PSS (proportional set size: shared pages split between the
processes that map them, so the sum does not double-count) over every process of the
stack, children included, measured right after a warm `up`; RSS is printed beside it.

Targets from the foundation issue: warm up to all-healthy < 30 s, cold < 90 s,
whole stack < 3 GB. The ratios printed last are median / target (< 1 meets it).

    .venv/bin/python bench/stack_startup.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

BENCH_ENV = {
    "MODELOPS_S3_PORT": "23310", "MODELOPS_MLFLOW_PORT": "23510", "MODELOPS_TRITON_HTTP_PORT": "23300",
    "MODELOPS_TRITON_GRPC_PORT": "23301", "MODELOPS_TRITON_METRICS_PORT": "23302",
    "MODELOPS_AIRFLOW_PORT": "23380", "MODELOPS_AIRFLOW_WORKER_LOG_PORT": "23393",
    "MODELOPS_AIRFLOW_TRIGGER_LOG_PORT": "23394", "MODELOPS_GATEWAY_PORT": "23400",
    "MODELOPS_POSTGRES_PORT": "23532",
}
TARGETS = {"warm_s": 30.0, "cold_s": 90.0, "memory_gb": 3.0}


def one_up(cfg: object) -> tuple[float, dict[str, float]]:
    from modelops.stack import launcher

    t0 = time.monotonic()
    states = launcher.up(cfg, progress=lambda line: None)  # type: ignore[arg-type]
    total = time.monotonic() - t0
    return total, {s.name: s.seconds_to_healthy or 0.0 for s in states}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    os.environ.update(BENCH_ENV)
    from modelops.config import load_settings
    from modelops.stack import launcher

    cold: list[float] = []
    warm: list[float] = []
    per_service: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
    pss_gb: list[float] = []
    rss_gb: list[float] = []
    for round_no in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="modelops-bench-") as home:
            cfg = load_settings({**os.environ, "MODELOPS_HOME": home})
            try:
                total, services = one_up(cfg)
                cold.append(total)
                for name, secs in services.items():
                    per_service["cold"].setdefault(name, []).append(secs)
                launcher.down(cfg, progress=lambda line: None)
                total, services = one_up(cfg)
                warm.append(total)
                for name, secs in services.items():
                    per_service["warm"].setdefault(name, []).append(secs)
                time.sleep(5)  # let every component finish its start-up allocations
                memory = launcher.memory(cfg)
                pss_gb.append(sum(p for p, _ in memory.values()) / 1e9)
                rss_gb.append(sum(r for _, r in memory.values()) / 1e9)
            finally:
                launcher.down(cfg, progress=lambda line: None)
        print(f"round {round_no}: cold {cold[-1]:.1f} s, warm {warm[-1]:.1f} s, "
              f"PSS {pss_gb[-1]:.2f} GB (RSS {rss_gb[-1]:.2f} GB)", flush=True)

    print("\nper service, median seconds to healthy (cold / warm; Airflow components after the API server):")
    for name in per_service["cold"]:
        print(f"  {name:24} {statistics.median(per_service['cold'][name]):6.1f} / "
              f"{statistics.median(per_service['warm'].get(name, [0.0])):6.1f}")
    print("last round memory per service (PSS MB): "
          + ", ".join(f"{k} {v[0] / 1e6:.0f}" for k, v in memory.items()))
    med = {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
           "memory_gb": statistics.median(pss_gb)}
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"\nmedian over {args.rounds} rounds: cold {med['cold_s']:.1f} s, warm {med['warm_s']:.1f} s, "
          f"stack PSS {med['memory_gb']:.2f} GB (RSS {statistics.median(rss_gb):.2f} GB)")
    print("ratio to target (median / target; < 1 meets it): " + ", ".join(
        f"{key} {med[key] / TARGETS[key]:.2f}" for key in ("warm_s", "cold_s", "memory_gb")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
