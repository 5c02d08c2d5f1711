"""Drift for models published from their spec: their samples in the job's wide shape, their features from the spec.

The gateway logs a spec model's sampled rows to ``logs/model_samples`` (:data:`modelops.records.MODEL_SAMPLES`):
one row per scored request row, its features as one list in the spec's column order and the row of
its first output. The drift job reads the recommender's *wide* scored samples — one float column per
feature plus ``score`` — so :func:`widen` turns a batch of model samples into that shape: the
columns named exactly as the spec's features (spaces and unicode included), ``score`` the row's
score (:func:`modelops.modelspec.scores.row_scores`: a binary classifier's positive-class
probability, a regressor's value), ``item_index`` the row within its request.

:func:`drift_features` reads the job's feature list from either document: the recommender's feature
metadata YAML or a version's ``model-spec.json`` (its features in order, each with its
``drift_sensitivity`` — :data:`~modelops.modelspec.spec.DEFAULT_DRIFT_SENSITIVITY` when nobody rated
it — and optional ``drift_threshold``; string columns are not KS-comparable and are left out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from modelops.errors import ContractError
from modelops.features import Feature, parse_features
from modelops.modelspec.render import drift_features as spec_drift_features
from modelops.modelspec.scores import row_scores
from modelops.modelspec.spec import ModelSpec

SCORE = "score"


def widen(batch: pa.RecordBatch | pa.Table, names: Sequence[str]) -> pa.RecordBatch:
    """A batch of model samples as wide scored samples: keys, ``score``, then one float64 column per name.

    Raises:
        ContractError: a row holds another number of feature values than ``names``.
    """
    taken = {"request_id", "item_index", "ts", "model", "model_version", SCORE} & set(names)
    if taken:
        raise ContractError(f"model samples: feature(s) {sorted(taken)} share a name with the drift job's own "
                            "columns; rename them in the model's signature")
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    rows = table.num_rows
    width = len(names)
    values = np.asarray(table.column("features").combine_chunks().flatten(), dtype=np.float64) \
        if rows else np.zeros(0)
    if values.size != rows * width:
        raise ContractError(f"model samples: {values.size} feature values for {rows} rows of {width} features "
                            f"({list(names)[:3]}…): the samples do not match the spec's features")
    matrix = values.reshape(rows, width)
    outputs = table.column("outputs").to_pylist()
    scores = np.array([row_scores(np.asarray([o]))[0] if o else math.nan for o in outputs], dtype=np.float64)
    columns = {"request_id": table.column("request_id"), "item_index": table.column("row_index"),
               "ts": table.column("ts"), "model": table.column("model"),
               "model_version": table.column("model_version"), SCORE: pa.array(scores, pa.float64())}
    for i, name in enumerate(names):
        columns[name] = pa.array(matrix[:, i], pa.float64())
    wide = pa.table(columns).combine_chunks()
    return wide.to_batches()[0] if rows else pa.RecordBatch.from_pylist([], schema=wide.schema)


def read_text(location: str) -> str:
    """A local file or an ``s3://bucket/key`` object, as text."""
    from pathlib import Path

    from modelops.objectstore import ObjectStore
    from modelops.spark_store import is_store_uri, split_uri

    if is_store_uri(location):
        bucket, key = split_uri(location)
        return ObjectStore.from_settings(bucket=bucket).get_bytes(key).decode()
    return Path(location).read_text()


def features_of(spec: ModelSpec) -> tuple[Feature, ...]:
    """The spec's drift features as the job's :class:`~modelops.features.Feature` (range unknown: ±inf)."""
    byname = {f.name: f for f in spec.features}
    return tuple(Feature(name=d.name, dtype="float64", min=-math.inf, max=math.inf,
                         description=byname[d.name].description, owner=byname[d.name].owner,
                         drift_sensitivity=d.sensitivity, drift_threshold=d.threshold)
                 for d in spec_drift_features(spec))


def drift_features(text: str, where: str) -> tuple[Feature, ...]:
    """The features a drift document names: a model spec (JSON with ``schema_version``) or feature metadata YAML.

    Raises:
        ContractError: neither document, or an invalid one (naming ``where``).
    """
    import yaml

    try:
        document: Any = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict) and "schema_version" in document:
        spec = ModelSpec.from_dict(document)
        features = features_of(spec)
        if not features:
            raise ContractError(f"{where}: model {spec.name} has no numeric feature columns to compare "
                                "(a model of tensors has no drift report)")
        return features
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ContractError(f"{where}: neither a model spec (JSON) nor feature metadata (YAML): {exc}") from exc
    return parse_features(parsed)
