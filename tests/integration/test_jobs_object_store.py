"""The Spark jobs' known answers again, with every input and output in the session stack's object store.

The same generated data as tests/spark (feedback: the pure-Python reference; drift: scipy's
two-sample KS) is uploaded under a fresh prefix of the platform bucket; the jobs get ``s3://``
locations only, their executors read the objects (pyarrow's S3 filesystem inside
``mapInArrow``) and the outputs are written back to the store, where these tests read them.
"""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from modelops import spark_store
from modelops.drift.job import run_drift
from modelops.errors import ModelopsError
from modelops.features import load_features
from modelops.feedback.definitions import result_document, utc
from modelops.feedback.job import run_feedback_join
from modelops.feedback.outputs import POINTER_NAME, current_location, current_prefix
from modelops.feedback.reference import reference_join
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES
from modelops.objectstore import ObjectStore
from tests.spark.test_drift_job import DRIFTED, ROWS, _scipy, _side, _write
from tests.spark.test_feedback_job import END, START, generate, write_inputs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark(object_store: ObjectStore) -> Iterator[SparkSession]:
    from modelops.spark import spark_session

    session = spark_session("test-jobs-object-store", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def prefix(object_store: ObjectStore) -> Iterator[str]:
    """A fresh prefix of the platform bucket, removed afterwards."""
    key = f"tests/jobs-object-store/{uuid.uuid4().hex[:8]}"
    yield key
    for stale in list(object_store.list_keys(key + "/")):
        object_store.delete(stale)


def _upload(store: ObjectStore, folder: Path, prefix: str) -> list[str]:
    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        keys.append(f"{prefix}/{path.relative_to(folder).as_posix()}")
        store.put_bytes(keys[-1], path.read_bytes())
    return keys


def _table(uri: str) -> list[dict[str, object]]:
    objects = spark_store.list_parquet([uri], "test output")
    return ds.dataset(list(objects.paths), filesystem=spark_store.filesystem(), format="parquet").to_table().to_pylist()


def test_feedback_job_reads_and_writes_the_store_and_equals_the_reference(
    spark: SparkSession, object_store: ObjectStore, prefix: str, tmp_path: Path
) -> None:
    window_hours = 24.0
    preds, events = generate(5, timedelta(hours=window_hours))
    pred_path, event_path = write_inputs(tmp_path, preds, events, partitioned=True)
    pred_keys = _upload(object_store, Path(pred_path), f"{prefix}/predictions")
    _upload(object_store, Path(event_path), f"{prefix}/events")
    expected = reference_join(preds, events, START, END, window_hours=window_hours)
    # As the DAG hands them over: one location per hour partition (predictions), a whole prefix (events).
    hours = sorted({object_store.uri(k.rsplit("/", 1)[0]) for k in pred_keys})
    events_uri = object_store.uri(f"{prefix}/events")
    out = object_store.uri(f"{prefix}/out")
    # What an earlier run of the window left (the flat layout from before the pointer): this run replaces it.
    stale = f"{prefix}/out/quarantine/part-0123456789ab-00000.parquet"
    object_store.put_bytes(stale, b"an earlier run's quarantine")
    object_store.put_bytes(f"{prefix}/out/ctr_cvr.json", b"{}")

    first = run_feedback_join(hours, events_uri, START, END, out, window_hours=window_hours, spark=spark)

    assert first.rows == expected.rows
    assert first.rejected == expected.rejected and all(expected.rejected.values())
    current = current_prefix(object_store, f"{prefix}/out")  # the run's generation, through the pointer
    document = json.loads(object_store.get_bytes(f"{current}/ctr_cvr.json"))
    assert document == first.document == json.loads(json.dumps(result_document(
        start=START, end=END, window_hours=window_hours, rows=expected.rows, rejected=expected.rejected)))
    assert first.json_path == object_store.uri(f"{current}/ctr_cvr.json") == f"{current_location(out)}/ctr_cvr.json"
    assert _table(first.parquet_path) == document["by_version"]
    expected_quarantine = Counter((e.feedback_token, e.action, e.ts, e.received_at, r.value)
                                  for e, r in expected.quarantine)

    def quarantine() -> Counter[tuple[object, ...]]:
        return Counter((r["feedback_token"], r["action"], r["ts"] and utc(r["ts"]),  # type: ignore[arg-type]
                        r["received_at"] and utc(r["received_at"]), r["reason"])  # type: ignore[arg-type]
                       for r in _table(first.quarantine_path))

    assert quarantine() == expected_quarantine
    keys = set(object_store.list_keys(f"{prefix}/out/"))
    assert stale not in keys and len({k.rsplit("-", 1)[0] for k in keys if "/quarantine/" in k}) == 1, keys
    generation = current.rsplit("/", 1)[1]
    assert {k.split("/out/", 1)[1].split("/", 1)[0] for k in keys} == {POINTER_NAME, generation}
    assert {k.split(f"{generation}/", 1)[1].split("/", 1)[0] for k in keys if f"/{generation}/" in k} == {
        "ctr_cvr.json", "ctr_cvr.parquet", "quarantine"}

    # A prefix holding other objects is not the job's to replace.
    object_store.put_bytes(f"{prefix}/foreign/notes.txt", b"keep me")
    with pytest.raises(ModelopsError, match="refusing to replace"):
        run_feedback_join(hours, events_uri, START, END, object_store.uri(f"{prefix}/foreign"), spark=spark)
    assert object_store.get_bytes(f"{prefix}/foreign/notes.txt") == b"keep me"


def test_drift_job_reads_the_store_and_matches_scipy(
    spark: SparkSession, object_store: ObjectStore, prefix: str, tmp_path: Path
) -> None:
    features = load_features(RECOMMENDER_FEATURES)
    names = [f.name for f in features]
    sides = {"baseline": _side(names, ROWS["baseline"], 1, drift=False),
             "current": _side(names, ROWS["current"], 2, drift=True)}
    for i, (side, cols) in enumerate(sides.items()):
        _write(tmp_path / side, names, cols, i)
    # The baseline as the DAG keeps it (one object), the current side as a dt=/hour= tree.
    baseline = ds.dataset(tmp_path / "baseline" / "scored", format="parquet").to_table()
    sink = io.BytesIO()
    pq.write_table(baseline, sink)
    object_store.put_bytes(f"{prefix}/baseline/samples.parquet", sink.getvalue())
    _upload(object_store, tmp_path / "current" / "scored", f"{prefix}/current")
    out = object_store.uri(f"{prefix}/report")

    result = run_drift(object_store.uri(f"{prefix}/baseline/samples.parquet"), object_store.uri(f"{prefix}/current"),
                       str(RECOMMENDER_FEATURES), out, spark=spark)

    assert result.json_path == f"{out}/drift.json"
    doc = json.loads(object_store.get_bytes(f"{prefix}/report/drift.json"))
    assert doc["rows"] == ROWS and doc["sampled"] is False
    assert doc["drifted"] is True and sorted(doc["top_causes"]) == sorted(DRIFTED)
    base, cur = sides["baseline"], sides["current"]
    errors = {f["name"]: abs(f["ks"] - _scipy(base[f["name"]], cur[f["name"]])) for f in doc["features"]}
    errors["score"] = abs(doc["score"]["ks"] - _scipy(base["score"], cur["score"]))
    assert len(errors) == len(features) + 1
    assert max(errors.values()) <= 1e-12, max(errors.items(), key=lambda kv: kv[1])  # exact
    assert "DRIFT DETECTED" in object_store.get_bytes(f"{prefix}/report/drift_report.html").decode()
