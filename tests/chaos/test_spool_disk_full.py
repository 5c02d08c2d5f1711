"""Chaos: the gateway's spool disk fills up.

A gateway spools to a 64 KiB tmpfs (a real ENOSPC, not the spool's byte budget, which stays
at its 1 GiB default) while the object store is unreachable, so nothing drains. Feedback is
acknowledged (202) until the disk is full, then refused with 503 + Retry-After. A gateway
restarted on the same spool with the store reachable uploads the backlog: every
acknowledged record is in the object store — nothing was acknowledged that was not kept.
Needs root (mount); skipped with that reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from modelops.config import Settings, stack_port_env
from modelops.objectstore import ObjectStore
from modelops.process import free_port
from tests.support.eventlogs import logged_values
from tests.support.stackops import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ROOT = Path(__file__).resolve().parents[2]
DISK_KIB = 64


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "spoolfs"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the spool needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_KIB}k", "tmpfs", str(mount_point)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _gateway(cfg: Settings, spool: Path, log: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    environ = {**os.environ, **stack_port_env(int(os.environ.get("MODELOPS_TEST_PORT_BASE", "24000"))),
               "MODELOPS_HOME": str(cfg.home), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
               "PYTHONPATH": str(ROOT / "plugins"), **env}
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "modelops.gateway", "serve", "--port", str(port),
                                 "--workers", "1", "--spool-dir", str(spool), "--segment-max-age-s", "0.5"],
                                env=environ, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    wait_for(lambda: proc.poll() is None and requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok, 60,
             f"gateway on {port} healthy (log {log})")
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def test_spool_disk_full_refuses_with_503_and_loses_nothing_acknowledged(
        stack_settings: Settings, object_store: ObjectStore, small_disk: Path, tmp_path: Path) -> None:
    from modelops.gateway.feedback.tokens import TokenClaims, issue_token, resolve_secret
    from modelops.records import LOG_PREFIXES

    spool = small_disk / "spool"
    port = free_port()
    proc = _gateway(stack_settings, spool, tmp_path / "gw.log", port, MODELOPS_S3_ENDPOINT_URL="http://127.0.0.1:1")
    secret = resolve_secret(stack_settings.feedback_secret, stack_settings.home)
    run = uuid.uuid4().hex[:8]
    acknowledged: list[str] = []
    refused: list[requests.Response] = []
    try:
        for k in range(20000):  # bounded: a 64 KiB disk holds a few hundred records
            token = issue_token(secret, TokenClaims(f"diskfull-{run}-{k}", "m", 1, "1" * 12, time.time()))
            response = requests.post(f"http://127.0.0.1:{port}/v1/feedback", timeout=10,
                                     json={"feedback_token": token, "action": "click", "timestamp": time.time()})
            if response.status_code == 202:
                acknowledged.append(token)
            else:
                refused.append(response)
                if len(refused) >= 10:
                    break
    finally:
        _stop(proc)
    assert acknowledged, "records were acknowledged before the disk filled"
    assert len(refused) >= 10, "the full disk refused new records"
    assert all(r.status_code == 503 and r.headers.get("Retry-After") for r in refused), \
        [(r.status_code, r.text[:200]) for r in refused]
    assert refused[0].json()["error"] == "spool_full"
    print(f"spool disk ({DISK_KIB} KiB) full after {len(acknowledged)} acknowledged records; then 503 + Retry-After")

    # Back with the store reachable, on the same spool: the backlog drains and nothing acknowledged is missing.
    started = time.monotonic()
    proc = _gateway(stack_settings, spool, tmp_path / "gw2.log", port)
    wanted = set(acknowledged)

    try:
        wait_for(lambda: logged_values(object_store, "feedback", "feedback_token", wanted) == wanted, 90,
                 "every acknowledged record in the object store", poll_s=1.0)
    finally:
        _stop(proc)
    # A batch the full disk refused was cut back, not left as torn bytes in front of later records.
    assert not (spool / "quarantine").exists(), sorted((spool / "quarantine").iterdir())
    assert not list(object_store.list_keys(LOG_PREFIXES["feedback"].rstrip("/") + "/_quarantine/"))
    print(f"backlog of {len(wanted)} records uploaded {time.monotonic() - started:.1f} s after the restart")
