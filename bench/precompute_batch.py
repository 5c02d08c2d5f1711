"""Benchmark: the precompute batch's scorer vs Spark ``mapInArrow`` calling Triton (the anchor), same pairs.

Starts a Triton of its own (the embedded stack's, ``--port-base`` for its ports, a temporary
MODELOPS_HOME) serving the python-backend test model (``max_batch_size`` 0), builds feature
tables of ``--users`` x ``--items`` in memory, and scores every pair with each contender,
alternated per round, each ending with the pairs and scores in a Parquet file:

- ``asyncio`` (what ``precompute_predictions`` runs, :func:`modelops.jobs.precompute_tasks.score_pairs`):
  one process, ``--batch-rows`` rows per Triton call (binary tensors), 4 calls in flight;
- ``spark`` (the anchor, the design the issue names): the pairs as a DataFrame on ``local[2]`` in 2
  partitions, ``mapInArrow`` builds each Arrow batch's features with the same lookup and calls Triton
  with NVIDIA's ``tritonclient`` (binary tensors, ``async_infer`` on a client with
  ``--in-flight``/2 connections per task: the same 4 calls in flight as the asyncio scorer),
  ``--batch-rows`` rows per batch, written as Parquet. The session is started and each contender
  run once before the rounds (not counted).

Each contender is timed from scoring to its Parquet file written; the scores are compared with
the first run's (same pairs, within 4 ulp) outside the timed section. Prints load at start and
end, per round, medians of ``--rounds`` and, last, the ratio asyncio / spark of the time per batch.

    .venv/bin/python bench/precompute_batch.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

MODEL = "bench_precompute"


def run_asyncio(triton_url: str, lookup: Any, pop: Any, batch_rows: int, in_flight: int, out: Path) -> np.ndarray:
    from modelops.jobs.precompute_tasks import Champion, score_pairs, scores_parquet

    scores = asyncio.run(score_pairs(triton_url, Champion(MODEL, 1, "b" * 64, 1), lookup, pop,
                                     batch_rows=batch_rows, concurrency=in_flight))
    out.write_bytes(scores_parquet(pop, scores))
    return scores


def run_spark(pairs: Any, triton_url: str, lookup: Any, per_task: int, out: Path) -> None:
    """Score and write (the timed part); ``per_task`` calls in flight in each task."""
    import pyarrow as pa

    host = triton_url.removeprefix("http://")

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from collections import deque

        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(host, concurrency=per_task)
        output = httpclient.InferRequestedOutput("score", binary_data=True)
        pending: deque[tuple[pa.RecordBatch, Any]] = deque()

        def done(batch: pa.RecordBatch, request: Any) -> pa.RecordBatch:
            result = request.get_result()
            return pa.RecordBatch.from_arrays(
                [batch.column("user_id"), batch.column("item_id"),
                 pa.array(np.asarray(result.as_numpy("score"), dtype=np.float32).reshape(-1))],
                names=["user_id", "item_id", "score"])

        for batch in batches:
            users = batch.column("user_id").to_numpy(zero_copy_only=False)
            items = batch.column("item_id").to_numpy(zero_copy_only=False)
            features = np.asarray(lookup.matrix(users, items), dtype=np.float32)
            tensor = httpclient.InferInput("features", list(features.shape), "FP32")
            tensor.set_data_from_numpy(features, binary_data=True)
            pending.append((batch, client.async_infer(MODEL, [tensor], model_version="1", outputs=[output])))
            if len(pending) >= per_task:
                yield done(*pending.popleft())
        while pending:
            yield done(*pending.popleft())
        client.close()

    shutil.rmtree(out, ignore_errors=True)
    pairs.mapInArrow(score, "user_id string, item_id string, score float").write.parquet(str(out))


def spark_scores(out: Path) -> np.ndarray:
    """The written scores in user-major order (read back outside the timed part)."""
    import pyarrow.parquet as pq

    table = pq.read_table(str(out)).to_pandas().sort_values(["user_id", "item_id"])
    return table["score"].to_numpy(dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--batch-rows", type=int, default=4096)
    parser.add_argument("--in-flight", type=int, default=4,
                        help="Triton calls in flight, each contender (spark: half per task of its 2)")
    parser.add_argument("--port-base", type=int, default=30500, help="Triton at base+300..302 (default 30500)")
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()}", flush=True)
    from modelops.config import stack_port_env

    home = Path(tempfile.mkdtemp(prefix="bench-precompute-"))
    os.environ.update({**stack_port_env(args.port_base), "MODELOPS_HOME": str(home), "MODELOPS_OBSERVABILITY": "off"})
    from modelops.config import settings
    from modelops.example.tables import FeatureLookup
    from modelops.gateway.testing import feature_tables, write_test_model
    from modelops.serving.precompute import population
    from modelops.serving.triton import TritonClient
    from modelops.spark import spark_session
    from modelops.stack import launcher

    cfg = settings()
    users, items = feature_tables(n_users=args.users, n_items=args.items)
    lookup = FeatureLookup.from_frames(users, items)
    pop = population(users["user_id"].tolist(), items["item_id"].tolist())
    seconds: dict[str, list[float]] = {"asyncio": [], "spark": []}
    spark = None
    try:
        launcher.up(cfg, progress=lambda line: None, only=["triton"])
        write_test_model(home / "triton" / "repository", MODEL, [1])
        TritonClient(cfg.triton_http_url, load_timeout_s=300.0).load(MODEL)
        started = time.perf_counter()
        spark = spark_session("bench-precompute", "local[2]")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.batch_rows))
        print(f"spark session started in {time.perf_counter() - started:.1f} s (not counted)", flush=True)
        import pandas as pd

        frame = pd.DataFrame({"user_id": np.repeat(np.asarray(pop.user_ids, dtype=object), len(pop.item_ids)),
                              "item_id": np.tile(np.asarray(pop.item_ids, dtype=object), len(pop.user_ids))})
        pairs = spark.createDataFrame(frame).repartition(2).cache()
        pairs.count()
        per_task = max(1, args.in_flight // 2)
        reference = run_asyncio(cfg.triton_http_url, lookup, pop, args.batch_rows, args.in_flight,
                                home / "warm.parquet")
        run_spark(pairs, cfg.triton_http_url, lookup, per_task, home / "warm-spark")  # warm Python workers too
        for r in range(args.rounds):
            order = ["asyncio", "spark"] if r % 2 == 0 else ["spark", "asyncio"]
            for kind in order:
                started = time.perf_counter()
                if kind == "asyncio":
                    got = run_asyncio(cfg.triton_http_url, lookup, pop, args.batch_rows, args.in_flight,
                                      home / "asyncio.parquet")
                    seconds[kind].append(time.perf_counter() - started)
                else:
                    run_spark(pairs, cfg.triton_http_url, lookup, per_task, home / "spark.parquet")
                    seconds[kind].append(time.perf_counter() - started)
                    got = spark_scores(home / "spark.parquet")
                np.testing.assert_array_max_ulp(got, reference, maxulp=4)  # same pairs, same scores (not timed)
            print(f"round {r + 1}: " + ", ".join(
                f"{kind} {s[-1]:.2f} s ({pop.rows / s[-1]:.0f} rows/s)" for kind, s in seconds.items()), flush=True)
    finally:
        if spark is not None:
            spark.stop()
        launcher.down(cfg, progress=lambda line: None)
        shutil.rmtree(home, ignore_errors=True)
        print(f"load at end: {os.getloadavg()}", flush=True)
    medians = {kind: statistics.median(s) for kind, s in seconds.items()}
    print(f"medians of {args.rounds} rounds ({pop.rows} pairs, {args.batch_rows} rows per call, "
          f"{args.in_flight} calls in flight): " + ", ".join(
        f"{kind} {m:.2f} s ({pop.rows / m:.0f} rows/s)" for kind, m in medians.items()), flush=True)
    print(f"time asyncio / spark mapInArrow: {medians['asyncio'] / medians['spark']:.2f}x")


if __name__ == "__main__":
    main()
