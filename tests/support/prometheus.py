"""A real Prometheus server on loopback for integration tests.

The binary is Debian 12's ``prometheus`` package, downloaded with ``apt-get download`` and
unpacked with ``dpkg-deb -x`` into ``.cache/prometheus/root`` (never installed: the
package's maintainer scripts would start a service listening on every interface). The
Makefile's ``prometheus`` target does the same steps; :func:`prometheus_binary` repeats
them when the cache is missing. ``MODELOPS_PROMETHEUS_BIN`` points at another binary.

:class:`PrometheusServer` runs it with a throw-away TSDB and a generated config, bound to
``127.0.0.1``, and stops it by its PID.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "prometheus"
CACHED_BINARY = CACHE_DIR / "root" / "usr" / "bin" / "prometheus"
BIN_ENV = "MODELOPS_PROMETHEUS_BIN"


class PrometheusUnavailable(RuntimeError):
    """The Prometheus binary is neither cached nor obtainable."""


def _run(command: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def fetch_binary(cache_dir: Path = CACHE_DIR) -> Path:
    """Download Debian's prometheus package and unpack it (no install) under ``cache_dir/root``.

    Raises:
        PrometheusUnavailable: apt-get or dpkg-deb is missing or failed (their output is in the message).
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    for old in cache_dir.glob("prometheus_*.deb"):
        old.unlink()
    try:
        done = _run(["apt-get", "download", "prometheus"], cache_dir)
        if done.returncode != 0:  # an empty package index: refresh it once (needs root)
            update = _run(["apt-get", "update", "-qq"], cache_dir)
            done = _run(["apt-get", "download", "prometheus"], cache_dir)
            if done.returncode != 0:
                raise PrometheusUnavailable(
                    f"apt-get download prometheus failed: {done.stderr.strip()[-500:]} "
                    f"(apt-get update: rc {update.returncode} {update.stderr.strip()[-300:]})")
        debs = sorted(cache_dir.glob("prometheus_*.deb"))
        if not debs:
            raise PrometheusUnavailable(f"apt-get download prometheus left no .deb in {cache_dir}")
        unpacked = _run(["dpkg-deb", "-x", str(debs[-1]), "root/"], cache_dir)
        if unpacked.returncode != 0:
            raise PrometheusUnavailable(f"dpkg-deb -x {debs[-1].name} failed: {unpacked.stderr.strip()[-500:]}")
    except (OSError, subprocess.SubprocessError) as exc:
        raise PrometheusUnavailable(f"cannot fetch Debian's prometheus package: {exc}") from exc
    for deb in cache_dir.glob("prometheus_*.deb"):
        deb.unlink()
    binary = cache_dir / "root" / "usr" / "bin" / "prometheus"
    if not os.access(binary, os.X_OK):
        raise PrometheusUnavailable(f"the unpacked package has no executable {binary}")
    return binary


def prometheus_binary() -> Path:
    """``$MODELOPS_PROMETHEUS_BIN``, else the cached unpacked package, else fetched now.

    Raises:
        PrometheusUnavailable: with the reason, when none of these gives an executable.
    """
    explicit = os.environ.get(BIN_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise PrometheusUnavailable(f"{BIN_ENV}={explicit} is not an executable file")
        return Path(explicit)
    if os.access(CACHED_BINARY, os.X_OK):
        return CACHED_BINARY
    return fetch_binary()


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: a name and the ``http://host:port/path`` URLs of its targets."""

    name: str
    urls: tuple[str, ...]


def render_config(jobs: Sequence[ScrapeJob], interval_s: float) -> str:
    """A prometheus.yml (JSON is YAML) scraping every job every ``interval_s`` seconds."""
    interval = f"{int(interval_s * 1000)}ms"
    scrape_configs = []
    for job in jobs:
        by_path: dict[str, list[str]] = {}
        for url in job.urls:
            parsed = urllib.parse.urlsplit(url)
            by_path.setdefault(parsed.path or "/metrics", []).append(parsed.netloc)
        if len(by_path) != 1:
            raise ValueError(f"job {job.name}: one metrics path per job, got {sorted(by_path)}")
        ((path, hosts),) = by_path.items()
        scrape_configs.append({"job_name": job.name, "metrics_path": path, "scrape_interval": interval,
                               "scrape_timeout": interval, "static_configs": [{"targets": hosts}]})
    return json.dumps({"global": {"scrape_interval": interval, "evaluation_interval": interval},
                       "scrape_configs": scrape_configs}, indent=2)


class PrometheusServer:
    """A Prometheus process on ``127.0.0.1:<port>``; a context manager that stops it by PID."""

    def __init__(self, binary: Path, port: int, workdir: Path, jobs: Sequence[ScrapeJob],
                 interval_s: float = 1.0) -> None:
        self.binary = binary
        self.port = port
        self.workdir = workdir
        self.jobs = tuple(jobs)
        self.interval_s = interval_s
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout_s: float = 60.0) -> None:
        """Start the server and wait until ``/-/ready`` answers.

        Raises:
            RuntimeError: the process exited or never became ready (the log tail is in the message).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(render_config(self.jobs, self.interval_s))
        command = [str(self.binary), f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                   f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                   "--log.level=warn"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready on {self.url} after {ready_timeout_s:.0f} s: {self.log_tail()}")

    def stop(self) -> None:
        """Terminate the process by its PID (kill after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET ``/api/v1/<path>``; the parsed JSON body, also for a 4xx answer (Prometheus explains it there)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read().decode("utf-8"))

    def target_health(self) -> dict[str, list[str]]:
        """Each job's target health values (``up``, ``down``, ``unknown``)."""
        health: dict[str, list[str]] = {}
        for target in self.api("targets")["data"]["activeTargets"]:
            health.setdefault(target["labels"]["job"], []).append(target["health"])
        return health

    def wait_until_up(self, job_names: Sequence[str], timeout_s: float = 30.0) -> None:
        """Wait until every target of the named jobs was scraped successfully.

        Raises:
            AssertionError: a target is still not up after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        health: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            health = self.target_health()
            if all(health.get(job) and set(health[job]) == {"up"} for job in job_names):
                return
            time.sleep(self.interval_s / 2)
        raise AssertionError(f"targets of {list(job_names)} not up after {timeout_s:.0f} s: {health}")

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
