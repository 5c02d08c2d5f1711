"""The nightly drift job: the exact two-sample KS statistic per column, in one scan and one shuffle.

1. row counts (Parquet footers for object-store inputs, else a Spark count), and when a side has
   more than ``max_rows`` rows a deterministic uniform sample of exactly that size (rows whose
   seeded hash is among the ``max_rows`` smallest);
2. one Spark job over both sides (unioned into one scan): ``mapInArrow`` turns every Arrow batch
   of the wide scored samples into one binary block per (column, side)
   (:func:`modelops.drift.exact.column_blocks`), the blocks are shuffled by column, and
   ``applyInArrow`` sorts each side of a column once and computes its exact D, moments and
   ECDF curve points (:func:`modelops.drift.exact.column_statistics`).

Rows are never collected to the driver, only one small record per column; the work spreads
over as many tasks as there are columns, so the job scales out on a cluster.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np

from modelops.drift import exact, stats
from modelops.drift.stats import SCORE_COLUMN, ColumnDrift, Curve, DriftComputation, DriftSummary, Moments
from modelops.errors import ContractError, ModelopsError
from modelops.features import Feature
from modelops.spark import session_conf

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

SIDES = ("baseline", "current")
_SIDE = "_modelops_side"
_KEY_COLUMNS = ("request_id", "item_index")
MAX_ROWS_LIMIT = 100_000_000
"""Largest ``max_rows``: one column of one side (8 bytes a value) must fit one Arrow batch (< 2 GiB)."""


@dataclass(frozen=True)
class JobOptions:
    """Tuning of the drift job (the statistic is exact whatever the values).

    Attributes:
        curve_points: about how many points each column's ECDF curve keeps for the report.
        seed: seed of the ``max_rows`` sample.
        batch_rows: Arrow batch size handed to the Python workers (rows of the wide input).
        split_bytes: Parquet bytes per Spark partition of the scan.
        column_tasks: tasks the columns are spread over after the shuffle (None: four per
            core of the cluster, at most one per column).
    """

    curve_points: int = 4096
    seed: int = 20_240_601
    batch_rows: int = 65_536
    split_bytes: int = 256 * 1024 * 1024
    column_tasks: int | None = None


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


@dataclass
class _Side:
    df: DataFrame
    """Keys and columns (as doubles), for the sampled path."""
    rows: int
    source: exact.Source | None
    """Its Parquet files when the executors can open them without Spark (local or object store)."""


def _local_source(df: DataFrame) -> exact.Source | None:
    files = df.inputFiles()
    if not files or not all(f.startswith("file:") for f in files):
        return None
    return exact.Source(tuple(sorted(unquote(urlparse(f).path) for f in files)), store=False)


def _read(spark: SparkSession, path: str, columns: Sequence[str], side: str) -> _Side:
    """The side's frame, rows (Parquet footers, read on the driver) and files.

    ``s3://`` locations are read by the executors (:mod:`modelops.spark_store`); others by Spark.
    """
    import pyarrow.parquet as pq
    from pyspark.errors import AnalysisException

    from modelops import spark_store

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
        source: exact.Source | None = exact.Source(objects.paths, store=True)
    else:
        source = _local_source(df)
        rows = df.count() if source is None else sum(pq.read_metadata(p).num_rows for p in source.paths)
    return _Side(df.select(*keys, *(_col(c).cast("double").alias(c) for c in columns)), rows, source)


def _col(name: str) -> Column:
    """The column ``name`` as it is: a spec model's names may hold dots, spaces or unicode ("mean radius")."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _sample_key(df: DataFrame, columns: Sequence[str], seed: int) -> Column:
    """A seeded 64-bit hash per row, independent of file order and partitioning.

    It hashes the row identity (``request_id``, ``item_index``) when the log has it, else the
    analysed values (identical rows then share a key, which cannot change the statistics).
    """
    from pyspark.sql import functions as F

    keys = list(_KEY_COLUMNS) if all(c in df.columns for c in _KEY_COLUMNS) else list(columns)
    return F.xxhash64(F.lit(seed), *(_col(k) for k in keys))


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
# the job
# --------------------------------------------------------------------------------------------


def _union(frames: Sequence[DataFrame], columns: Sequence[str]) -> DataFrame:
    from pyspark.sql import functions as F

    parts = [df.select(F.lit(side).cast("int").alias(_SIDE), *(_col(c) for c in columns))
             for side, df in enumerate(frames)]
    return parts[0].unionAll(parts[1])


def _column_tasks(spark: SparkSession, columns: int, opts: JobOptions) -> int:
    if opts.column_tasks is not None:
        return max(1, min(opts.column_tasks, columns))
    return max(1, min(columns, 4 * spark.sparkContext.defaultParallelism))


def _direct_statistics(
    spark: SparkSession, sources: tuple[exact.Source, exact.Source], columns: Sequence[str], opts: JobOptions
) -> list[dict[str, Any]]:
    """No shuffle: the columns are dealt over tasks that read them from both sides' files."""
    tasks = _column_tasks(spark, len(columns), opts)
    ids = spark.createDataFrame(spark.sparkContext.parallelize([(c,) for c in range(len(columns))], tasks),
                                "col int")
    task: Callable[[Iterator[Any]], Iterator[Any]] = functools.partial(
        exact.columns_task, sources, list(columns), opts.curve_points)
    rows: list[dict[str, Any]] = ids.mapInArrow(task, exact.RESULT_SCHEMA).toArrow().to_pylist()
    return rows


def _shuffled_statistics(union: DataFrame, opts: JobOptions) -> list[dict[str, Any]]:
    """One scan and one shuffle: column blocks grouped by column, one result row per column."""
    from pyspark.sql import functions as F

    blocks = union.mapInArrow(exact.column_blocks, exact.BLOCK_SCHEMA)
    points = opts.curve_points
    # a lambda, not functools.partial: applyInArrow inspects the function's signature
    task: Callable[[pa.Table], pa.Table] = lambda table: exact.column_statistics(points, table)  # noqa: E731
    rows: list[dict[str, Any]] = blocks.groupBy(F.col("col")).applyInArrow(
        task, exact.RESULT_SCHEMA).toArrow().to_pylist()
    return rows


def compute_drift(
    spark: SparkSession, baseline: str, current: str, features: Sequence[Feature], *,
    threshold: float = 0.05, max_rows: int = 1_000_000, options: JobOptions | None = None,
) -> DriftComputation:
    """Compare the current scored samples with the baseline, column by column (exact KS).

    Args:
        spark: the session to run on.
        baseline: Parquet file or directory tree of the baseline scored samples.
        current: the same for the current period.
        features: the feature metadata (every feature must be a column of both inputs).
        threshold: D above which a column drifts unless its feature sets ``drift_threshold``.
        max_rows: a side with more rows is reduced to a seeded uniform sample of this size
            (at most ``MAX_ROWS_LIMIT``: one column of one side travels as one Arrow batch).
        options: tuning; see :class:`JobOptions`.

    Raises:
        ContractError: an input lacks a feature column.
        ModelopsError: an input cannot be read.
    """
    opts = options or JobOptions()
    clock = _Clock()
    if not 1 <= max_rows <= MAX_ROWS_LIMIT:
        raise ValueError(f"max_rows must be between 1 and {MAX_ROWS_LIMIT:,} (got {max_rows}), e.g. 1_000_000")
    columns = [SCORE_COLUMN, *(f.name for f in features)]
    paths = (baseline, current)
    read = [_read(spark, path, columns, side) for path, side in zip(paths, SIDES, strict=True)]
    frames = [side.df for side in read]
    rows = [side.rows for side in read]
    clock.lap("count")
    for side, n, path in zip(SIDES, rows, paths, strict=True):
        if n == 0:
            raise ModelopsError(f"drift: the {side} scored samples at {path} have no rows")
    sampled = any(n > max_rows for n in rows)
    for i, n in enumerate(rows):
        if n > max_rows:
            frames[i], rows[i] = _limit_rows(frames[i], max_rows, columns, opts.seed)
    clock.lap("sample")

    with session_conf(spark, {
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(opts.batch_rows),
        "spark.sql.files.maxPartitionBytes": str(opts.split_bytes),
        "spark.sql.shuffle.partitions": str(_column_tasks(spark, len(columns), opts)),
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
    }):
        base_source, cur_source = read[0].source, read[1].source
        if sampled or base_source is None or cur_source is None:
            computed = _shuffled_statistics(_union(frames, columns), opts)
        else:
            computed = _direct_statistics(spark, (base_source, cur_source), columns, opts)
        found = {int(r["col"]): r for r in computed}
    clock.lap("statistics")

    thresholds = [threshold, *(f.drift_threshold or threshold for f in features)]
    results: list[ColumnDrift] = []
    curves: dict[str, Curve] = {}
    for c, name in enumerate(columns):
        r = found[c]
        base, cur = (Moments(r[f"rows_{s}"], r[f"count_{s}"], r[f"mean_{s}"], r[f"m2_{s}"]) for s in (0, 1))
        ks: float | None = r["ks"]
        if ks is not None:
            curves[name] = Curve(*(np.frombuffer(r[k], dtype=np.float64) for k in ("x", "ecdf_0", "ecdf_1")))
        feature = features[c - 1] if c else None
        results.append(stats.column_drift(
            name, ks, base, cur, threshold=thresholds[c],
            sensitivity=None if feature is None else feature.drift_sensitivity,
        ))
    summary = DriftSummary(rows[0], rows[1], sampled, threshold, results[0], tuple(results[1:]))
    clock.lap("finish")
    return DriftComputation(summary, curves, clock.laps)



class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now


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
        features_file: feature metadata YAML (the recommender's ``examples/recommender/features.yaml``) or a
            model spec JSON (a spec model's ``model-spec.json``), local or ``s3://``.
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
    from modelops.drift.model_samples import drift_features, read_text

    try:
        text = read_text(features_file)
    except OSError as exc:
        raise ContractError(f"cannot read feature metadata {features_file}: {exc}") from exc
    features = drift_features(text, features_file)
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
