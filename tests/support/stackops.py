"""Helpers of the restart and chaos tests: wait on a condition, kill a service of a stack, small traffic."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil
import requests

from modelops import process
from modelops.config import Settings
from modelops.stack.launcher import all_services

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout_s: float, what: str, *, poll_s: float = 0.2) -> T:
    """The first truthy value of ``check()`` (exceptions count as falsy) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as exc:  # the thing waited on may fail while it comes back
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {str(last)[:300]})")
        time.sleep(poll_s)


def gateway_metric(gateway: str, name: str, **labels: str) -> float:
    """The sum of the gateway's samples of ``name`` with ``labels`` (its ``/metrics``; 0 when absent).

    Read with the canary's parser, which keeps the names as exposed.
    """
    from modelops.canary.promtext import parse

    text = requests.get(f"{gateway}/metrics", timeout=10).text
    return sum(s.value for s in parse(text) if s.name == name and all(s.label(k) == v for k, v in labels.items()))


def service_pid(cfg: Settings, name: str) -> int | None:
    service = next(s for s in all_services(cfg) if s.name == name)
    return process.live_pid(service.pid_file(cfg.home))


def _family(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _signal_family(pid: int, sig: int) -> None:
    """``sig`` to the process group and to every descendant (Triton's python stubs hold its ports)."""
    family = _family(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _ports_free(cfg: Settings, name: str) -> bool:
    service = next(s for s in all_services(cfg) if s.name == name)
    return not any(process.port_in_use(cfg.bind_host, port) for port in service.ports)


def kill_service(cfg: Settings, name: str, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to one service and its descendants (SIGKILL: a crash); returns its PID once its ports are free."""
    pid = service_pid(cfg, name)
    assert pid is not None, f"{name} is not running"
    _signal_family(pid, sig)
    wait_for(lambda: service_pid(cfg, name) is None, 30, f"{name} (pid {pid}) gone")
    wait_for(lambda: _ports_free(cfg, name), 30, f"{name}'s ports free")
    return pid


def kill_services(cfg: Settings, names: Sequence[str], *, require_running: bool = True) -> list[str]:
    """SIGKILL the named services at once (each with its descendants), then wait until all are gone.

    Returns the names that were running; ``require_running`` makes a stopped one an error.
    """
    killed = []
    for name in names:
        pid = service_pid(cfg, name)
        assert pid is not None or not require_running, f"{name} is not running"
        if pid is not None:
            _signal_family(pid, signal.SIGKILL)
            killed.append(name)
    for name in killed:
        wait_for(lambda n=name: service_pid(cfg, n) is None, 30, f"{name} gone")  # type: ignore[misc]
        wait_for(lambda n=name: _ports_free(cfg, n), 30, f"{name}'s ports free")  # type: ignore[misc]
    return killed


def kill_everything(cfg: Settings) -> list[str]:
    """SIGKILL every running service of the stack at once (a power cut); returns their names."""
    return kill_services(cfg, [s.name for s in all_services(cfg)], require_running=False)


@dataclass
class PredictLoop:
    """Predictions in a loop (bounded rate), recording each status; used under chaos."""

    url: str
    model: str
    body: Callable[[int], dict[str, Any]]
    statuses: list[tuple[float, int, str]] = field(default_factory=list)

    def once(self, k: int) -> requests.Response | None:
        try:
            response = requests.post(f"{self.url}/v1/models/{self.model}/predict", json=self.body(k), timeout=10)
        except requests.RequestException:
            self.statuses.append((time.monotonic(), 0, ""))
            return None
        self.statuses.append((time.monotonic(), response.status_code, response.headers.get("Retry-After", "")))
        return response
