"""Benchmark: the production topology's images and boot (docker/Dockerfile, docker-compose.yml).

Measured on this machine's Docker engine (docker/engine.sh starts it if needed):

- base image: debootstrap + ``docker import`` (tagged ``modelops-bench/debian:bookworm-slim``, so the
  project image's cache, built on ``debian:bookworm-slim``, is untouched);
- cold project image: ``docker build --no-cache`` (pip's BuildKit cache mount stays warm: downloads are
  not counted, installs are);
- rebuild after a one-line code change, against its anchor: the least any rebuild can do, a
  ``FROM modelops:latest`` + ``COPY plugins`` image of the same change. Alternating rounds, a fresh
  one-line change (a comment in ``plugins/modelops/__init__.py`` of a copy of the build context) each;
- ``up --wait`` to all healthy from built images (docker-compose.yml + docker-compose.test.yml, own
  project name and ports 28500+), then the topology's memory (sum of ``docker stats`` usage), then
  ``down -v``.

Targets (issue 10): rebuild < 60 s, up --wait < 120 s, memory < 6 GB; ratios printed last
(median / target; < 1 meets it).

    .venv/bin/python bench/compose.py --rounds 3 [--skip base,cold]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")
COMPOSE = str(ROOT / ".venv/lib/python3.11/site-packages/compose/docker-compose")
CA = "/etc/ssl/certs/ca-certificates.crt"
PROJECT = "modelops-bench"
TARGETS = {"rebuild_s": 60.0, "up_wait_s": 120.0, "memory_gb": 6.0}
CONTEXT = ("requirements.lock", "pyproject.toml", "README.md", ".env.example", ".dockerignore", "plugins", "dags",
           "examples", "model_repository", "docker")


def engine_running() -> bool:
    """Whether a Docker engine answers (False on a fresh machine where docker.io is not installed yet)."""
    if not os.path.exists(DOCKER):
        return False
    return subprocess.run([DOCKER, "info"], capture_output=True, check=False).returncode == 0


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT) -> float:
    t0 = time.monotonic()
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} … failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - t0


def build_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_BUILDKIT": "1"}


def build(tag: str, dockerfile: Path, context: Path, *extra: str) -> float:
    secret = ["--secret", f"id=ca,src={CA}"] if Path(CA).exists() else []
    return run([DOCKER, "build", "--network", "host", *secret, *extra, "-q", "-t", tag, "-f", str(dockerfile),
                str(context)], env=build_env())


def base_image_s() -> float:
    run([DOCKER, "image", "rm", "-f", "modelops-bench/debian:bookworm-slim"])
    env = {**os.environ, "BASE_IMAGE": "modelops-bench/debian:bookworm-slim", "DOCKER": DOCKER}
    seconds = run([str(ROOT / "docker/engine.sh"), "base"], env=env)
    run([DOCKER, "image", "rm", "-f", "modelops-bench/debian:bookworm-slim"])
    return seconds


def copy_context(dst: Path) -> None:
    for name in CONTEXT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dst / name)


def one_line_change(context: Path, n: int) -> None:
    init = context / "plugins/modelops/__init__.py"
    init.write_text(init.read_text() + f"# bench/compose.py change {n} {time.time()}\n")


def rebuild_rounds(rounds: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    anchor: list[float] = []
    with tempfile.TemporaryDirectory(prefix="modelops-bench-ctx-") as tmp:
        context = Path(tmp)
        copy_context(context)
        build("modelops:bench", context / "docker/Dockerfile", context)  # warm the cache for this context
        anchor_file = context / "anchor.Dockerfile"
        anchor_file.write_text("FROM modelops:latest\nCOPY --chown=50000:0 plugins /opt/modelops/plugins\n")
        (context / ".dockerignore").write_text((context / ".dockerignore").read_text() + "!anchor.Dockerfile\n")
        for n in range(rounds):
            contenders = [("ours", lambda: build("modelops:bench", context / "docker/Dockerfile", context)),
                          ("anchor", lambda: build("modelops:bench-anchor", anchor_file, context))]
            if n % 2:
                contenders.reverse()
            for name, fn in contenders:
                one_line_change(context, n)
                seconds = fn()
                (ours if name == "ours" else anchor).append(seconds)
                print(f"  round {n + 1} {name:6s} rebuild {seconds:6.1f} s", flush=True)
    run([DOCKER, "image", "rm", "-f", "modelops:bench", "modelops:bench-anchor"])
    return ours, anchor


def compose(env_file: Path, *args: str) -> list[str]:
    return [COMPOSE, "-p", PROJECT, "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml"), "-f",
            str(ROOT / "docker-compose.test.yml"), *args]


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def topology_memory_gb() -> float:
    ids = subprocess.run([DOCKER, "ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                         capture_output=True, text=True, check=True).stdout.split()
    out = subprocess.run([DOCKER, "stats", "--no-stream", "--format", "{{.MemUsage}}", *ids], capture_output=True,
                         text=True, check=True).stdout
    total = 0.0
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)\s*([A-Za-z]+)", line)
        if m:
            total += float(m.group(1)) * _UNITS[m.group(2)]
    return total / 2**30


def up_rounds(rounds: int) -> tuple[list[float], list[float]]:
    ups: list[float] = []
    mems: list[float] = []
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    with tempfile.TemporaryDirectory(prefix="modelops-bench-env-") as tmp:
        env_file = Path(tmp) / "env"
        env_file.write_text(subprocess.run([str(ROOT / "docker/compose-env.sh"), "28500"], capture_output=True,
                                           text=True, check=True, env={**os.environ,
                                                                       "PYTHON": sys.executable}).stdout)
        for n in range(rounds):
            try:
                ups.append(run(compose(env_file, "up", "-d", "--wait", "--wait-timeout", "600", "--no-build"),
                               env=clean))
                time.sleep(5)  # settle after the last health check before reading memory
                mems.append(topology_memory_gb())
                print(f"  round {n + 1} up --wait {ups[-1]:6.1f} s, memory {mems[-1]:.2f} GB", flush=True)
            finally:
                subprocess.run(compose(env_file, "down", "-v", "--remove-orphans", "--timeout", "20"), env=clean,
                               capture_output=True, check=False)
    return ups, mems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma list of: base, cold, rebuild, up")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"load at start: {load()}", flush=True)
    engine_was_running = engine_running()
    subprocess.run([str(ROOT / "docker/engine.sh"), "start"], check=True)
    try:
        return _measure(args, skip)
    finally:
        if not engine_was_running:  # stop what we started (by its PID, through engine.sh)
            subprocess.run([str(ROOT / "docker/engine.sh"), "stop"], check=False)


def _measure(args: argparse.Namespace, skip: set[str]) -> int:
    results: dict[str, float] = {}
    if "base" not in skip:
        base = [base_image_s() for _ in range(args.rounds)]
        results["base_s"] = statistics.median(base)
        print(f"base image (debootstrap + import): median {results['base_s']:.1f} s of {len(base)}", flush=True)
    if "cold" not in skip:
        cold = [build("modelops:bench-cold", ROOT / "docker/Dockerfile", ROOT, "--no-cache") for _ in range(1)]
        run([DOCKER, "image", "rm", "-f", "modelops:bench-cold"])
        results["cold_s"] = statistics.median(cold)
        print(f"cold project image (--no-cache, pip cache warm): {results['cold_s']:.1f} s (1 round)", flush=True)
    if "rebuild" not in skip:
        ours, anchor = rebuild_rounds(args.rounds)
        results["rebuild_s"] = statistics.median(ours)
        results["anchor_rebuild_s"] = statistics.median(anchor)
        print(f"rebuild after a one-line change: median {results['rebuild_s']:.1f} s; anchor (COPY onto the "
              f"previous image) {results['anchor_rebuild_s']:.1f} s", flush=True)
    if "up" not in skip:
        ups, mems = up_rounds(args.rounds)
        results["up_wait_s"] = statistics.median(ups)
        results["memory_gb"] = statistics.median(mems)
        print(f"up --wait to healthy: median {results['up_wait_s']:.1f} s; memory median "
              f"{results['memory_gb']:.2f} GB", flush=True)
    print(f"load at end: {load()}")
    if "rebuild_s" in results:
        print(f"ratio rebuild / anchor: {results['rebuild_s'] / results['anchor_rebuild_s']:.2f}")
    for key, target in TARGETS.items():
        if key in results:
            print(f"ratio {key} / target {target:g}: {results[key] / target:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
