"""Unit tests of the gateway's raw-ASGI helpers: generated request ids and access-log lines."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from modelops.gateway.http import json_line, new_request_id


def test_generated_request_ids_are_32_hex_digits_and_distinct() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_its_own_id_prefix() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave without running pytest's teardown
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:16] != new_request_id()[:16]


def test_json_line_writes_unknown_types_as_text() -> None:
    line = json_line({"path": Path("/v1/feedback"), "status": 202, "ms": 0.25, "name": "é"})
    assert json.loads(line) == {"path": "/v1/feedback", "status": 202, "ms": 0.25, "name": "é"}
    assert "\n" not in line
