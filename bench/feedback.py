"""Benchmark: the feedback-join Spark job against the same join and counts in DuckDB.

Generates (once, cached under /tmp) a prediction log and a feedback log as Parquet under
``dt=YYYY-MM-DD/hour=HH/`` folders: by default 10,000,000 predictions over one day and
3,000,000 events, of which 5% are duplicates, 2% fall outside the 24 h window, 1% carry
unknown tokens and 0.1% are malformed. Then, alternating, for several rounds:

* ``job_end_to_end`` — a fresh Python process running ``run_feedback_join`` (JVM start-up,
  session, job, outputs written);
* ``job_without_startup`` — ``run_feedback_join`` on a session that is already up and has run
  the job ``--warmup-runs`` times (2: the JVM's JIT compiles the generated code over the first runs);
* ``duckdb`` — the anchor: the same classification, counts and quarantine file in DuckDB
  (2 threads), in process.

Every round asserts that the job's per-version rows and rejected counts equal DuckDB's
exactly. Medians are printed, the ratios last.

    .venv/bin/python bench/feedback.py                      # full size, 3 rounds
    .venv/bin/python bench/feedback.py --predictions 200000 --events 60000 --rounds 3
    .venv/bin/python bench/feedback.py --labelled [--predictions 1000000 --events 300000]   # bench/feedback_labels.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from _feedback_logs import _micros, _write_partitioned, hex_tokens  # noqa: E402

from modelops.feedback.definitions import (  # noqa: E402
    REASON_PRECEDENCE,
    VersionCounts,
    rejected_counts,
    version_sort_key,
    window_micros,
)
from modelops.records import FEEDBACK, PREDICTIONS  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=1)
WINDOW_HOURS = 24.0
MODELS = (("ranker", 1, 0.80), ("ranker", 2, 0.12), ("ranker", 3, 0.05), ("reco", 1, 0.03))
def generate(root: Path, n_pred: int, n_events: int, seed: int, malformed: float) -> tuple[Path, Path]:
    """Create (or reuse) the two logs under ``root``; returns their folders."""
    preds_dir, events_dir, done = root / "predictions", root / "events", root / ".complete"
    if done.exists():
        return preds_dir, events_dir
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()

    start_us, span_us = _micros(START), _micros(END) - _micros(START)
    p_ts = start_us + rng.integers(0, span_us, size=n_pred)
    which = rng.choice(len(MODELS), size=n_pred, p=[m[2] for m in MODELS])
    tokens = hex_tokens(rng, n_pred)
    models = np.array([m[0] for m in MODELS], dtype=object)[which]
    versions = np.array([m[1] for m in MODELS], dtype=np.int64)[which]
    shas = np.array([hashlib.sha256(f"{m[0]}/{m[1]}".encode()).hexdigest() for m in MODELS], dtype=object)[which]
    preds = pa.table(
        {
            "request_id": hex_tokens(rng, n_pred),
            "feedback_token": tokens,
            "ts": pa.array(p_ts, pa.int64()).cast(PREDICTIONS.field("ts").type),
            "model": pa.array(models, pa.string()),
            "model_version": pa.array(versions, pa.int64()),
            "model_sha256": pa.array(shas, pa.string()),
            "user_hash": hex_tokens(rng, n_pred, 8),
            "n_items": pa.array(rng.integers(1, 50, size=n_pred, dtype=np.int32)),
            "score_mean": pa.array(rng.random(n_pred)),
            "score_max": pa.array(rng.random(n_pred)),
            "score_std": pa.array(rng.random(n_pred) / 4),
            "latency_ms": pa.array(rng.gamma(2.0, 3.0, size=n_pred)),
            "delay_origin": pa.array(np.full(n_pred, "none", dtype=object), pa.string()),
            "prediction": pa.nulls(n_pred, pa.float64()),
            "probabilities": pa.nulls(n_pred, PREDICTIONS.field("probabilities").type),
        },
        schema=PREDICTIONS,
    )
    _write_partitioned(preds, "ts", preds_dir)

    window_us = window_micros(WINDOW_HOURS)
    n_unknown, n_outside = int(n_events * 0.01), int(n_events * 0.02)
    n_dup, n_bad = int(n_events * 0.05), int(n_events * malformed)
    n_valid = n_events - n_unknown - n_outside - n_dup - n_bad
    extra_share = 0.55 * 0.25  # a quarter of the clicks also bring a purchase
    n_base = round(n_valid / (1 + extra_share))
    base = rng.choice(n_pred, size=n_base, replace=False)
    first = rng.choice(np.array(["click", "skip", "purchase"]), size=n_base, p=[0.55, 0.35, 0.10])
    clicked = base[first == "click"]
    extra = rng.choice(clicked, size=min(n_valid - n_base, len(clicked)), replace=False)
    v_idx = np.r_[base, extra]
    v_action = np.r_[first, np.full(len(extra), "purchase")]
    v_ts = p_ts[v_idx] + rng.integers(0, window_us + 1, size=len(v_idx))
    token_np = tokens.to_numpy(zero_copy_only=False)

    o_idx = rng.choice(n_pred, size=n_outside)
    before = rng.random(n_outside) < 0.5
    o_ts = np.where(
        before,
        p_ts[o_idx] - rng.integers(1, 3_600_000_000, size=n_outside),
        p_ts[o_idx] + window_us + rng.integers(1, 7_200_000_000, size=n_outside),
    )
    d_pick = rng.choice(len(v_idx), size=n_dup)
    u_ts = start_us + rng.integers(0, span_us, size=n_unknown)
    b_idx = rng.choice(n_pred, size=n_bad)

    all_tokens = np.r_[
        token_np[v_idx], token_np[o_idx], token_np[v_idx[d_pick]],
        hex_tokens(rng, n_unknown).to_numpy(zero_copy_only=False), token_np[b_idx],
    ].astype(object)
    all_actions = np.r_[
        v_action, rng.choice(np.array(["click", "purchase", "skip"]), size=n_outside), v_action[d_pick],
        rng.choice(np.array(["click", "skip"]), size=n_unknown), np.full(n_bad, "click"),
    ].astype(object)
    all_ts = np.r_[v_ts, o_ts, v_ts[d_pick], u_ts, p_ts[b_idx] + 1_000_000].astype(np.int64)
    ts_null = np.zeros(len(all_ts), dtype=bool)
    # Malformed rows: a third each with no token, an unknown action, no ts.
    bad0 = len(all_ts) - n_bad
    kinds = rng.integers(0, 3, size=n_bad)
    all_tokens[bad0:][kinds == 0] = None
    all_actions[bad0:][kinds == 1] = "Click"
    ts_null[bad0:][kinds == 2] = True
    received = all_ts + rng.integers(0, 5_000_000, size=len(all_ts))
    received[len(v_idx) + n_outside: len(v_idx) + n_outside + n_dup] += rng.integers(
        5_000_000, 60_000_000, size=n_dup
    )
    order = rng.permutation(len(all_ts))
    ts_type = FEEDBACK.field("ts").type
    events = pa.table(
        {
            "feedback_token": pa.array(all_tokens[order], pa.string()),
            "action": pa.array(all_actions[order], pa.string()),
            "ts": pa.array(all_ts[order], pa.int64(), mask=ts_null[order]).cast(ts_type),
            "received_at": pa.array(received[order], pa.int64()).cast(ts_type),
            "label": pa.nulls(len(order), pa.string()),
            "value": pa.nulls(len(order), pa.float64()),
        },
        schema=FEEDBACK,
    )
    _write_partitioned(events, "received_at", events_dir)
    done.write_text(json.dumps({"predictions": n_pred, "events": n_events, "seed": seed}))
    print(f"generated {n_pred:,} predictions, {n_events:,} events in {time.perf_counter() - t0:.1f}s", flush=True)
    return preds_dir, events_dir


DUCKDB_SQL = """
CREATE OR REPLACE TEMP TABLE classified AS
WITH p AS (
    SELECT feedback_token, ts, model, model_version
    FROM read_parquet('{preds}/**/*.parquet', hive_partitioning = false)
    WHERE ts >= '{start}'::TIMESTAMPTZ AND ts < '{end}'::TIMESTAMPTZ
),
first AS (
    SELECT feedback_token AS p_token, min({{'ts': ts, 'model': model, 'v': model_version}}) AS p
    FROM p WHERE feedback_token IS NOT NULL GROUP BY feedback_token
),
j AS (
    SELECT e.*, f.p_token, f.p,
        CASE
            WHEN e.feedback_token IS NULL OR e.feedback_token = '' OR e.action IS NULL
                 OR e.action NOT IN ('click', 'purchase', 'skip') OR e.ts IS NULL THEN 'malformed'
            WHEN f.p_token IS NULL THEN 'unknown_token'
            WHEN epoch_us(e.ts) - epoch_us(f.p.ts) < 0 OR epoch_us(e.ts) - epoch_us(f.p.ts) > {window_us}
                THEN 'outside_window'
        END AS pre
    FROM read_parquet('{events}/**/*.parquet', hive_partitioning = false) e
    LEFT JOIN first f ON e.feedback_token = f.p_token
)
SELECT feedback_token, action, ts, received_at, p.model AS model, p.v AS model_version,
    CASE WHEN pre IS NOT NULL THEN pre
         WHEN row_number() OVER (PARTITION BY feedback_token, action, pre
                                 ORDER BY ts ASC NULLS LAST, received_at ASC NULLS LAST) > 1 THEN 'duplicate'
    END AS reason
FROM j;
"""

DUCKDB_COUNTS = """
WITH t AS (
    SELECT feedback_token, any_value(model) AS model, any_value(model_version) AS model_version,
        bool_or(action = 'click') AS c, bool_or(action = 'purchase') AS pu, bool_or(action = 'skip') AS s
    FROM classified WHERE reason IS NULL GROUP BY feedback_token
),
k AS (
    SELECT model, model_version, count_if(c) AS clicked, count_if(c AND pu) AS converted,
        count_if(s) AS skipped, count_if(pu AND NOT c) AS pwc
    FROM t GROUP BY ALL
),
i AS (
    SELECT model, model_version, count(*) AS impressions
    FROM read_parquet('{preds}/**/*.parquet', hive_partitioning = false)
    WHERE ts >= '{start}'::TIMESTAMPTZ AND ts < '{end}'::TIMESTAMPTZ GROUP BY ALL
)
SELECT i.model, i.model_version, impressions, coalesce(clicked, 0), coalesce(converted, 0),
    coalesce(skipped, 0), coalesce(pwc, 0)
FROM i LEFT JOIN k ON i.model IS NOT DISTINCT FROM k.model AND i.model_version IS NOT DISTINCT FROM k.model_version
"""


def run_duckdb(preds: Path, events: Path, out: Path) -> tuple[tuple[VersionCounts, ...], dict[str, int]]:
    """The anchor: same classification, counts and quarantine Parquet, in DuckDB."""
    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    con = duckdb.connect()
    try:
        con.execute("SET threads = 2; SET TimeZone = 'UTC'; SET preserve_insertion_order = false;")
        args: dict[str, Any] = {
            "preds": preds, "events": events, "start": START.isoformat(), "end": END.isoformat(),
            "window_us": window_micros(WINDOW_HOURS),
        }
        con.execute(DUCKDB_SQL.format(**args))
        con.execute(
            "COPY (SELECT feedback_token, action, ts, received_at, reason FROM classified "
            f"WHERE reason IS NOT NULL) TO '{out}/quarantine.parquet' (FORMAT parquet)"
        )
        rejected = dict(con.execute(
            "SELECT reason, count(*) FROM classified WHERE reason IS NOT NULL GROUP BY reason"
        ).fetchall())
        rows = tuple(
            sorted((VersionCounts(*r) for r in con.execute(DUCKDB_COUNTS.format(**args)).fetchall()),
                   key=version_sort_key)
        )
    finally:
        con.close()
    return rows, rejected_counts(rejected)


E2E_SCRIPT = """
import json, sys
sys.path.insert(0, {plugins!r})
from datetime import datetime
from modelops.feedback.job import run_feedback_join
r = run_feedback_join({preds!r}, {events!r}, datetime.fromisoformat({start!r}), datetime.fromisoformat({end!r}),
                      {out!r}, window_hours={window})
print("RESULT " + json.dumps({{"rows": [x.to_json() for x in r.rows], "rejected": r.rejected}}))
"""


def run_end_to_end(preds: Path, events: Path, out: Path) -> tuple[tuple[VersionCounts, ...], dict[str, int]]:
    """The job in a fresh interpreter: JVM and session start-up included."""
    script = E2E_SCRIPT.format(
        plugins=str(ROOT / "plugins"), preds=str(preds), events=str(events), start=START.isoformat(),
        end=END.isoformat(), out=str(out), window=WINDOW_HOURS,
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"end-to-end job failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    doc = json.loads(line[len("RESULT "):])
    fields = ("model", "model_version", "impressions", "clicked", "converted", "skipped", "purchase_without_click")
    rows = tuple(VersionCounts(**{k: r[k] for k in fields}) for r in doc["rows"])
    return rows, doc["rejected"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictions", type=int, default=10_000_000)
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--malformed", type=float, default=0.001, help="share of malformed events")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--warmup-runs", type=int, default=2,
                        help="job runs on the warm session before the timed rounds (default 2: the JVM compiles "
                             "the generated code over the first runs, e.g. 36.7, 18.6, 14.6, 14.4 s in one session; "
                             "job_end_to_end measures the cold job)")
    parser.add_argument("--no-warmup", dest="warmup_runs", action="store_const", const=0,
                        help="no warm-up run (quicker; the first rounds then pay JIT warm-up)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "modelops-bench-feedback"))
    parser.add_argument("--labelled", action="store_true",
                        help="the outcome job's realized performance (AUC, log loss, RMSE ...) on predictions of a "
                             "labelled classifier and regressor and EVENTS label events, vs DuckDB "
                             "(bench/feedback_labels.py)")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error(f"--rounds: at least 3 (medians), got {args.rounds}")
    if args.labelled:
        from feedback_labels import main as labelled_main

        return labelled_main(args)
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)

    data = Path(args.cache) / f"p{args.predictions}-e{args.events}-m{args.malformed}-s{args.seed}"
    preds, events = generate(data, args.predictions, args.events, args.seed, args.malformed)
    work = Path(tempfile.mkdtemp(prefix="bench-feedback-"))

    from modelops.feedback.job import run_feedback_join
    from modelops.spark import spark_session

    spark = spark_session("bench-feedback")

    def warm() -> tuple[tuple[VersionCounts, ...], dict[str, int]]:
        r = run_feedback_join(str(preds), str(events), START, END, str(work / "warm"),
                              window_hours=WINDOW_HOURS, spark=spark)
        return r.rows, r.rejected

    commands = {
        "job_end_to_end": lambda: run_end_to_end(preds, events, work / "e2e"),
        "job_without_startup": warm,
        "duckdb": lambda: run_duckdb(preds, events, work / "duckdb"),
    }
    print("warm-up ...", flush=True)
    anchor = run_duckdb(preds, events, work / "duckdb")
    for _ in range(args.warmup_runs):
        warm()
    times: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for i in range(args.rounds):
            order = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in order:
                t0 = time.perf_counter()
                result = commands[name]()
                times[name].append(time.perf_counter() - t0)
                if result != anchor:
                    print(f"MISMATCH {name}:\n  {result}\n  duckdb: {anchor}", file=sys.stderr)
                    return 1
            print(f"round {i + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
            if i + 1 < args.rounds:  # so that an interrupted run still shows where it stands
                print("  so far: " + _ratios(times), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    rows, rejected = anchor
    print(f"\n{args.predictions:,} predictions x {args.events:,} events, window {WINDOW_HOURS:g} h")
    print("rejected (job == duckdb):", {r.value: rejected[r.value] for r in REASON_PRECEDENCE})
    for row in rows:
        print("  job == duckdb:", json.dumps(row.to_json()))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:>20}: median {med[name]:.2f}s  rounds {[round(x, 2) for x in t]}")
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(_ratios(times).replace(", ", "\n"))
    return 0


def _ratios(times: dict[str, list[float]]) -> str:
    med = {name: statistics.median(t) for name, t in times.items()}
    return (
        f"job_without_startup / duckdb = {med['job_without_startup'] / med['duckdb']:.2f}, "
        f"job_end_to_end / duckdb = {med['job_end_to_end'] / med['duckdb']:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
