"""Benchmark: cost per request of the edge contract check, jsonschema-rs (kept) vs the alternatives.

No stack needed. The same documents (the valid request of the README and one breaking the
``user_id`` pattern) are checked by, alternating in each round:

- ``kept``: :class:`modelops.gateway.protocol.contract.RequestContract` (jsonschema-rs ``is_valid``,
  plus the first error turned into the 400 body when the document is refused);
- ``closures``: the hand-written compiler the gateway used before (Python ``re``; it also
  accepted ``"u1\\n"``), read from git history (``--closures-rev``) when the clone has it;
- ``jsonschema``: the ``jsonschema`` package's Draft202012Validator (the anchor of the old
  agreement test; Python ``re``).

Prints the load at start and end, the median microseconds per check over ``--rounds``
rounds of ``--n`` checks, and last the ratio kept / closures (or kept / jsonschema when the
old compiler is not in the clone's history).

    .venv/bin/python bench/contract.py --n 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

GOOD = {"user_id": "u_000123", "item_ids": ["i_004711", "i_000042", "i_000007", "i_000001"], "timestamp": 1764460800}
BAD = {**GOOD, "user_id": "u 123"}


def _closures(rev: str) -> Callable[[Any], Any] | None:
    """The previous hand-written compiler's check, loaded from git (None when not available)."""
    try:
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:plugins/modelops/gateway/contract.py"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("old_contract")
    sys.modules["old_contract"] = module  # dataclasses look their module up
    exec(compile(source, "old_contract.py", "exec"), module.__dict__)
    # The old compiler read the file the recommender's contract was then; tests/golden holds that schema.
    return module.load_contract(ROOT / "tests/golden/recommender.request.schema.json").validate  # type: ignore[no-any-return]


def _time(check: Callable[[Any], Any], doc: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        check(doc)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--closures-rev", default="23f41b0")
    args = parser.parse_args()

    import jsonschema

    from modelops.gateway.protocol.contract import compile_contract
    from modelops.modelspec.recommender import recommender_contract

    contract = compile_contract(recommender_contract())
    reference = jsonschema.Draft202012Validator(contract.schema)
    contenders: dict[str, Callable[[Any], Any]] = {
        "kept": contract.validate,
        "jsonschema": lambda doc: next(reference.iter_errors(doc), None),
    }
    old = _closures(args.closures_rev)
    if old is not None:
        contenders["closures"] = old
    print(f"load at start: {os.getloadavg()}  ({os.cpu_count()} cpus)")
    print("'u1\\n' accepted: " + ", ".join(
        f"{name}={check({**GOOD, 'user_id': 'u1' + chr(10)}) is None}" for name, check in contenders.items()))
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for kind, doc in (("valid", GOOD), ("refused", BAD)):
            for name, check in contenders.items():
                times.setdefault((name, kind), []).append(_time(check, doc, args.n))
    for (name, kind), values in sorted(times.items()):
        print(f"  {name:<10} {kind:<8} median {statistics.median(values):8.2f} us/check  rounds {values}")
    print(f"load at end: {os.getloadavg()}")
    anchor = "closures" if old is not None else "jsonschema"
    for kind in ("valid", "refused"):
        ratio = statistics.median(times[("kept", kind)]) / statistics.median(times[(anchor, kind)])
        print(f"ratio kept / {anchor} ({kind}): {ratio:.3f}")


if __name__ == "__main__":
    main()
