"""ECMA-262 regex oracle for tests: node's own ``RegExp`` (shares nothing with Python ``re`` or Rust)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence

import pytest

_SCRIPT = (
    "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{"
    "const cases=JSON.parse(s);"
    "process.stdout.write(JSON.stringify(cases.map(([p,t])=>new RegExp(p,'u').test(t))));});"
)


def node_or_skip() -> str:
    """The node binary (the test needs a real ECMA-262 engine, and says so when there is none)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the ECMA-262 oracle is node's RegExp (apt-get install nodejs)")
    return node


def ecma_search(cases: Sequence[tuple[str, str]]) -> list[bool]:
    """``RegExp(pattern, 'u').test(text)`` for each ``(pattern, text)``, evaluated by node in one call."""
    out = subprocess.run([node_or_skip(), "-e", _SCRIPT], input=json.dumps(list(cases)), capture_output=True,
                         text=True, check=True, timeout=120)
    return list(json.loads(out.stdout))
