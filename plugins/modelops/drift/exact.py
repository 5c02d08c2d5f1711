"""Python-worker halves of the drift job's one shuffle: pure numpy/pyarrow, no Spark import.

1. :func:`column_blocks` (``mapInArrow`` over the wide scored-samples batches): every batch
   becomes one row per (column, side) whose ``values`` are the column's non-missing doubles
   as raw bytes, so Spark shuffles a few thousand binary rows instead of one row per value;
2. :func:`column_statistics` (``groupBy(col).applyInArrow``): all blocks of one column meet in
   one task, each side is sorted once, and the exact two-sample KS statistic
   (:func:`modelops.drift.stats.sorted_ks`), the moments and the ECDF curve points are
   computed there; one small row per column goes back to the driver.

A column's values never reach the driver; a task holds one column of both sides at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from modelops.drift import stats
from modelops.drift.stats import FloatArray, Moments
from modelops.errors import ModelopsError

if TYPE_CHECKING:
    import pyarrow as pa

BLOCK_SCHEMA = "col int, side int, rows long, values binary"
RESULT_SCHEMA = (
    "col int, rows_0 long, count_0 long, mean_0 double, m2_0 double, "
    "rows_1 long, count_1 long, mean_1 double, m2_1 double, ks double, "
    "x binary, ecdf_0 binary, ecdf_1 binary"
)


def _sides(batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The batch split by its first column (the side, 0 or 1); usually one side only."""
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


def present_values(column: pa.Array | pa.ChunkedArray) -> FloatArray:
    """The non-missing values of a double column (null and NaN are missing)."""
    values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    return values[~np.isnan(values)]


def column_blocks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``side, c0, c1, ...`` batches -> one ``(col, side, rows, values)`` row per column and side."""
    import pyarrow as pa

    for batch in batches:
        for side, part in _sides(batch):
            width = part.num_columns - 1
            blocks = [present_values(part.column(c + 1)).tobytes() for c in range(width)]
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.arange(width, dtype=np.int32)),
                    pa.array(np.full(width, side, dtype=np.int32)),
                    pa.array(np.full(width, part.num_rows, dtype=np.int64)),
                    pa.array(blocks, pa.binary()),
                ],
                names=["col", "side", "rows", "values"],
            )


def curve_points(a: FloatArray, b: FloatArray, points: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Up to ~``points`` x positions (order statistics of both sorted sides) and both ECDFs there."""
    picks = [s[np.unique(np.linspace(0, s.size - 1, num=min(points // 2 + 1, s.size)).astype(np.int64))]
             for s in (a, b)]
    x = np.unique(np.concatenate(picks))
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return x, fa, fb


def column_result(col: int, a: FloatArray, b: FloatArray, rows: tuple[int, int], points: int) -> dict[str, Any]:
    """One column's result row from both sides' sorted non-missing values and row counts."""
    row: dict[str, Any] = {"col": col}
    for s, (values, n) in enumerate(zip((a, b), rows, strict=True)):
        m = Moments.of(values, n)
        row |= {f"rows_{s}": m.rows, f"count_{s}": m.count, f"mean_{s}": m.mean, f"m2_{s}": m.m2}
    ks: float | None = None
    x = fa = fb = np.empty(0, np.float64)
    if a.size and b.size:
        ks = stats.sorted_ks(a, b)
        x, fa, fb = curve_points(a, b, points)
    return row | {"ks": ks, "x": x.tobytes(), "ecdf_0": fa.tobytes(), "ecdf_1": fb.tobytes()}


def result_batch(results: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    """Result rows (:func:`column_result`) as one batch of :data:`RESULT_SCHEMA`."""
    import pyarrow as pa

    kinds = {"col": pa.int32(), "ks": pa.float64(), "x": pa.binary(), "ecdf_0": pa.binary(), "ecdf_1": pa.binary()}
    for s in (0, 1):
        kinds |= {f"rows_{s}": pa.int64(), f"count_{s}": pa.int64(), f"mean_{s}": pa.float64(),
                  f"m2_{s}": pa.float64()}
    names = [part.split()[0] for part in RESULT_SCHEMA.split(", ")]
    return pa.RecordBatch.from_arrays([pa.array([r[n] for r in results], kinds[n]) for n in names], names=names)


def column_statistics(points: int, table: pa.Table) -> pa.Table:
    """All blocks of one column (:func:`column_blocks`) -> its result row."""
    import pyarrow as pa

    side = table.column("side").to_numpy()
    rows = table.column("rows").to_numpy()
    blocks = table.column("values").to_pylist()
    sorted_sides: list[FloatArray] = []
    counts: list[int] = []
    for s in (0, 1):
        chosen = np.flatnonzero(side == s).tolist()
        parts = [np.frombuffer(blocks[i], dtype=np.float64) for i in chosen]
        sorted_sides.append(np.sort(np.concatenate(parts)) if parts else np.empty(0, np.float64))
        counts.append(int(rows[chosen].sum()))
    col = int(table.column("col")[0].as_py())
    result = column_result(col, sorted_sides[0], sorted_sides[1], (counts[0], counts[1]), points)
    return pa.Table.from_batches([result_batch([result])])


# --------------------------------------------------------------------------------------------
# without a shuffle: each task reads its columns of both sides straight from the Parquet files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """The Parquet files of one side, as the executors open them."""

    paths: tuple[str, ...]
    store: bool
    """True: ``bucket/key`` paths on the object store (:func:`modelops.spark_store.filesystem`);
    False: local paths."""

    def read(self, names: Sequence[str]) -> pa.Table:
        import pyarrow.dataset as ds
        from pyarrow import fs as pafs

        from modelops import spark_store

        filesystem = spark_store.filesystem() if self.store else pafs.LocalFileSystem()
        try:
            return ds.dataset(list(self.paths), filesystem=filesystem, format="parquet").to_table(columns=list(names))
        except OSError as exc:
            raise ModelopsError(f"drift: cannot read {len(self.paths)} Parquet file(s) such as "
                                f"{self.paths[0]}: {exc}") from exc


def columns_task(
    sources: tuple[Source, Source], names: Sequence[str], points: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over column indices: read those columns of both sides, one result row each."""
    import pyarrow as pa

    wanted = sorted({int(c) for batch in batches for c in batch.column(0).to_pylist()})
    if not wanted:
        return
    tables = [source.read([names[c] for c in wanted]) for source in sources]
    rows = (tables[0].num_rows, tables[1].num_rows)
    results = []
    for c in wanted:
        a, b = (np.sort(present_values(t.column(names[c]).cast(pa.float64()))) for t in tables)
        results.append(column_result(c, a, b, rows, points))
    yield result_batch(results)
