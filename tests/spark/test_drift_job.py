"""The drift Spark job on small partitioned scored samples with drift injected in three known columns."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import ks_2samp

from modelops.drift.job import JobOptions, compute_drift, run_drift
from modelops.errors import ContractError
from modelops.features import Feature, load_features
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES
from modelops.records import partition_path, scored_samples_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

DRIFTED = ("user_ctr_30d", "item_price", "item_return_rate")  # sensitivities 1.0, 0.9, 1.0
DAY = datetime(2026, 11, 28, tzinfo=UTC)
ROWS = {"baseline": 6000, "current": 5000}
SEED = 20_240_601


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from modelops.spark import spark_session

    session = spark_session("test-drift-job", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def features() -> tuple[Feature, ...]:
    return load_features(RECOMMENDER_FEATURES)


def _values(rng: np.random.Generator, index: int, n: int) -> np.ndarray:
    kind = index % 5
    if kind == 0:
        values = rng.normal(10.0, 3.0, n)
    elif kind == 1:
        values = rng.standard_t(1.2, n)  # heavy tails
    elif kind == 2:
        values = rng.poisson(2.0, n).astype(np.float64)  # ties
    elif kind == 3:
        values = np.where(rng.random(n) < 0.4, 0.0, rng.lognormal(0.0, 2.0, n))  # point mass + heavy tail
    else:
        values = rng.uniform(0.0, 1.0, n)
    values[rng.random(n) < (0.05 if index % 4 == 0 else 0.0)] = np.nan
    return values


def _side(names: list[str], n: int, seed: int, drift: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = {name: _values(rng, i, n) for i, name in enumerate(names)}
    if drift:
        cols[DRIFTED[0]] = cols[DRIFTED[0]] + 1.5                  # shift
        cols[DRIFTED[1]] = cols[DRIFTED[1]] * 2.0                  # scale
        cols[DRIFTED[2]][rng.random(n) < 0.3] = 0.0                # more mass at one value
    cols["score"] = rng.beta(2.0, 5.0 if not drift else 4.6, n)    # mild score move
    return cols


def _write(root: Path, names: list[str], cols: dict[str, np.ndarray], seed: int) -> None:
    n = len(cols["score"])
    schema = scored_samples_schema(names)
    for hour, rows in enumerate(np.array_split(np.arange(n), 3)):
        when = DAY + timedelta(hours=hour)
        table = pa.Table.from_pydict({
            "request_id": [f"r{seed}-{i // 5}" for i in rows],
            "ts": pa.array([when] * len(rows), pa.timestamp("us", tz="UTC")),
            "model": ["ranker"] * len(rows),
            "model_version": pa.array([3] * len(rows), pa.int64()),
            "item_index": pa.array(rows % 5, pa.int32()),
            **{name: pa.array(values[rows], from_pandas=True) for name, values in cols.items()},
        }, schema=schema)
        part = root / partition_path("scored", when)
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part / "part-0.parquet")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, features: tuple[Feature, ...]) -> dict[str, object]:
    names = [f.name for f in features]
    root = tmp_path_factory.mktemp("drift")
    sides = {
        "baseline": _side(names, ROWS["baseline"], 1, drift=False),
        "current": _side(names, ROWS["current"], 2, drift=True),
    }
    for i, (side, cols) in enumerate(sides.items()):
        _write(root / side, names, cols, i)
    return {"root": root, **sides}


def _scipy(a: np.ndarray, b: np.ndarray) -> float:
    return float(ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)]).statistic)


def test_job_finds_the_injected_columns_and_matches_scipy(
    spark: SparkSession, data: dict[str, object], features: tuple[Feature, ...]
) -> None:
    root = data["root"]
    assert isinstance(root, Path)
    base, cur = data["baseline"], data["current"]
    assert isinstance(base, dict) and isinstance(cur, dict)
    result = run_drift(str(root / "baseline" / "scored"), str(root / "current" / "scored"),
                       str(RECOMMENDER_FEATURES), str(root / "out"), spark=spark)

    doc = json.loads(Path(result.json_path).read_text())
    assert doc["schema_version"] == 1
    assert doc["rows"] == {"baseline": 6000, "current": 5000} and doc["sampled"] is False
    assert doc["drifted"] is True and result.drifted is True
    assert sorted(doc["top_causes"]) == sorted(DRIFTED) and list(result.top_causes) == doc["top_causes"]
    by_name = {f["name"]: f for f in doc["features"]}
    assert len(by_name) == len(features) == 128
    assert {name for name, f in by_name.items() if f["drifted"]} == set(DRIFTED)
    errors = {name: abs(f["ks"] - _scipy(base[name], cur[name])) for name, f in by_name.items()}
    errors["score"] = abs(doc["score"]["ks"] - _scipy(base["score"], cur["score"]))
    assert max(errors.values()) <= 1e-12, max(errors.items(), key=lambda kv: kv[1])  # exact
    # moments of a column with nulls (every 4th column has 5% missing)
    name = features[4].name
    assert by_name[name]["baseline"]["missing_rate"] == pytest.approx(np.isnan(base[name]).mean())
    assert by_name[name]["current"]["mean"] == pytest.approx(np.nanmean(cur[name]))
    assert by_name[name]["current"]["std"] == pytest.approx(np.nanstd(cur[name]))
    assert by_name[DRIFTED[0]]["weighted_score"] == pytest.approx(by_name[DRIFTED[0]]["ks"] * 1.0)

    page = Path(result.html_path).read_text()
    assert "DRIFT DETECTED" in page
    causes = re.search(r"<ol id=top-causes>(.*?)</ol>", page, re.S)
    assert causes is not None and all(name in causes.group(1) for name in DRIFTED)
    assert "<script" not in page


def test_max_rows_samples_deterministically_and_the_shuffled_path_is_exact(
    spark: SparkSession, data: dict[str, object], features: tuple[Feature, ...]
) -> None:
    from pyspark.sql import functions as F

    root = data["root"]
    assert isinstance(root, Path)
    paths = [str(root / side / "scored") for side in ("baseline", "current")]
    # a sampled side goes through the shuffle (column blocks grouped by column), 3 column tasks
    small = JobOptions(curve_points=32, seed=SEED, column_tasks=3)
    run = compute_drift(spark, *paths, features, max_rows=4000, options=small)
    first = run.summary
    assert first.sampled and (first.rows_baseline, first.rows_current) == (4000, 4000)
    curve = run.curves["score"]
    assert 2 <= curve.x.size <= 34 and np.all(np.diff(curve.x) > 0)
    assert np.all(np.diff(curve.baseline) >= 0) and curve.current[-1] == 1.0

    # the sample is the rows with the 4000 smallest seeded hashes of (request_id, item_index):
    # independent of file order and partitioning, so a rerun analyses the same rows
    columns = ["score", *(f.name for f in features)]
    picked = []
    for path in paths:
        df = spark.read.parquet(path).withColumn("_k", F.xxhash64(F.lit(SEED), "request_id", "item_index"))
        table = df.orderBy("_k").limit(4000).select(*columns).toArrow()
        picked.append({c: table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in columns})
    computed = {first.score.name: first.score, **{f.name: f for f in first.features}}
    for name, column in computed.items():
        assert column.ks is not None
        assert abs(column.ks - _scipy(picked[0][name], picked[1][name])) <= 1e-12, name
        assert column.ks_error_bound == 0.0


def test_missing_feature_column_is_a_contract_error(
    spark: SparkSession, data: dict[str, object], features: tuple[Feature, ...], tmp_path: Path
) -> None:
    root = data["root"]
    assert isinstance(root, Path)
    extra = (*features, Feature("not_logged", "float64", 0, 1, "absent", "nobody", 0.5))
    with pytest.raises(ContractError, match="not_logged"):
        compute_drift(spark, str(root / "baseline" / "scored"), str(root / "current" / "scored"), extra)
