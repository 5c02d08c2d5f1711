"""Benchmark (``bench/feedback.py --labelled``): the outcome job's realized performance against DuckDB.

Generates (once, cached under /tmp) one day of predictions (by default 10,000,000) of a binary
classifier in two versions and a regressor, and label events (by default 3,000,000) arriving with
delays: 1 % dated before their prediction, 2 % duplicates (a later second label), 1 % for tokens
of no prediction. Then, alternating, for several rounds:

* ``job_without_startup`` — ``run_outcomes`` on a session that is up and has run it ``--warmup-runs`` times;
* ``duckdb`` — the anchor: the same join, first label per prediction, AUC / log loss / accuracy /
  Brier / RMSE / MAE, coverage and delay percentiles per (model, version, day), in process (2 threads).

Every round checks the job's metrics equal DuckDB's (relative 1e-9). Medians are printed, the ratio last.

    .venv/bin/python bench/feedback.py --labelled                                  # full size
    .venv/bin/python bench/feedback.py --labelled --predictions 1000000 --events 300000
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
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

from modelops.feedback.declared import fixed  # noqa: E402
from modelops.feedback.outcome_metrics import EPS, OutcomeSums, performance  # noqa: E402
from modelops.modelspec.spec import ModelSpec  # noqa: E402
from modelops.records import FEEDBACK, PREDICTIONS  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=1)
MODELS = (("churn", 1, 0.6, "binary"), ("churn", 2, 0.3, "binary"), ("price", 1, 0.1, "numeric"))


def _spec(name: str, kind: str) -> ModelSpec:
    return ModelSpec.from_dict({"name": name, "flavor": "onnx",
                                "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 8]}],
                                "outputs": [{"name": "out", "dtype": "FP32",
                                             "shape": [-1, 2 if kind == "binary" else 1]}],
                                "outcomes": {"label": {"kind": kind, "delay_s": 86400}}})


SPECS = {(m, v): _spec(m, kind) for m, v, _, kind in MODELS}


def generate(root: Path, n_pred: int, n_labels: int, seed: int) -> tuple[Path, Path]:
    """Create (or reuse) the prediction and feedback logs under ``root``."""
    from _feedback_logs import _micros, _write_partitioned, hex_tokens

    preds_dir, events_dir, done = root / "predictions", root / "events", root / ".complete"
    if done.exists():
        return preds_dir, events_dir
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    start_us, span_us = _micros(START), _micros(END) - _micros(START)
    p_ts = start_us + rng.integers(0, span_us, size=n_pred)
    which = rng.choice(len(MODELS), size=n_pred, p=[m[2] for m in MODELS])
    numeric = np.array([m[3] == "numeric" for m in MODELS])[which]
    p_score = np.where(numeric, rng.normal(100, 20, size=n_pred), np.round(rng.beta(2, 3, size=n_pred), 4))
    tokens = hex_tokens(rng, n_pred)
    null_f = pa.nulls(n_pred, pa.float64())
    columns: dict[str, Any] = {name: pa.nulls(n_pred, PREDICTIONS.field(name).type) for name in PREDICTIONS.names}
    columns.update({
        "request_id": tokens, "feedback_token": tokens,
        "ts": pa.array(p_ts, pa.int64()).cast(PREDICTIONS.field("ts").type),
        "model": pa.array(np.array([m[0] for m in MODELS], dtype=object)[which], pa.string()),
        "model_version": pa.array(np.array([m[1] for m in MODELS], dtype=np.int64)[which], pa.int64()),
        "n_items": pa.array(np.ones(n_pred, dtype=np.int32)), "score_mean": null_f,
        "prediction": pa.array(p_score, pa.float64()),
    })
    _write_partitioned(pa.table(columns, schema=PREDICTIONS), "ts", preds_dir)

    n_before, n_dup, n_unknown = n_labels // 100, n_labels // 50, n_labels // 100
    n_main = n_labels - n_before - n_dup - n_unknown
    idx = rng.choice(n_pred, size=n_main + n_before, replace=False)
    truth = np.where(numeric[idx], p_score[idx] + rng.normal(0, 8, size=len(idx)),
                     (rng.random(len(idx)) < p_score[idx]).astype(np.float64))
    delay = rng.exponential(6 * 3600e6, size=len(idx)).astype(np.int64)
    delay[n_main:] = -rng.integers(1, 3_600_000_000, size=n_before)  # dated before the prediction
    l_ts = p_ts[idx] + delay
    dup = rng.choice(n_main, size=n_dup, replace=False)
    token_np = tokens.to_numpy(zero_copy_only=False)
    all_idx_tokens = np.r_[token_np[idx], token_np[idx[dup]], hex_tokens(rng, n_unknown).to_numpy(zero_copy_only=False)]
    second = np.where(numeric[idx[dup]], truth[dup] + 1.0, 1.0 - truth[dup])  # a later, different label
    all_truth = np.r_[truth, second, np.ones(n_unknown)]
    all_numeric = np.r_[numeric[idx], numeric[idx[dup]], np.zeros(n_unknown, dtype=bool)]
    all_ts = np.r_[l_ts, l_ts[dup] + 3_600_000_000, start_us + rng.integers(0, span_us, size=n_unknown)]
    received = all_ts + rng.integers(0, 5_000_000, size=len(all_ts))
    received = np.maximum(received, start_us)  # received during the run's days at the earliest
    label = np.where(all_numeric, None, np.where(all_truth >= 0.5, "1", "0")).astype(object)
    value = pa.array(all_truth, pa.float64(), mask=~all_numeric)
    order = rng.permutation(len(all_ts))
    ts_type = FEEDBACK.field("ts").type
    events = pa.table({
        "feedback_token": pa.array(all_idx_tokens[order].astype(object), pa.string()),
        "action": pa.nulls(len(order), pa.string()),
        "ts": pa.array(all_ts[order], pa.int64()).cast(ts_type),
        "received_at": pa.array(received[order], pa.int64()).cast(ts_type),
        "label": pa.array(label[order], pa.string()),
        "value": value.take(pa.array(order)),
    }, schema=FEEDBACK)
    _write_partitioned(events, "received_at", events_dir)
    done.write_text(json.dumps({"predictions": n_pred, "labels": n_labels, "seed": seed}))
    print(f"generated {n_pred:,} predictions, {n_labels:,} label events in {time.perf_counter() - t0:.1f}s", flush=True)
    return preds_dir, events_dir


DUCKDB_SQL = """
WITH p AS (
    SELECT feedback_token, ts, model, model_version, prediction
    FROM read_parquet('{preds}/**/*.parquet', hive_partitioning = false)
    WHERE ts >= '{start}'::TIMESTAMPTZ AND ts < '{end}'::TIMESTAMPTZ
),
first AS (
    SELECT feedback_token AS t, min({{'ts': ts, 'model': model, 'v': model_version}}) AS k,
        arg_min(prediction, {{'ts': ts, 'model': model, 'v': model_version}}) AS pred
    FROM p WHERE feedback_token IS NOT NULL GROUP BY 1
),
j AS (
    SELECT e.feedback_token, e.ts, coalesce(e.received_at, 'infinity'::TIMESTAMPTZ) AS received, f.k, f.pred,
        epoch_us(e.ts) - epoch_us(f.k.ts) AS delta,
        CASE WHEN f.k.model IN ({binary}) AND e.value IS NULL AND e.label IN ('0', '1') THEN e.label::DOUBLE
             WHEN f.k.model IN ({numeric}) AND e.label IS NULL AND isfinite(e.value) THEN e.value END AS y
    FROM read_parquet('{events}/**/*.parquet', hive_partitioning = false) e JOIN first f ON e.feedback_token = f.t
    WHERE e.feedback_token <> '' AND e.ts IS NOT NULL AND e.action IS NULL
),
l AS (
    SELECT arg_min({{'y': y, 'delta': delta, 'p': pred, 'model': k.model, 'v': k.v,
                     'day': strftime(k.ts, '%Y-%m-%d')}}, {{'ts': ts, 'r': received}}) AS f
    FROM j WHERE y IS NOT NULL AND delta >= 0 GROUP BY feedback_token
),
r AS (SELECT f.model AS model, f.v AS v, f.day AS day, f.y AS y, f.p AS p, f.delta / 1e6 AS delay FROM l),
s AS (
    SELECT model, v, day, p, count_if(y = 1) AS pos, count_if(y = 0) AS neg FROM r
    WHERE model IN ({binary}) AND p IS NOT NULL GROUP BY ALL
),
w AS (
    SELECT *, coalesce(sum(neg) OVER (PARTITION BY model, v, day ORDER BY p
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS below
    FROM s
),
a AS (SELECT model, v, day, sum(pos * (below + neg / 2.0)) AS auc_sum FROM w GROUP BY ALL),
m AS (
    SELECT model, v, day, count(*) AS labelled, count(p) AS scored, count_if(y = 1 AND p IS NOT NULL) AS positives,
        count_if(p IS NOT NULL AND model IN ({binary}) AND ((p > 0.5) = (y = 1))) AS correct,
        sum(CASE WHEN p IS NOT NULL AND model IN ({binary})
                 THEN -ln(least(greatest(CASE WHEN y = 1 THEN p ELSE 1 - p END, {eps}), 1 - {eps})) END) AS ll,
        sum(CASE WHEN p IS NOT NULL THEN (p - y) * (p - y) END) AS sq,
        sum(CASE WHEN p IS NOT NULL AND model IN ({numeric}) THEN abs(p - y) END) AS ab,
        quantile_cont(delay, [0.5, 0.9]) AS q
    FROM r GROUP BY ALL
),
i AS (SELECT model, model_version AS v, strftime(ts, '%Y-%m-%d') AS day, count(*) AS n FROM p GROUP BY ALL)
SELECT i.model, i.v, i.day, i.n, coalesce(m.labelled, 0), coalesce(m.scored, 0), coalesce(m.positives, 0),
    coalesce(m.correct, 0), coalesce(m.ll, 0), coalesce(m.sq, 0), coalesce(m.ab, 0), coalesce(a.auc_sum, 0), m.q
FROM i LEFT JOIN m USING (model, v, day) LEFT JOIN a USING (model, v, day) ORDER BY ALL
"""


Figures = dict[tuple[str, int, str], dict[str, Any]]


def _figures(sums: list[OutcomeSums]) -> Figures:
    kinds = {(m, v): kind for m, v, _, kind in MODELS}
    return {(s.model, s.model_version, s.day): {
        "impressions": s.impressions, "labelled": s.labelled, "scored": s.scored,
        "delay": [s.delay_p50_s, s.delay_p90_s], **performance(kinds[(s.model, s.model_version)], s)} for s in sums}


def run_duckdb(preds: Path, events: Path) -> Figures:
    """The anchor: the same rules and metrics in DuckDB (2 threads)."""
    import duckdb

    quoted = {kind: ", ".join(sorted({f"'{m}'" for m, _, _, k in MODELS if k == kind}))
              for kind in ("binary", "numeric")}
    con = duckdb.connect()
    try:
        con.execute("SET threads = 2; SET TimeZone = 'UTC'; SET preserve_insertion_order = false;")
        rows = con.execute(DUCKDB_SQL.format(preds=preds, events=events, start=START.isoformat(), end=END.isoformat(),
                                             eps=repr(EPS), **quoted)).fetchall()
    finally:
        con.close()
    sums = [OutcomeSums(model=r[0], model_version=int(r[1]), day=r[2], impressions=int(r[3]), labelled=int(r[4]),
                        scored=int(r[5]), positives=int(r[6]), correct=int(r[7]), log_loss_sum=float(r[8]),
                        squared_sum=float(r[9]), absolute_sum=float(r[10]), auc_sum=float(r[11]),
                        delay_p50_s=r[12][0] if r[12] else None, delay_p90_s=r[12][1] if r[12] else None)
            for r in rows]
    return _figures(sums)


def same(a: Figures, b: Figures) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        for name, x in a[key].items():
            y = b[key][name]
            pairs = zip(x, y, strict=True) if isinstance(x, list) else [(x, y)]
            for u, v in pairs:
                if (u is None) != (v is None):
                    return False
                if u is not None and not math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-12):
                    return False
    return True


def main(args: Any) -> int:
    """Run the labelled variant with the parsed arguments of ``bench/feedback.py``."""
    print("load average at start (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    data = Path(args.cache) / f"labels-p{args.predictions}-e{args.events}-s{args.seed}"
    preds, events = generate(data, args.predictions, args.events, args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-outcomes-"))

    from modelops.feedback.outcome_job import run_outcomes
    from modelops.spark import spark_session

    spark = spark_session("bench-outcomes")

    def job() -> Figures:
        result = run_outcomes(str(preds), str(events), START, END, str(work / "out"), specs=fixed(SPECS), spark=spark)
        return _figures(list(result.sums))

    commands = {"job_without_startup": job, "duckdb": lambda: run_duckdb(preds, events)}
    print("warm-up ...", flush=True)
    anchor = run_duckdb(preds, events)
    for _ in range(args.warmup_runs):
        job()
    times: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for i in range(args.rounds):
            for name in (list(commands) if i % 2 == 0 else list(reversed(commands))):
                t0 = time.perf_counter()
                result = commands[name]()
                times[name].append(time.perf_counter() - t0)
                if not same(result, anchor):
                    print(f"MISMATCH {name}:\n  {result}\n  duckdb: {anchor}", file=sys.stderr)
                    return 1
            print(f"round {i + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.predictions:,} predictions x {args.events:,} label events (one day)")
    for key, figures in sorted(anchor.items()):
        print("  job == duckdb:", key, json.dumps(figures))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:>20}: median {med[name]:.2f}s  rounds {[round(x, 2) for x in t]}")
    print("load average at end (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"job_without_startup / duckdb = {med['job_without_startup'] / med['duckdb']:.2f}")
    return 0
