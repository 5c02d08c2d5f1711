"""GX validation time of request batches: pandas vs Spark (the generated request suite).

Usage::

    .venv/bin/python bench/gx_validation.py              # 1,000,000 rows, 3 rounds
    .venv/bin/python bench/gx_validation.py --rows 100000 --rounds 3   # quick

The batch (user_id, item_ids of 1-50 strings, timestamp) is written once as Parquet.
pandas validates the DataFrame read from it; Spark validates the same file read into
a cached DataFrame (materialised before timing), so both time validation, not I/O.
One unmeasured warm-up round per engine, then the engines alternate. Prints the
median seconds per engine and, last, the ratio spark/pandas (the anchor is pandas).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from modelops.contracts.suites import request_suite
from modelops.contracts.validation import validate


def write_requests(path: Path, rows: int, seed: int) -> None:
    """A valid request batch of ``rows`` rows (vectorised; ~12 items per request)."""
    rng = np.random.default_rng(seed)
    counts = np.clip(rng.poisson(11, rows) + 1, 1, 50)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    items = pa.array(np.char.add("i_", rng.integers(0, 200_000, int(offsets[-1])).astype(str)))
    if isinstance(items, pa.ChunkedArray):  # large inputs come back chunked
        items = items.combine_chunks()
    table = pa.table(
        {
            "user_id": pa.array(np.char.add("u_", rng.integers(0, 1_000_000, rows).astype(str))),
            "item_ids": pa.ListArray.from_arrays(pa.array(offsets), items),
            "timestamp": pa.array(rng.integers(1_764_460_800, 1_765_065_600, rows), pa.int64()),
        }
    )
    pq.write_table(table, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)

    import pandas as pd

    from modelops.spark import spark_session

    suite = request_suite()
    with tempfile.TemporaryDirectory(prefix="gx-bench-") as tmp:
        path = Path(tmp) / "requests.parquet"
        write_requests(path, args.rows, args.seed)
        frame = pd.read_parquet(path)
        # The console progress bar would interleave with the timings (read when the JVM starts).
        os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
        spark = spark_session("bench-gx-validation", args.master)
        spark.sparkContext.setLogLevel("ERROR")
        sdf = spark.read.parquet(str(path)).cache()
        sdf.count()

        def run(engine: str) -> float:
            data = frame if engine == "pandas" else sdf
            start = time.perf_counter()
            report = validate(data, suite)
            elapsed = time.perf_counter() - start
            if not report.success:
                raise SystemExit(f"{engine}: the valid batch failed validation:\n{report.summary()}")
            return elapsed

        times: dict[str, list[float]] = {"pandas": [], "spark": []}
        for engine in times:
            run(engine)  # warm-up: imports, JIT, Spark code generation
        for i in range(args.rounds):
            for engine in ("pandas", "spark") if i % 2 == 0 else ("spark", "pandas"):
                times[engine].append(run(engine))
                print(f"round {i + 1} {engine}: {times[engine][-1]:.2f} s", flush=True)
        spark.stop()

    medians = {engine: statistics.median(values) for engine, values in times.items()}
    print(f"rows: {args.rows:,}  expectations: {len(suite.expectations)}  rounds: {args.rounds}")
    for engine, value in medians.items():
        print(f"median {engine}: {value:.2f} s ({args.rows / value:,.0f} rows/s)")
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"ratio spark/pandas: {medians['spark'] / medians['pandas']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
