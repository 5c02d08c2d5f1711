"""The nightly drift job: Spark aggregates columnar batches, numpy finishes.

Passes over the two scored-samples logs (baseline and current, unioned into one scan):

1. row counts (Parquet footers), and when a side has more than ``max_rows`` rows a
   deterministic uniform sample of exactly that size (rows whose seeded hash is among
   the ``max_rows`` smallest);
2. a small seeded sample of both sides, collected to build each column's grid
   (:func:`modelops.drift.stats.grid_edges`);
3. ``mapInArrow``: every Arrow batch is reduced with numpy to per-column cumulative
   counts on the grid plus moments; one small record per (partition, side, column)
   comes back and is summed on the driver;
4. only for columns whose bracket is wider than the tolerance (or straddles the
   threshold): a second ``mapInArrow`` over just those columns returns the values
   strictly inside the few candidate bins, which resolves D exactly there.

Rows are never collected to the driver: only samples, histograms and bin contents.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from modelops.drift import stats
from modelops.drift.stats import (
    SCORE_COLUMN,
    ColumnDrift,
    DriftSummary,
    FloatArray,
    IntArray,
    Moments,
    Partial,
)
from modelops.errors import ContractError, ModelopsError
from modelops.features import Feature, load_features

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

SIDES = ("baseline", "current")
_SIDE = "_modelops_side"
_KEY_COLUMNS = ("request_id", "item_index")


@dataclass(frozen=True)
class JobOptions:
    """Tuning of the drift job; the defaults keep |D - exact| <= 5e-4 at ~1 pass of numpy cost.

    Attributes:
        grid_edges: most edges per column (bins hold ~1/grid_edges of the rows each).
        grid_sample: rows per side sampled to place the edges.
        tolerance: largest accepted gap between the reported D and the exact statistic.
        seed: seed of both samples (the ``max_rows`` sample and the grid sample).
        batch_rows: Arrow batch size handed to the Python workers.
        max_refine_values: cap on the values fetched to resolve candidate bins (all columns).
        split_bytes: Parquet bytes per Spark partition (fewer, larger partitions mean fewer
            per-partition histograms to sum on the driver).
    """

    grid_edges: int = 4096
    grid_sample: int = 32_768
    tolerance: float = 5e-4
    seed: int = 20_240_601
    batch_rows: int = 65_536
    max_refine_values: int = 20_000_000
    split_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True)
class Curve:
    """Both ECDFs of one column on its grid (for the report's overlays)."""

    x: FloatArray
    baseline: FloatArray
    current: FloatArray


@dataclass(frozen=True)
class DriftComputation:
    """The job's numbers: the summary for drift.json plus ECDF curves for the report."""

    summary: DriftSummary
    curves: Mapping[str, Curve] = field(default_factory=dict)
    refined_columns: tuple[str, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    """Seconds per phase (count, sample, grid, histogram, refine, finish)."""


@dataclass(frozen=True)
class DriftResult:
    """What the DAG needs back: the verdict, the top causes and where the outputs are."""

    drifted: bool
    top_causes: tuple[str, ...]
    json_path: str
    html_path: str
    rows: tuple[int, int]
    """(baseline, current) rows analysed (after sampling)."""
    sampled: bool = False


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


def _read(spark: SparkSession, path: str, columns: Sequence[str], side: str) -> tuple[DataFrame, int | None]:
    """The side's frame (keys + columns as doubles) and, from an object store, its rows (Parquet footers).

    ``s3://`` locations are read by the executors (:mod:`modelops.spark_store`); local ones by Spark.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from modelops import spark_store

    rows: int | None = None
    if spark_store.is_store_uri(path):
        try:
            objects = spark_store.list_parquet([path], f"drift: {side} scored samples")
        except ContractError as exc:
            raise ModelopsError(f"drift: cannot read {side} scored samples at {path}: {exc}") from exc
        available = objects.columns
    else:
        try:
            df = spark.read.parquet(path)
        except AnalysisException as exc:
            message = f"drift: cannot read {side} scored samples at {path}: {exc.getMessage()}"
            raise ModelopsError(message) from exc
        available = df.columns
    missing = [c for c in columns if c not in available]
    if missing:
        shown = ", ".join(missing[:5]) + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else "")
        raise ContractError(
            f"drift: {side} scored samples at {path} lack column(s) {shown}: every feature of the "
            "metadata and 'score' must be a column (see modelops.records.scored_samples_schema)"
        )
    keys = [c for c in _KEY_COLUMNS if c in available]
    if spark_store.is_store_uri(path):
        df = spark_store.read_frame(spark, objects, [*keys, *columns])
        rows = spark_store.count_rows(objects)
    return df.select(*keys, *(F.col(c).cast("double").alias(c) for c in columns)), rows


def _sample_key(df: DataFrame, columns: Sequence[str], seed: int) -> Column:
    """A seeded 64-bit hash per row, independent of file order and partitioning.

    It hashes the row identity (``request_id``, ``item_index``) when the log has it, else the
    analysed values (identical rows then share a key, which cannot change the statistics).
    """
    from pyspark.sql import functions as F

    keys = list(_KEY_COLUMNS) if all(c in df.columns for c in _KEY_COLUMNS) else list(columns)
    return F.xxhash64(F.lit(seed), *keys)


def _limit_rows(df: DataFrame, max_rows: int, columns: Sequence[str], seed: int) -> tuple[DataFrame, int]:
    """The rows whose key is among the ``max_rows`` smallest (exact size up to key ties)."""
    from pyspark.sql import functions as F

    key = _sample_key(df, columns, seed)
    keyed = df.select(key.alias("k"))
    buckets = keyed.groupBy(F.shiftright("k", 48).alias("b")).count().toArrow().sort_by("b")
    counts = np.cumsum(buckets.column("count").to_numpy())
    at = int(np.searchsorted(counts, max_rows, side="left"))
    bucket = int(buckets.column("b")[at].as_py())
    before = int(counts[at - 1]) if at else 0
    inside = np.sort(keyed.where(F.shiftright("k", 48) == bucket).toArrow().column("k").to_numpy())
    cut = int(inside[max_rows - before - 1])
    used = before + int(np.searchsorted(inside, cut, side="right"))
    return df.where(key <= F.lit(cut)), used


# --------------------------------------------------------------------------------------------
# Python-worker functions (run inside mapInArrow; numpy only)
# --------------------------------------------------------------------------------------------


def _split_sides(batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
    import pyarrow.compute as pc

    side = batch.column(0)
    lo, hi = pc.min_max(side).values()
    if lo.as_py() == hi.as_py():
        yield int(lo.as_py()), batch
        return
    for value in (0, 1):
        part = batch.filter(pc.equal(side, value))
        if part.num_rows:
            yield value, part


def _column_values(batch: pa.RecordBatch, index: int) -> FloatArray:
    values: FloatArray = np.asarray(batch.column(index).to_numpy(zero_copy_only=False), dtype=np.float64)
    return values


_PARTIAL_FIELDS = ("side", "col", "rows", "count", "mean", "m2", "right", "left")


def _partial_schema() -> str:
    return "side int, col int, rows long, count long, mean double, m2 double, right binary, left binary"


def _count_dtype(count: int) -> type[np.signedinteger[Any]]:
    return np.int32 if count < 2**31 else np.int64


def _pack(counts: IntArray, count: int) -> bytes:
    """Cumulative counts as bytes: int32 unless the partition holds 2^31 values or more."""
    return counts.astype(_count_dtype(count)).tobytes()


def _unpack(raw: bytes, count: int) -> IntArray:
    return np.frombuffer(raw, dtype=_count_dtype(count)).astype(np.int64)


def _histogram_task(
    edges: Sequence[FloatArray], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    acc: dict[tuple[int, int], Partial] = {}
    for batch in batches:
        for side, part in _split_sides(batch):
            for col, col_edges in enumerate(edges):
                partial = stats.batch_partial(_column_values(part, col + 1), col_edges)
                key = (side, col)
                acc[key] = acc[key].merge(partial) if key in acc else partial
    if not acc:
        return
    keys = sorted(acc)
    rows = [acc[k] for k in keys]
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([k[0] for k in keys], pa.int32()),
            pa.array([k[1] for k in keys], pa.int32()),
            pa.array([p.moments.rows for p in rows], pa.int64()),
            pa.array([p.moments.count for p in rows], pa.int64()),
            pa.array([p.moments.mean for p in rows], pa.float64()),
            pa.array([p.moments.m2 for p in rows], pa.float64()),
            pa.array([_pack(p.right, p.moments.count) for p in rows], pa.binary()),
            pa.array([_pack(p.left, p.moments.count) for p in rows], pa.binary()),
        ],
        names=list(_PARTIAL_FIELDS),
    )


def _refine_task(
    plan: Sequence[tuple[int, FloatArray, IntArray]], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Per (side, column, bin): the values strictly inside the bin, as float64 bytes."""
    import pyarrow as pa

    out: dict[tuple[int, int, int], list[FloatArray]] = {}
    for batch in batches:
        for side, part in _split_sides(batch):
            for position, (col, col_edges, bins) in enumerate(plan):
                values = _column_values(part, position + 1)
                inside_bins = stats.interior_values(values, col_edges, bins)
                for j, inside in zip(bins.tolist(), inside_bins, strict=True):
                    if inside.size:
                        out.setdefault((side, col, j), []).append(inside)
    keys = sorted(out)
    if keys:
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([k[0] for k in keys], pa.int32()),
                pa.array([k[1] for k in keys], pa.int32()),
                pa.array([k[2] for k in keys], pa.int32()),
                pa.array([np.concatenate(out[k]).tobytes() for k in keys], pa.binary()),
            ],
            names=["side", "col", "bin", "values"],
        )


# --------------------------------------------------------------------------------------------
# the job
# --------------------------------------------------------------------------------------------


def _union(frames: Sequence[DataFrame], columns: Sequence[str]) -> DataFrame:
    from pyspark.sql import functions as F

    parts = [df.select(F.lit(side).cast("int").alias(_SIDE), *columns) for side, df in enumerate(frames)]
    return parts[0].unionAll(parts[1])


def _grid(
    frames: Sequence[DataFrame], rows: Sequence[int], columns: Sequence[str], opts: JobOptions
) -> list[FloatArray]:
    """Edges per column from one seeded sample of both sides (one Spark job)."""
    picked = []
    for df, n in zip(frames, rows, strict=True):
        fraction = min(1.0, 1.2 * opts.grid_sample / max(n, 1))
        picked.append(df if fraction >= 1.0 else df.sample(False, fraction, opts.seed))
    table = _union(picked, columns).toArrow()
    side = table.column(_SIDE).to_numpy()
    masks = [side == s for s in (0, 1)]
    edges = []
    for name in columns:
        values = np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
        pooled = np.concatenate([values[mask][: opts.grid_sample] for mask in masks])
        edges.append(stats.grid_edges(pooled, opts.grid_edges))
    return edges


def _histograms(
    union: DataFrame, columns: Sequence[str], edges: Sequence[FloatArray]
) -> dict[tuple[int, int], Partial]:
    task: Callable[[Iterator[Any]], Iterator[Any]] = functools.partial(_histogram_task, list(edges))
    table = union.select(_SIDE, *columns).mapInArrow(task, _partial_schema()).toArrow()
    merged: dict[tuple[int, int], Partial] = {}
    for row in table.to_pylist():
        key = (int(row["side"]), int(row["col"]))
        partial = Partial(
            Moments(int(row["rows"]), int(row["count"]), float(row["mean"]), float(row["m2"])),
            _unpack(row["right"], int(row["count"])),
            _unpack(row["left"], int(row["count"])),
        )
        merged[key] = merged[key].merge(partial) if key in merged else partial
    return merged


def _refine(
    union: DataFrame, columns: Sequence[str], edges: Sequence[FloatArray],
    plan: Mapping[int, IntArray],
) -> dict[tuple[int, int], tuple[list[FloatArray], list[FloatArray]]]:
    ordered = sorted(plan)
    steps = [(col, edges[col], plan[col]) for col in ordered]
    task: Callable[[Iterator[Any]], Iterator[Any]] = functools.partial(_refine_task, steps)
    names = [columns[col] for col in ordered]
    table = union.select(_SIDE, *names).mapInArrow(
        task, "side int, col int, bin int, values binary").toArrow()
    found: dict[tuple[int, int], tuple[list[FloatArray], list[FloatArray]]] = {}
    for row in table.to_pylist():
        key = (int(row["col"]), int(row["bin"]))
        values = np.frombuffer(row["values"], dtype=np.float64)
        found.setdefault(key, ([], []))[int(row["side"])].append(values)
    return found


def compute_drift(
    spark: SparkSession, baseline: str, current: str, features: Sequence[Feature], *,
    threshold: float = 0.05, max_rows: int = 1_000_000, options: JobOptions | None = None,
) -> DriftComputation:
    """Compare the current scored samples with the baseline, column by column.

    Args:
        spark: the session to run on.
        baseline: Parquet file or directory tree of the baseline scored samples.
        current: the same for the current period.
        features: the feature metadata (every feature must be a column of both inputs).
        threshold: D above which a column drifts unless its feature sets ``drift_threshold``.
        max_rows: a side with more rows is reduced to a seeded uniform sample of this size.
        options: tuning; see :class:`JobOptions`.

    Raises:
        ContractError: an input lacks a feature column.
        ModelopsError: an input cannot be read.
    """
    opts = options or JobOptions()
    clock = _Clock()
    if max_rows < 1:
        raise ValueError("max_rows must be >= 1")
    columns = [SCORE_COLUMN, *(f.name for f in features)]
    paths = (baseline, current)
    read = [_read(spark, path, columns, side) for path, side in zip(paths, SIDES, strict=True)]
    frames = [df for df, _ in read]
    rows = [df.count() if known is None else known for df, known in read]
    clock.lap("count")
    for side, n, path in zip(SIDES, rows, paths, strict=True):
        if n == 0:
            raise ModelopsError(f"drift: the {side} scored samples at {path} have no rows")
    sampled = any(n > max_rows for n in rows)
    for i, n in enumerate(rows):
        if n > max_rows:
            frames[i], rows[i] = _limit_rows(frames[i], max_rows, columns, opts.seed)
    clock.lap("sample")

    with _session_conf(spark, {
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(opts.batch_rows),
        "spark.sql.files.maxPartitionBytes": str(opts.split_bytes),
    }):
        edges = _grid(frames, rows, columns, opts)
        clock.lap("grid")
        union = _union(frames, columns)
        partials = _histograms(union, columns, edges)
        clock.lap("histogram")
        pairs = [
            (partials.get((0, c)) or _empty_like(edges[c], rows[0]),
             partials.get((1, c)) or _empty_like(edges[c], rows[1]))
            for c in range(len(columns))
        ]
        thresholds = [threshold, *(f.drift_threshold or threshold for f in features)]
        grids = {c: stats.ks_on_grid(b, k) for c, (b, k) in enumerate(pairs) if b.moments.count and k.moments.count}
        plan = stats.plan_refinement(grids, pairs, thresholds, opts.tolerance, opts.max_refine_values)
        found = _refine(union, columns, edges, plan) if plan else {}
        clock.lap("refine")

    results: list[ColumnDrift] = []
    curves: dict[str, Curve] = {}
    for c, name in enumerate(columns):
        base, cur = pairs[c]
        ks: float | None = None
        bound = 0.0
        if c in grids:
            resolved = {int(j): found.get((c, int(j)), ([], [])) for j in plan.get(c, np.empty(0, np.int64))}
            ks, upper = stats.refine_ks(grids[c], base, cur, resolved)
            bound = upper - ks
            curves[name] = Curve(edges[c], base.right / base.moments.count, cur.right / cur.moments.count)
        feature = features[c - 1] if c else None
        results.append(stats.column_drift(
            name, ks, base.moments, cur.moments, threshold=thresholds[c],
            sensitivity=None if feature is None else feature.drift_sensitivity, error_bound=bound,
        ))
    summary = DriftSummary(rows[0], rows[1], sampled, threshold, results[0], tuple(results[1:]))
    refined = tuple(columns[c] for c in sorted(plan))
    clock.lap("finish")
    return DriftComputation(summary, curves, refined, clock.laps)


@contextlib.contextmanager
def _session_conf(spark: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL options for the job and restore the previous values afterwards."""
    previous = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now


def _empty_like(edges: FloatArray, rows: int) -> Partial:
    zeros = np.zeros(edges.size, np.int64)
    return Partial(Moments(rows, 0, 0.0, 0.0), zeros, zeros.copy())


def run_drift(
    baseline: str, current: str, features_file: str, out_dir: str, *,
    threshold: float = 0.05, max_rows: int = 1_000_000, master: str | None = None,
    extra_sections: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    spark: SparkSession | None = None,
    options: JobOptions | None = None,
) -> DriftResult:
    """Run the drift job end to end: compute, write ``drift.json`` and ``drift_report.html``.

    Args:
        baseline: baseline scored samples (local path or ``s3a://`` URI; file or partitioned tree).
        current: current scored samples, same forms.
        features_file: feature metadata YAML (``expectations/features.yaml``).
        out_dir: local directory or ``s3a://bucket/prefix`` / ``s3://bucket/prefix`` for the outputs.
        threshold: default KS threshold (a feature's ``drift_threshold`` wins).
        max_rows: per-side row cap; larger sides are sampled (seeded, deterministic).
        master: Spark master URL; ``MODELOPS_SPARK_MASTER`` when omitted.
        extra_sections: more report sections, title -> content (a mapping, or (title, content)
            pairs to keep an order); content is text, a mapping, a list of mappings or a list.
        spark: an existing session to reuse (``master`` is then ignored).
        options: tuning; see :class:`JobOptions`.
    """
    from modelops.drift import report

    features = load_features(features_file)
    if spark is None:
        from modelops.spark import spark_session

        spark = spark_session("modelops-drift", master)
    computation = compute_drift(spark, baseline, current, features, threshold=threshold, max_rows=max_rows,
                                options=options)
    summary = computation.summary
    json_path, html_path = report.write_outputs(
        out_dir, report.to_json(summary), report.render_html(computation, dict(extra_sections or {}),
                                                           baseline=baseline, current=current),
    )
    return DriftResult(summary.drifted, summary.top_causes, json_path, html_path,
                       (summary.rows_baseline, summary.rows_current), summary.sampled)
