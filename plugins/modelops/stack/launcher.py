"""Start, check and stop the embedded stack (``modelops stack up|down|status|logs``).

``up`` is idempotent: healthy services are left alone, dead ones are restarted.
``down`` stops exactly the processes recorded in PID files, never anything by name.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from modelops import process
from modelops.config import Settings
from modelops.errors import StackError
from modelops.stack.airflow_stack import airflow_services
from modelops.stack.observability import stack_services
from modelops.stack.services import Service, gateway, mlflow, object_store, postgres, reconciler, scaler, triton
from modelops.stack.spark_cluster import spark_services

Progress = Callable[[str], None]


def all_services(cfg: Settings) -> list[Service]:
    """The services in start order."""
    services = [object_store(cfg)]
    if cfg.mlflow_backend == "postgresql":
        services.append(postgres(cfg))
    # Spark: none unless MODELOPS_SPARK_CLUSTER_WORKERS > 0
    services += [mlflow(cfg), triton(cfg), reconciler(cfg), gateway(cfg), *spark_services(cfg),
                 *airflow_services(cfg)]
    if cfg.scaling == "on":
        services.append(scaler(cfg))
    return services + stack_services(cfg)  # Prometheus & co. (MODELOPS_OBSERVABILITY)


@dataclass(frozen=True)
class ServiceState:
    name: str
    state: str  # healthy | unhealthy | stopped
    pid: int | None
    url: str
    log_file: Path
    detail: str = ""
    seconds_to_healthy: float | None = None


def _http_json(url: str, timeout: float = 2.0) -> tuple[int, object]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            try:
                return response.status, json.loads(body or b"null")
            except ValueError:
                return response.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, None


def probe(service: Service) -> tuple[bool, str]:
    """(healthy, detail) of one service's health endpoint."""
    url = service.health_url
    if service.health_check is not None:
        return service.health_check()
    try:
        if url.startswith("tcp://"):
            host, port = url[len("tcp://"):].rsplit(":", 1)
            return (process.port_in_use(host, int(port)), "")
        code, body = _http_json(url)
    except (OSError, urllib.error.URLError) as exc:
        return False, f"not answering ({getattr(exc, 'reason', exc)})"
    if code != 200:
        return False, f"HTTP {code}"
    if service.airflow_component:
        component = body.get(service.airflow_component, {}) if isinstance(body, dict) else {}
        status = component.get("status") if isinstance(component, dict) else None
        return status == "healthy", f"{service.airflow_component}: {status}"
    return True, ""


def _state(cfg: Settings, service: Service) -> ServiceState:
    pid = process.live_pid(service.pid_file(cfg.home))
    if pid is None:
        return ServiceState(service.name, "stopped", None, service.url, service.log_file(cfg.home))
    healthy, detail = probe(service)
    return ServiceState(service.name, "healthy" if healthy else "unhealthy", pid, service.url,
                        service.log_file(cfg.home), detail)


def status(cfg: Settings) -> list[ServiceState]:
    """The state of every service, without changing anything."""
    return [_state(cfg, s) for s in all_services(cfg)]


def _failure(cfg: Settings, service: Service, why: str) -> StackError:
    ports = ", ".join(str(p) for p in service.ports) or "-"
    log = service.log_file(cfg.home)
    return StackError(
        f"{service.name} (port {ports}) did not become healthy: {why}\n"
        f"  log: {log}\n  last lines:\n    " + process.tail(log, 15).replace("\n", "\n    ")
    )


def up(cfg: Settings, progress: Progress = print, *, only: Sequence[str] | None = None) -> list[ServiceState]:
    """Bring every service (or ``only`` these and what they depend on) to healthy; returns their states."""
    services = all_services(cfg)
    if only is not None:
        wanted = set(only)
        for service in reversed(services):
            if service.name in wanted:
                wanted.update(service.depends_on)
        unknown = set(only) - {s.name for s in services}
        if unknown:
            raise StackError(f"unknown service(s) {sorted(unknown)}; the stack has {[s.name for s in services]}")
        services = [s for s in services if s.name in wanted]
    started_at = time.monotonic()
    print_lock = threading.Lock()

    def say(line: str) -> None:
        with print_lock:
            progress(line)

    running = {s.name: process.live_pid(s.pid_file(cfg.home)) for s in services}
    to_start = [s for s in services if running[s.name] is None]

    # A process of ours that was just killed can still hold its ports for a moment (a multi-threaded
    # server is reported gone before its last thread closed the sockets): wait a little before refusing.
    taken = [
        f"{s.name}: port {port} on {cfg.bind_host} is already in use by another program"
        for s in to_start for port in s.ports if _listening(cfg.bind_host, port, wait_s=3.0)
    ]
    if taken:
        raise StackError("cannot start the stack, nothing was started:\n  " + "\n  ".join(taken)
                         + "\n  (stop that program, or choose other ports: modelops config)")

    healthy_events = {s.name: threading.Event() for s in services}
    failed = threading.Event()
    timings: dict[str, float] = {}
    errors: list[StackError] = []
    lock = threading.Lock()

    def bring_up(service: Service) -> None:
        for dep in service.depends_on:
            while not healthy_events[dep].wait(0.2):
                if failed.is_set():
                    return
        t0 = time.monotonic()
        try:
            if running[service.name] is None:
                if service.prepare:
                    service.prepare()
                pid = process.start(service.argv, env=service.env, log_file=service.log_file(cfg.home),
                                    pid_file=service.pid_file(cfg.home), cwd=service.cwd)
                say(f"  started {service.name:24} pid {pid}")
            _wait_healthy(cfg, service)
            if service.after_healthy:
                service.after_healthy()
        except StackError as exc:
            with lock:
                errors.append(exc)
            failed.set()
            return
        except Exception as exc:  # a preparation step failed in an unexpected way
            with lock:
                errors.append(_failure(cfg, service, f"{type(exc).__name__}: {exc}"))
            failed.set()
            return
        timings[service.name] = time.monotonic() - (t0 if running[service.name] is None else started_at)
        if running[service.name] is None:
            say(f"  healthy {service.name:24} after {timings[service.name]:5.1f} s")
        healthy_events[service.name].set()

    with ThreadPoolExecutor(max_workers=len(services)) as pool:
        list(pool.map(bring_up, services))
    if errors:
        raise StackError("\n".join(str(e) for e in errors))
    progress(f"  stack healthy in {time.monotonic() - started_at:.1f} s")
    return [
        ServiceState(**{**_state(cfg, s).__dict__, "seconds_to_healthy": timings.get(s.name)})
        for s in services
    ]


def _wait_healthy(cfg: Settings, service: Service) -> None:
    deadline = time.monotonic() + cfg.startup_timeout_s
    detail = ""
    while time.monotonic() < deadline:
        if process.live_pid(service.pid_file(cfg.home)) is None:
            raise _failure(cfg, service, "the process exited")
        healthy, detail = probe(service)
        if healthy:
            return
        time.sleep(0.25)
    raise _failure(cfg, service, f"no healthy answer from {service.health_url} within "
                                 f"{cfg.startup_timeout_s:.0f} s ({detail})")


def down(cfg: Settings, progress: Progress = print) -> list[str]:
    """Stop every running service of this stack (reverse start order); returns the names stopped."""
    stopped = []
    for service in reversed(all_services(cfg)):
        if process.stop(service.pid_file(cfg.home)):
            stopped.append(service.name)
            progress(f"  stopped {service.name}")
    still = [
        f"{s.name}:{port}" for s in all_services(cfg) for port in s.ports
        if s.name in stopped and _listening(cfg.bind_host, port)
    ]
    if still:
        raise StackError(f"ports still listening after stop: {', '.join(still)}")
    return stopped


def _listening(host: str, port: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while process.port_in_use(host, port):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def memory(cfg: Settings) -> dict[str, tuple[int, int]]:
    """(PSS, RSS) bytes per running service, children included."""
    result = {}
    for service in all_services(cfg):
        pid = process.live_pid(service.pid_file(cfg.home))
        if pid is not None:
            result[service.name] = process.family_memory(pid)
    return result


def format_table(states: Sequence[ServiceState]) -> str:
    rows = [("SERVICE", "STATE", "PID", "URL", "LOG")]
    rows += [(s.name, s.state, str(s.pid or "-"), s.url or "-", str(s.log_file)) for s in states]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
