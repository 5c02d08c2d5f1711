"""Drift of a model published from its spec: the gateway's model samples, widened, compared column by column.

The breast-cancer classifier's 30 columns (names with spaces) plus one with unicode and a dot are
logged as the gateway logs them (:data:`modelops.records.MODEL_SAMPLES`: a list of feature values and
the row of its probabilities); :func:`modelops.drift.model_samples.widen` turns them into the job's
wide shape and the job reads its features from the version's ``model-spec.json``. A shift injected
into ``mean radius`` makes it the top cause; the KS values equal scipy's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import ks_2samp

from modelops.drift.job import run_drift
from modelops.drift.model_samples import SCORE, drift_features, widen
from modelops.errors import ContractError
from modelops.modelspec.spec import DEFAULT_DRIFT_SENSITIVITY, Feature, ModelSpec, Tensor
from modelops.records import MODEL_SAMPLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

SHIFTED = "mean radius"
EXTRA = "größe.cm"  # unicode and a dot: both must survive Spark's column resolution


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from modelops.spark import spark_session

    session = spark_session("test-drift-spec", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def _spec() -> ModelSpec:
    from sklearn.datasets import load_breast_cancer

    names = [*load_breast_cancer(as_frame=True).data.columns, EXTRA]
    features = tuple(Feature(name=n, dtype="FP64", drift_sensitivity=1.0 if n == SHIFTED else DEFAULT_DRIFT_SENSITIVITY)
                     for n in names)
    return ModelSpec(name="cancer", flavor="sklearn", inputs=(Tensor(name="input", dtype="FP64",
                                                                      shape=(-1, len(names))),),
                     outputs=(Tensor(name="probabilities", dtype="FP64", shape=(-1, 2)),), features=features)


def _model_samples(spec: ModelSpec, rng: np.random.Generator, n: int, shift: float) -> pa.Table:
    """n sampled rows as the gateway logs them: 2 rows per request, features and probabilities as lists."""
    k = len(spec.features)
    matrix = rng.normal(10.0, 2.0, size=(n, k))
    matrix[:, [f.name for f in spec.features].index(SHIFTED)] += shift
    positive = 1.0 / (1.0 + np.exp(-(matrix[:, 0] - 10.0)))
    return pa.table({
        "request_id": [f"r{i // 2}" for i in range(n)], "ts": pa.array(np.full(n, 1_700_000_000_000_000),
                                                                          pa.timestamp("us", tz="UTC")),
        "model": ["cancer"] * n, "model_version": pa.array(np.full(n, 3), pa.int64()), "spec": ["k"] * n,
        "row_index": pa.array(np.arange(n) % 2, pa.int32()),
        "features": pa.array(list(matrix), pa.list_(pa.float64())),
        "outputs": pa.array([[1.0 - p, p] for p in positive], pa.list_(pa.float64())),
    }, schema=MODEL_SAMPLES)


def test_a_spec_models_shifted_column_with_a_space_in_its_name_is_the_top_cause(
    spark: SparkSession, tmp_path: Path,
) -> None:
    spec = _spec()
    names = [f.name for f in spec.features]
    rng = np.random.default_rng(7)
    sides: dict[str, Any] = {}
    for side, shift in (("baseline", 0.0), ("current", 1.5)):
        wide = widen(_model_samples(spec, rng, 4000, shift), names)
        assert wide.schema.names[:6] == ["request_id", "item_index", "ts", "model", "model_version", SCORE]
        assert wide.schema.names[6:] == names
        (tmp_path / side).mkdir()
        pq.write_table(pa.Table.from_batches([wide]), tmp_path / side / "samples.parquet")
        sides[side] = wide
    spec_file = tmp_path / "model-spec.json"
    spec_file.write_text(spec.to_json())

    result = run_drift(str(tmp_path / "baseline"), str(tmp_path / "current"), str(spec_file), str(tmp_path / "out"),
                       spark=spark)
    doc = json.loads(Path(result.json_path).read_text())
    assert doc["top_causes"][0] == SHIFTED and result.top_causes[0] == SHIFTED
    by_name = {f["name"]: f for f in doc["features"]}
    assert list(by_name) == names and by_name[EXTRA]["drifted"] is False
    for name in (SHIFTED, EXTRA, SCORE):
        base = sides["baseline"].column(name).to_numpy()
        cur = sides["current"].column(name).to_numpy()
        got = doc["score"]["ks"] if name == SCORE else by_name[name]["ks"]
        assert got == pytest.approx(float(ks_2samp(base, cur).statistic), abs=1e-12)
    # the positive-class probability is the score of a binary classifier's answers
    first = sides["baseline"]
    assert first.column(SCORE).to_numpy()[0] == pytest.approx(
        _model_samples(spec, np.random.default_rng(7), 4000, 0.0).column("outputs")[0].as_py()[1])


def test_the_drift_features_come_from_the_spec_with_its_default_sensitivity() -> None:
    spec = _spec()
    features = drift_features(spec.to_json(), "model-spec.json")
    assert [f.name for f in features] == [f.name for f in spec.features]
    assert {f.drift_sensitivity for f in features if f.name != SHIFTED} == {DEFAULT_DRIFT_SENSITIVITY}
    with pytest.raises(ContractError, match="share a name with the drift job"):
        widen(_model_samples(spec, np.random.default_rng(1), 4, 0.0), ["score", *[f.name for f in spec.features][1:]])
    with pytest.raises(ContractError, match="do not match the spec's features"):
        widen(_model_samples(spec, np.random.default_rng(1), 4, 0.0), ["a", "b"])
