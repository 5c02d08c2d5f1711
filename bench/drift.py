"""Benchmark: the Spark drift job vs an exact numpy KS over two processes (the anchor) and DuckDB.

Generates ROWS x (128 features + score) scored samples for a baseline and a current day
(partitioned ``dt=/hour=`` Parquet, cached under /tmp and reused), drift injected in three
known columns. Then, alternating, several rounds of:

- numpy anchor: ``ProcessPoolExecutor(2)`` splitting the columns; each process reads its
  columns of both sides with pyarrow and computes the exact D (``exact_ks``: each side sorted
  once and searched into the other, the least work an exact D needs);
- the Spark job in a session created once (``compute_drift``, start-up excluded);
- the Spark job end to end in a fresh process (``run_drift``: interpreter, JVM, session, job,
  outputs);
- DuckDB, exact D per column in SQL (distinct values, ECDFs by window sums over them).

Prints medians, the job's absolute error against the exact D per column, and last the ratios
``job_without_startup / numpy`` and ``job_end_to_end / numpy``.

    .venv/bin/python bench/drift.py --rows 200000 --rounds 3      # quick
    .venv/bin/python bench/drift.py                               # 1,000,000 rows per side
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from modelops.drift.stats import exact_ks  # noqa: E402
from modelops.features import load_features  # noqa: E402
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES  # noqa: E402
from modelops.records import scored_samples_schema  # noqa: E402

DRIFTED = ("user_sessions_30d", "item_price", "user_emb_05")
"""Columns whose current distribution moves (shift, scale, shift)."""
HOURS = 8
DAY = datetime(2026, 11, 28, tzinfo=UTC)


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def _column(rng: np.random.Generator, index: int, rows: int) -> np.ndarray:
    kind = index % 6
    if kind == 0:
        values = rng.normal(10.0, 3.0, rows)
    elif kind == 1:
        values = rng.lognormal(1.0, 2.0, rows)  # heavy right tail
    elif kind == 2:
        values = rng.standard_t(1.2, rows)  # very heavy tails on both sides
    elif kind == 3:
        values = rng.poisson(3.0, rows).astype(np.float64)  # ties
    elif kind == 4:
        values = np.where(rng.random(rows) < 0.4, 0.0, rng.exponential(5.0, rows))  # point mass at 0
    else:
        values = rng.uniform(-1.0, 1.0, rows)
    if index % 5 == 0:
        values[rng.random(rows) < 0.02] = np.nan
    return values


def _side_tables(names: Sequence[str], rows: int, seed: int, drift: bool) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    schema = scored_samples_schema(names)
    per_hour = -(-rows // HOURS)
    tables = []
    for hour in range(HOURS):
        n = min(per_hour, rows - hour * per_hour)
        if n <= 0:
            break
        cols: dict[str, np.ndarray] = {}
        for i, name in enumerate(names):
            values = _column(rng, i, n)
            if drift and name == DRIFTED[0]:
                values = values + 0.5
            elif drift and name == DRIFTED[1]:
                values = values * 1.35
            elif drift and name == DRIFTED[2]:
                values = values + 0.15
            cols[name] = values
        base = np.nan_to_num(cols[names[0]]) * 0.01 + np.nan_to_num(cols[names[5]]) * 0.02
        score = 1.0 / (1.0 + np.exp(-(base + rng.normal(0.0, 1.0, n) + (0.3 if drift else 0.0))))
        start = hour * per_hour
        ts = DAY + timedelta(hours=hour)
        arrays = {
            "request_id": pa.array([f"req-{seed}-{start + k // 4}" for k in range(n)], pa.string()),
            "ts": pa.array(np.full(n, int(ts.timestamp() * 1e6), dtype=np.int64), pa.int64())
            .cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
            "model": pa.array(["ranker"] * n, pa.string()),
            "model_version": pa.array(np.full(n, 7, dtype=np.int64)),
            "item_index": pa.array((np.arange(start, start + n) % 4).astype(np.int32)),
            "score": pa.array(score),
            **{name: pa.array(values, from_pandas=True) for name, values in cols.items()},
        }
        tables.append(pa.Table.from_pydict(arrays, schema=schema))
    return tables


def generate(cache: Path, rows: int, seed: int) -> tuple[Path, Path]:
    """Write (once) the baseline and current trees; return their paths."""
    names = [f.name for f in load_features(RECOMMENDER_FEATURES)]
    root = cache / f"rows{rows}-seed{seed}"
    done = root / ".complete"
    paths = (root / "baseline", root / "current")
    if done.exists():
        return paths
    for path, side_seed, drift in ((paths[0], seed, False), (paths[1], seed + 1, True)):
        for hour, table in enumerate(_side_tables(names, rows, side_seed, drift)):
            part = path / f"dt={DAY:%Y-%m-%d}" / f"hour={hour:02d}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, part / "part-0.parquet", row_group_size=128 * 1024)
    done.write_text("ok\n")
    return paths


# --------------------------------------------------------------------------------------------
# the three contenders
# --------------------------------------------------------------------------------------------


def _files(path: Path) -> list[str]:
    return sorted(str(p) for p in path.rglob("*.parquet"))


def _exact_for(args: tuple[Sequence[str], Sequence[str], Sequence[str]]) -> dict[str, float]:
    base_files, cur_files, columns = args
    base = pa.concat_tables(pq.read_table(f, columns=list(columns)) for f in base_files)
    cur = pa.concat_tables(pq.read_table(f, columns=list(columns)) for f in cur_files)
    return {
        c: exact_ks(base.column(c).to_numpy().astype(np.float64), cur.column(c).to_numpy().astype(np.float64))
        for c in columns
    }


def numpy_exact(pool: ProcessPoolExecutor, base: Path, cur: Path, columns: Sequence[str]) -> dict[str, float]:
    halves = [list(columns[0::2]), list(columns[1::2])]
    out: dict[str, float] = {}
    for part in pool.map(_exact_for, [(_files(base), _files(cur), h) for h in halves]):
        out.update(part)
    return out


def duckdb_exact(base: Path, cur: Path, columns: Sequence[str]) -> dict[str, float]:
    import duckdb

    con = duckdb.connect(config={"threads": 2})
    con.execute(f"CREATE VIEW b AS SELECT * FROM read_parquet('{base}/**/*.parquet', hive_partitioning=true)")
    con.execute(f"CREATE VIEW c AS SELECT * FROM read_parquet('{cur}/**/*.parquet', hive_partitioning=true)")
    out = {}
    for col in columns:
        (d,) = con.execute(f"""
            WITH v AS (
                SELECT "{col}" AS x, 1 AS nb, 0 AS nc FROM b WHERE "{col}" IS NOT NULL AND NOT isnan("{col}")
                UNION ALL
                SELECT "{col}", 0, 1 FROM c WHERE "{col}" IS NOT NULL AND NOT isnan("{col}")),
            g AS (SELECT x, sum(nb) AS nb, sum(nc) AS nc FROM v GROUP BY x),
            t AS (SELECT sum(nb) AS n, sum(nc) AS m FROM g),
            e AS (SELECT sum(nb) OVER w AS cb, sum(nc) OVER w AS cc FROM g
                  WINDOW w AS (ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
            SELECT max(abs(cb / t.n - cc / t.m)) FROM e, t""").fetchone()
        out[col] = float(d)
    con.close()
    return out


_E2E = """
import json, sys, time
t0 = time.perf_counter()
from modelops.drift.job import run_drift
r = run_drift(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], max_rows=int(sys.argv[5]))
print(json.dumps({"seconds": time.perf_counter() - t0, "drifted": r.drifted, "top": list(r.top_causes)}))
"""


def spark_end_to_end(base: Path, cur: Path, out: Path, rows: int) -> float:
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-c", _E2E, str(base), str(cur), str(RECOMMENDER_FEATURES), str(out),
                           str(rows)], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"end-to-end run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per side (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/modelops-drift-bench"))
    parser.add_argument("--no-duckdb", action="store_true", help="skip DuckDB (slowest contender)")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end (fresh process) runs")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error(f"--rounds: at least 3 (medians), got {args.rounds}")
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)

    from modelops.drift.job import compute_drift
    from modelops.spark import spark_session

    features = load_features(RECOMMENDER_FEATURES)
    columns = ["score", *(f.name for f in features)]
    t0 = time.perf_counter()
    base, cur = generate(args.cache, args.rows, args.seed)
    print(f"data: {args.rows} rows x {len(columns)} columns per side at {base.parent} "
          f"({time.perf_counter() - t0:.1f} s to generate or find)")

    spark = spark_session("modelops-drift-bench")
    times: dict[str, list[float]] = {"numpy": [], "job": [], "e2e": [], "duckdb": []}
    with ProcessPoolExecutor(2) as pool:
        exact = numpy_exact(pool, base, cur, columns)  # warm-up: page cache, pool, imports
        result = compute_drift(spark, str(base), str(cur), features, max_rows=args.rows)
        for r in range(args.rounds):
            t, _ = _timed(lambda: numpy_exact(pool, base, cur, columns))
            times["numpy"].append(t)
            print(f"round {r + 1}: numpy {t:.2f} s", flush=True)
            t, result = _timed(lambda: compute_drift(spark, str(base), str(cur), features, max_rows=args.rows))
            times["job"].append(t)
            phases = ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items())  # type: ignore[attr-defined]
            print(f"round {r + 1}: job {t:.2f} s ({phases})", flush=True)
            if not args.no_duckdb:
                t, duck = _timed(lambda: duckdb_exact(base, cur, columns))
                times["duckdb"].append(t)
                worst_duck = max(abs(duck[c] - exact[c]) for c in columns)  # type: ignore[index]
                print(f"round {r + 1}: duckdb {t:.2f} s", flush=True)
            if not args.no_e2e:
                times["e2e"].append(spark_end_to_end(base, cur, args.cache / "out", args.rows))
                print(f"round {r + 1}: job end to end {times['e2e'][-1]:.2f} s", flush=True)
    spark.stop()

    summary = result.summary  # type: ignore[attr-defined]
    job_d = {summary.score.name: summary.score.ks, **{f.name: f.ks for f in summary.features}}
    errors = {c: abs(job_d[c] - exact[c]) for c in columns}
    print("\nabsolute error of the job's D vs the exact D, per column:")
    for i in range(0, len(columns), 4):
        print("  " + "  ".join(f"{c:>30} {errors[c]:.1e}" for c in columns[i:i + 4]))
    print(f"max abs error {max(errors.values()):.2e} ({max(errors, key=errors.__getitem__)})")
    print(f"drifted: {summary.drifted}, top causes: {list(summary.top_causes)} (injected: {list(DRIFTED)})")
    if times["duckdb"]:
        print(f"duckdb max abs difference vs numpy exact: {worst_duck:.1e}")
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print("\nmedians over", args.rounds, "rounds: " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))
    if "duckdb" in med:
        print(f"duckdb / numpy = {med['duckdb'] / med['numpy']:.2f}")
    print(f"job_without_startup / numpy = {med['job'] / med['numpy']:.2f}")
    if "e2e" in med:
        print(f"job_end_to_end / numpy = {med['e2e'] / med['numpy']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
