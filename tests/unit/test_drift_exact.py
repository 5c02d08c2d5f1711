"""The Python-worker halves of the drift job (modelops.drift.exact), in-process, against scipy."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import ks_2samp

from modelops.drift import exact
from modelops.errors import ModelopsError


def _scipy(a: np.ndarray, b: np.ndarray) -> float:
    return float(ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)]).statistic)


def _wide(side: np.ndarray, x: np.ndarray, y: np.ndarray) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(side, pa.int32()), pa.array(x, from_pandas=True), pa.array(y, from_pandas=True)],
        names=["side", "x", "y"])


def test_blocks_then_statistics_equal_scipy_and_numpy_moments() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    side = (rng.random(n) < 0.4).astype(np.int32)
    x = rng.normal(0.0, 1.0, n) + side * 0.3
    y = rng.poisson(2.0, n).astype(np.float64)  # ties
    x[rng.random(n) < 0.05] = np.nan
    batches = [_wide(side[i:i + 700], x[i:i + 700], y[i:i + 700]) for i in range(0, n, 700)]
    batches.append(_wide(np.zeros(2, np.int32), np.array([np.nan, np.nan]), np.array([1.0, 1.0])))
    blocks = pa.Table.from_batches(list(exact.column_blocks(iter(batches))))
    assert blocks.schema.names == ["col", "side", "rows", "values"]
    for col, values in enumerate((x, y)):
        mine = blocks.filter(pa.compute.equal(blocks.column("col"), col))
        out = exact.column_statistics(64, mine).to_pylist()
        assert len(out) == 1
        row = out[0]
        a = np.concatenate([values[side == 0], [np.nan, np.nan] if col == 0 else [1.0, 1.0]])
        b = values[side == 1]
        assert row["col"] == col
        assert row["ks"] == pytest.approx(_scipy(a, b), abs=1e-12)
        assert (row["rows_0"], row["rows_1"]) == (a.size, b.size)
        assert (row["count_0"], row["count_1"]) == (int(np.sum(~np.isnan(a))), int(np.sum(~np.isnan(b))))
        assert row["mean_0"] == pytest.approx(np.nanmean(a))
        assert row["m2_1"] == pytest.approx(np.nanvar(b) * row["count_1"])
        curve_x = np.frombuffer(row["x"], dtype=np.float64)
        ecdf = np.frombuffer(row["ecdf_1"], dtype=np.float64)
        assert 2 <= curve_x.size <= 66 and np.all(np.diff(curve_x) > 0) and ecdf[-1] == 1.0


def test_a_side_without_values_has_no_statistic() -> None:
    row = exact.column_result(3, np.empty(0), np.array([1.0, 2.0]), (5, 2), 16)
    assert row["ks"] is None and row["count_0"] == 0 and row["rows_0"] == 5
    assert exact.result_batch([row]).num_rows == 1


def test_columns_task_reads_its_columns_of_both_sides_from_the_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    sides = []
    for s, shift in ((0, 0.0), (1, 0.5)):
        paths = []
        for part in range(2):
            n = 400 + 100 * part + 50 * s
            table = pa.table({"a": rng.normal(shift, 1.0, n), "b": pa.array(rng.integers(0, 9, n), pa.int64())})
            path = tmp_path / f"side{s}-{part}.parquet"
            pq.write_table(table, path)
            paths.append(str(path))
        sides.append(exact.Source(tuple(paths), store=False))
    ids = pa.RecordBatch.from_arrays([pa.array([1, 0], pa.int32())], names=["col"])
    (out,) = exact.columns_task((sides[0], sides[1]), ["a", "b"], 32, iter([ids]))
    rows = {r["col"]: r for r in out.to_pylist()}
    for col, name in enumerate(("a", "b")):
        a, b = (pq.read_table(list(src.paths), columns=[name]).column(name).to_numpy().astype(float) for src in sides)
        assert rows[col]["ks"] == pytest.approx(_scipy(a, b), abs=1e-12)
        assert (rows[col]["rows_0"], rows[col]["rows_1"]) == (a.size, b.size)
    assert list(exact.columns_task((sides[0], sides[1]), ["a", "b"], 32, iter([]))) == []


def test_unreadable_files_name_the_path() -> None:
    source = exact.Source(("/nonexistent/part-0.parquet",), store=False)
    with pytest.raises(ModelopsError, match=re.escape("/nonexistent/part-0.parquet")):
        source.read(["a"])
