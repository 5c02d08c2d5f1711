"""Benchmark: what a durable 200 costs a prediction, group commit vs the alternatives.

No stack needed: the gateway's own :class:`~modelops.gateway.logs.spool.GroupCommitter` and
segment writer on a spool directory (``--dir``, default under ``$MODELOPS_HOME`` or /tmp;
put it on the disk the gateway's spool uses). ``--concurrency`` coroutines each log
``--n`` prediction records the way ``/predict`` does, one record per simulated request,
alternating per round between:

- ``queued``: ``append_nowait`` (the previous behaviour: answered before the record is on
  disk; lost if the process dies within the flush interval) — the floor;
- ``group``: ``await append`` (kept: the request waits for its batch's write + fdatasync,
  one sync shared by every request queued meanwhile);
- ``per_request``: one write + fdatasync per request in the writer thread, no sharing (the
  naive durable answer).

Prints the load at start and end, per contender the median over ``--rounds`` of the
per-request p50 and p99 added latency (time spent logging) and the records per second, and
last the added p50 of ``group`` over ``queued`` in milliseconds (goal <= 0.3 ms).

    .venv/bin/python bench/spool.py --n 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from modelops.gateway.logs.eventlog import prediction_record  # noqa: E402
from modelops.gateway.logs.groupcommit import GroupCommitter  # noqa: E402
from modelops.gateway.logs.spool import SegmentWriter, encode_frame  # noqa: E402


def _record(k: int) -> list[object]:
    return prediction_record(request_id=f"req-{k}", feedback_token="t" * 120, ts=time.time(), model="recommender",
                             model_version=3, model_sha256="a" * 64, user_hash="b" * 16, n_items=20,
                             score_mean=0.4, score_max=0.9, score_std=0.1, latency_ms=4.2, delay_origin="triton")


async def _run(mode: str, directory: Path, n: int, concurrency: int) -> tuple[list[float], float]:
    writer = SegmentWriter(directory, max_age_s=3600)
    committer = GroupCommitter(writer, budget_bytes=1 << 40, usage=lambda: 0)
    committer.start()
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    latencies: list[float] = []

    async def one(k: int) -> None:
        started = time.perf_counter()
        if mode == "queued":
            committer.append_nowait(_record(k))
        elif mode == "group":
            await committer.append(_record(k))
        else:
            frame = encode_frame(_record(k))
            async with lock:  # one writer thread, one sync per request
                await loop.run_in_executor(committer._executor, writer.write, frame)
        latencies.append(time.perf_counter() - started)

    async def worker(offset: int) -> None:
        for k in range(offset, n, concurrency):
            await one(k)
            await asyncio.sleep(0)  # the rest of the request's work

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    await committer.close()
    return latencies, elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(os.environ.get("MODELOPS_HOME", tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    print(f"load at start: {os.getloadavg()}  ({os.cpu_count()} cpus); spool under {base}")
    modes = ("queued", "group", "per_request")
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for concurrency in args.concurrency:
            for mode in modes:
                with tempfile.TemporaryDirectory(dir=base, prefix="bench-spool-") as tmp:
                    latencies, elapsed = asyncio.run(_run(mode, Path(tmp), args.n, concurrency))
                results.setdefault((mode, concurrency), []).append(
                    (_pct(latencies, 0.5) * 1000, _pct(latencies, 0.99) * 1000, args.n / elapsed))
    for (mode, concurrency), rows in sorted(results.items(), key=lambda kv: (kv[0][1], modes.index(kv[0][0]))):
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        rate = statistics.median(r[2] for r in rows)
        print(f"  c={concurrency:<3} {mode:<12} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  {rate:9.0f} records/s")
    print(f"load at end: {os.getloadavg()}")
    for concurrency in args.concurrency:
        added = statistics.median(r[0] for r in results[("group", concurrency)]) - statistics.median(
            r[0] for r in results[("queued", concurrency)])
        print(f"added p50 of a durable 200 (group - queued) at concurrency {concurrency}: {added:.3f} ms")


if __name__ == "__main__":
    main()
