"""Processes the stack starts: start detached, remember by PID, stop exactly those.

A PID file holds the PID and the process' start time, so a recycled PID of some
other program is never mistaken for ours and never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class PidRecord:
    pid: int
    create_time: float
    argv: tuple[str, ...]


def _read_record(pid_file: Path) -> PidRecord | None:
    try:
        data = json.loads(pid_file.read_text())
        return PidRecord(int(data["pid"]), float(data["create_time"]), tuple(data["argv"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_pid(pid_file: Path) -> int | None:
    """The PID recorded in ``pid_file`` if that very process still runs, else None."""
    record = _read_record(pid_file)
    if record is None:
        return None
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.create_time) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return record.pid


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_file: Path,
    pid_file: Path,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in its own session, output appended to ``log_file``; record its PID."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    create_time = psutil.Process(proc.pid).create_time()
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "create_time": create_time, "argv": list(argv)}))
    tmp.replace(pid_file)
    return proc.pid


def stop(pid_file: Path, *, timeout_s: float = 20.0) -> bool:
    """Stop the process recorded in ``pid_file`` and its children. True when one was running.

    Sends SIGTERM to the process group the stack created for it (the process is its
    group leader), waits, then SIGKILLs what is left. Only PIDs that descend from the
    recorded process are signalled.
    """
    pid = live_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        family = []
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        root.terminate()
    _gone, alive = psutil.wait_procs(family, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    pid_file.unlink(missing_ok=True)
    return True


def family_memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes of a process and all its descendants; PSS falls back to RSS."""
    pss = rss = 0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    for proc in procs:
        try:
            full = proc.memory_full_info()
            rss += full.rss
            pss += getattr(full, "pss", full.rss)
        except psutil.Error:
            continue
    return pss, rss


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel has just found free on ``host`` (for a server a test or benchmark starts itself)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts or holds ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
