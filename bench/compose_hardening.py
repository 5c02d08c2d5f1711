"""Benchmark: the production topology before and after its hardening (issue 27), side by side.

- **up --wait**: the topology of revision ``--before`` (default 5bea0bc, the last before 8c02219 put
  the services on networks by role, made the containers read-only, capability-less and non-root, and
  authenticated Triton's repository API, Spark, Redis and PostgreSQL) and of this working tree, each
  from its own images (the project image and the stand-ins of ``docker-compose.test.yml``, built first
  under ``modelops:bench-<side>`` / ``modelops-bench-<side>-standin-*``, so ``make compose-test``'s
  images are untouched), with ``make compose-test``'s command (``up -d --wait --scale gateway=3
  --scale triton=3``, its test override, a throw-away env file from that side's
  ``docker/compose-env.sh``). Rounds alternate which side goes first; after each up the topology's
  memory (``docker stats``), then ``down -v``. Goal: after / before ≤ 1.10.
- **Spark**: the drift job (``bench/drift.py``'s data, ``bench/scale.py``'s warm driver) on three
  standalone clusters on loopback started from pyspark's ``spark-class`` (2 workers × 1 core each):
  plain, with RPC authentication as the topology runs it (``spark.authenticate``, the secret in the
  daemons' environment), and authenticated and encrypted (``spark.network.crypto.enabled``); rounds
  alternate the order, the three results are asserted equal, the masters' logs are checked for the
  security manager's "authentication enabled/disabled". Ratios authenticated / plain and encrypted /
  plain last.

The release story's time before and after cannot be replayed side by side here (each side's
checks take ~10 minutes of a 2-core machine): ``make compose-test``'s own timings are the figure.

    .venv/bin/python bench/compose_hardening.py                      # 3 rounds of each
    .venv/bin/python bench/compose_hardening.py --parts spark --rows 100000
    .venv/bin/python bench/compose_hardening.py --parts up --without 0d2150a  # the preloaded worker apart
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

from bench.compose import COMPOSE, DOCKER, PROJECT, build, engine_running, load, run, topology_memory_gb  # noqa: E402

BEFORE = "5bea0bc9b26a3ca66aae24700251c25f343e1071"  # 8c02219^: the topology before the hardening
STANDINS = ("postgres", "nginx", "prometheus", "pushgateway", "alertmanager", "redis")
GOAL = 1.10


@dataclass(frozen=True)
class Side:
    """One topology: its tree (compose files, Dockerfiles), its images, its env file."""

    name: str
    tree: Path
    work: Path

    @property
    def image(self) -> str:
        return f"modelops:bench-{self.name}"

    @property
    def override(self) -> Path:
        return self.work / f"{self.name}-test-override.yml"

    @property
    def env_file(self) -> Path:
        return self.work / f"{self.name}.env"

    def prepare(self, port_base: int) -> None:
        """Build this side's images; write its override (stand-ins renamed) and env file."""
        started = time.monotonic()
        build(self.image, self.tree / "docker/Dockerfile", self.tree)
        for standin in STANDINS:
            build(f"modelops-bench-{self.name}-standin-{standin}:latest",
                  self.tree / f"docker/standins/{standin}.Dockerfile", self.tree / "docker/standins")
        text = (self.tree / "docker-compose.test.yml").read_text()
        self.override.write_text(text.replace("modelops-standin-", f"modelops-bench-{self.name}-standin-"))
        env = subprocess.run([str(self.tree / "docker/compose-env.sh"), str(port_base)], capture_output=True,
                             text=True, check=True, cwd=self.tree, env={**os.environ, "PYTHON": sys.executable})
        self.env_file.write_text(env.stdout + f"MODELOPS_IMAGE={self.image}\n")
        self.env_file.chmod(0o600)
        print(f"  {self.name}: images built ({time.monotonic() - started:.0f} s)", flush=True)

    def compose(self, *args: str) -> list[str]:
        return [COMPOSE, "-p", PROJECT, "--project-directory", str(self.tree), "--env-file", str(self.env_file),
                "-f", str(self.tree / "docker-compose.yml"), "-f", str(self.override), *args]

    def up_once(self) -> tuple[float, float]:
        """(seconds of up --wait, GB of memory once healthy); the topology is down again after."""
        clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
        try:
            seconds = run(self.compose("up", "-d", "--wait", "--wait-timeout", "900", "--no-build",
                                       "--scale", "gateway=3", "--scale", "triton=3"), env=clean)
            time.sleep(5)  # settle after the last health check before reading memory
            return seconds, topology_memory_gb()
        finally:
            subprocess.run(self.compose("down", "-v", "--remove-orphans", "--timeout", "20"), env=clean,
                           capture_output=True, check=False)

    def remove_images(self) -> None:
        tags = [self.image, *(f"modelops-bench-{self.name}-standin-{s}:latest" for s in STANDINS)]
        subprocess.run([DOCKER, "image", "rm", "-f", *tags], capture_output=True, check=False)


def _tree(work: Path, name: str, revision: str) -> Path:
    """A revision's files (``git archive``) in ``work/name``."""
    tree = work / name
    tree.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _without(work: Path, commit: str) -> Side:
    """This revision (HEAD) with ``commit``'s change to the compose file taken back: a later change that is
    not part of the hardening (e.g. 0d2150a, the preloaded Celery worker) measured apart from it."""
    tree = _tree(work, f"tree-without-{commit}", "HEAD")
    patch = subprocess.run(["git", "show", "--format=", commit, "--", "docker-compose.yml"], cwd=ROOT, check=True,
                           capture_output=True).stdout
    subprocess.run(["git", "apply", "-R"], cwd=tree, input=patch, check=True)
    return Side(f"after-without-{commit[:7]}", tree, work)


def bench_up(args: argparse.Namespace, work: Path) -> dict[str, list[tuple[float, float]]]:
    sides = [Side("before", _tree(work, "before-tree", args.before), work), Side("after", ROOT, work),
             *(_without(work, commit) for commit in args.without)]
    subprocess.run([str(ROOT / "docker/engine.sh"), "base"], check=True)
    for side in sides:
        side.prepare(args.compose_port_base)
    results: dict[str, list[tuple[float, float]]] = {side.name: [] for side in sides}
    try:
        for r in range(args.rounds):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:  # each side goes first in turn
                seconds, memory = side.up_once()
                results[side.name].append((seconds, memory))
                print(f"  round {r + 1} {side.name:22s} up --wait {seconds:6.1f} s, memory {memory:.2f} GB "
                      f"(load {load()})", flush=True)
    finally:
        for side in sides:
            side.remove_images()
    return results


def _check_executor_flags(name: str, work_dir: Path, *, crypto: bool) -> None:
    """Each executor's launch command (its worker logs it) carries the authentication and encryption flags
    that cluster was meant to run with: encryption negotiated off would look the same in the timings."""
    commands = [line for f in work_dir.glob("app-*/*/stderr") for line in f.read_text().splitlines()
                if "Spark Executor Command" in line]
    assert commands, f"{name}: no executor launch command under {work_dir}"
    for command in commands:
        assert ("-Dspark.authenticate=true" in command) == (name != "plain"), f"{name}: {command}"
        assert ("-Dspark.network.crypto.enabled=true" in command) == crypto, f"{name}: {command}"
    print(f"  {name}: {len(commands)} executors launched with authenticate={name != 'plain'}, crypto={crypto}",
          flush=True)


def bench_spark(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    from bench._stack import SparkCluster
    from bench.drift import generate
    from bench.scale import Driver, _differences

    base, cur = generate(args.drift_cache, args.rows, 7)
    secret = secrets.token_urlsafe(24)
    clusters = {"plain": SparkCluster(work / "spark-plain", args.spark_port),
                "auth": SparkCluster(work / "spark-auth", args.spark_port + 50, auth_secret=secret),
                "auth+crypto": SparkCluster(work / "spark-crypto", args.spark_port + 100, auth_secret=secret,
                                            crypto=True)}
    drivers: dict[str, Driver] = {}
    try:
        for name, cluster in clusters.items():
            cluster.start()
            env = {**cluster.env(), "MODELOPS_SPARK_DRIVER_MEMORY": "1g"}
            drivers[name] = Driver(cluster.master_url, base, cur, args.rows, work / "logs" / f"drift-{name}.log", env)
            log = (cluster.home / "logs" / "spark-master.log").read_text()
            expected = "authentication disabled" if name == "plain" else "authentication enabled"
            assert expected in log, f"{name}: the master's log does not say {expected!r}"
            print(f"  {name}: cluster at {cluster.master_url}, {expected}, driver warm", flush=True)
        results: dict[str, list[float]] = {name: [] for name in clusters}
        for r in range(args.rounds):
            summaries = {}
            order = list(drivers) if r % 2 == 0 else list(drivers)[::-1]
            for name in order:
                seconds, summaries[name] = drivers[name].run()
                results[name].append(seconds)
            for name in ("auth", "auth+crypto"):
                differences = _differences(summaries["plain"], summaries[name])
                assert not differences, f"{name} and plain differ:\n  " + "\n  ".join(differences[:10])
            print(f"  round {r + 1}: " + ", ".join(f"{n} {results[n][-1]:.2f} s" for n in clusters)
                  + "; results equal", flush=True)
        for name, cluster in clusters.items():
            _check_executor_flags(name, cluster.home / "spark-work", crypto=name == "auth+crypto")
        return results
    finally:
        for driver in drivers.values():
            driver.close()
        for cluster in clusters.values():
            cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="up,spark", help="comma list of: up, spark")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=BEFORE, help="the revision before the hardening")
    parser.add_argument("--without", action="append", default=[], metavar="COMMIT",
                        help="also up HEAD with this commit's compose change taken back (repeatable)")
    parser.add_argument("--compose-port-base", type=int, default=28500)
    parser.add_argument("--rows", type=int, default=200_000, help="drift rows per side")
    parser.add_argument("--spark-port", type=int, default=22700, help="the three masters here, +50 and +100")
    parser.add_argument("--drift-cache", type=Path, default=Path("/tmp/modelops-drift-bench"))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if args.rounds < 3 or not parts or parts - {"up", "spark"}:
        parser.error("--rounds: at least 3 (medians); --parts: a comma list of up, spark")
    print(f"load at start: {load()}", flush=True)
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="modelops-bench-hardening-") as tmp:
        work = Path(tmp)
        if "spark" in parts:
            jobs = bench_spark(args, work)
            med = {name: statistics.median(seconds) for name, seconds in jobs.items()}
            print("drift job medians: " + ", ".join(f"{n} {s:.2f} s" for n, s in med.items()), flush=True)
            summary += [f"ratio Spark job authenticated / plain: {med['auth'] / med['plain']:.2f}",
                        f"ratio Spark job authenticated+encrypted / plain: {med['auth+crypto'] / med['plain']:.2f}"]
        if "up" in parts:
            engine_was_running = engine_running()
            subprocess.run([str(ROOT / "docker/engine.sh"), "start"], check=True)
            try:
                ups = bench_up(args, work)
            finally:
                if not engine_was_running:  # stop what we started (by its PID, through engine.sh)
                    subprocess.run([str(ROOT / "docker/engine.sh"), "stop"], check=False)
            med_up = {n: statistics.median(r[0] for r in rows) for n, rows in ups.items()}
            med_mem = {n: statistics.median(r[1] for r in rows) for n, rows in ups.items()}
            print("up --wait medians: " + ", ".join(f"{n} {s:.1f} s ({med_mem[n]:.2f} GB)" for n, s in med_up.items()),
                  flush=True)
            for name in med_up.keys() - {"before"}:
                summary += [f"ratio memory {name} / before: {med_mem[name] / med_mem['before']:.2f}"]
            for name in med_up.keys() - {"before", "after"}:
                summary += [f"ratio up --wait {name} / before: {med_up[name] / med_up['before']:.2f}"]
            summary += [f"ratio up --wait after / before: {med_up['after'] / med_up['before']:.2f} "
                        f"(goal <= {GOAL:.2f})"]
    print(f"load at end: {load()}")
    for line in summary:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
