"""The model-samples log: any model's request rows with its own columns, named by its spec (pure parts)."""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow.parquet as pq

from modelops.gateway.logs.eventlog import convert_model_samples, model_sample_record
from modelops.gateway.protocol.forms import edge_model, sample_features
from modelops.modelspec.spec import ModelSpec
from modelops.records import MODEL_SAMPLES

TS = 1_796_300_000.0  # 2026-12-03T12:53:20Z


def test_records_of_two_models_become_one_row_per_request_row() -> None:
    cancer = model_sample_record(request_id="r1", ts=TS, model="cancer", model_version=2,
                                 spec="triton/repository/cancer/2/model-spec.json",
                                 features=np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32),
                                 outputs=np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float32))
    price = model_sample_record(request_id="r2", ts=TS + 1, model="price", model_version=1,
                                spec="triton/repository/price/1/model-spec.json",
                                features=np.array([[7.0]]), outputs=np.array([12.5]))
    (hour, data), = convert_model_samples([cancer, price]).items()
    assert hour.hour == 12
    table = pq.read_table(io.BytesIO(data))
    assert table.schema.equals(MODEL_SAMPLES)
    rows = table.to_pylist()
    assert [(r["request_id"], r["model"], r["model_version"], r["row_index"]) for r in rows] == [
        ("r1", "cancer", 2, 0), ("r1", "cancer", 2, 1), ("r2", "price", 1, 0)]
    assert rows[0]["features"][0] == 1.0 and math.isnan(rows[0]["features"][1]) and rows[1]["features"] == [4, 5, 6]
    assert rows[0]["outputs"] == [0.25, 0.75] and rows[2]["outputs"] == [12.5] and rows[2]["features"] == [7.0]
    assert rows[2]["spec"] == "triton/repository/price/1/model-spec.json"


def test_sample_features_in_the_spec_order_for_matrix_and_per_column_models() -> None:
    def spec(inputs: list[dict[str, object]], features: int) -> ModelSpec:
        return ModelSpec.from_dict({"name": "m", "flavor": "onnx", "inputs": inputs,
                                    "outputs": [{"name": "y", "dtype": "FP32", "shape": [-1, 1]}],
                                    "features": [{"name": f"c{i}", "dtype": "FP64"} for i in range(features)]})

    matrix = edge_model(spec([{"name": "input", "dtype": "FP32", "shape": [-1, 2]}], 2))
    got = sample_features(matrix, (("input", np.array([[1.0, 2.0]], dtype=np.float32)),))
    assert got is not None and got.tolist() == [[1.0, 2.0]] and got.dtype == np.float64
    columns = edge_model(spec([{"name": "c0", "dtype": "INT64", "shape": [-1, 1]},
                               {"name": "c1", "dtype": "FP32", "shape": [-1, 1]}], 2))
    got = sample_features(columns, (("c0", np.array([[3]])), ("c1", np.array([[0.5]], dtype=np.float32))))
    assert got is not None and got.tolist() == [[3.0, 0.5]]
    tensors = edge_model(ModelSpec.from_dict({"name": "t", "flavor": "onnx",
                                              "inputs": [{"name": "x", "dtype": "FP32", "shape": [-1, 8]}],
                                              "outputs": [{"name": "y", "dtype": "FP32", "shape": [-1, 1]}]}))
    assert sample_features(tensors, (("x", np.zeros((1, 8), dtype=np.float32)),)) is None
