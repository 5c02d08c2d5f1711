"""The pure parts of modelops.spark_store: object-store locations and the Arrow types Spark exchanges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from modelops.errors import ContractError
from modelops.spark_store import is_store_uri, spark_compatible, split_uri


def test_locations_split_into_bucket_and_prefix() -> None:
    assert split_uri("s3://modelops/logs/predictions/dt=2026-11-01/") == ("modelops", "logs/predictions/dt=2026-11-01/")
    assert split_uri("s3a://modelops/a.parquet") == ("modelops", "a.parquet")
    assert split_uri("s3://modelops") == ("modelops", "")
    assert is_store_uri("s3://b/k") and is_store_uri("s3a://b/k")
    assert not is_store_uri("/var/lib/modelops/jobs") and not is_store_uri("gs://b/k")


@pytest.mark.parametrize("bad", ["/tmp/x", "gs://bucket/key", "s3://", "s3:///key"])
def test_a_bad_location_is_refused_with_the_rule_and_an_example(bad: str) -> None:
    with pytest.raises(ContractError, match=r"must be s3://BUCKET/PREFIX \(example: s3://modelops/"):
        split_uri(bad)


def test_schemas_get_the_types_spark_exchanges_with_arrow() -> None:
    schema = pa.schema([
        ("ts", pa.timestamp("ns", tz="UTC")), ("local", pa.timestamp("ms")), ("name", pa.large_string()),
        ("blob", pa.large_binary()), ("kind", pa.dictionary(pa.int32(), pa.string())), ("x", pa.float64()),
    ])
    assert spark_compatible(schema) == pa.schema([
        ("ts", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")), ("name", pa.string()),
        ("blob", pa.binary()), ("kind", pa.string()), ("x", pa.float64()),
    ])


def _batches(fail_after: int | None = None) -> Any:
    import pyarrow as pa

    for k in range(3):
        if fail_after is not None and k == fail_after:
            raise OSError("connection reset by the store")
        yield pa.RecordBatch.from_pydict({"x": [k, k + 10]})


@pytest.mark.parametrize("atomic", [False, True])
def test_write_batches_writes_whole_objects_or_none(tmp_path: Path, atomic: bool) -> None:
    import pyarrow.parquet as pq
    from pyarrow.fs import LocalFileSystem

    from modelops.errors import ObjectStoreError
    from modelops.spark_store import write_batches

    fs, path = LocalFileSystem(), str(tmp_path / "out.parquet")
    assert write_batches(fs, path, _batches(), atomic=atomic) == 6
    assert pq.read_table(path).column("x").to_pylist() == [0, 10, 1, 11, 2, 12]
    with pytest.raises(ObjectStoreError, match=r"out\.parquet"):
        write_batches(fs, path, _batches(fail_after=2), atomic=atomic)
    if atomic:  # the object that was there stays whole
        assert pq.read_table(path).num_rows == 6
    else:  # no truncated object is left behind
        assert not (tmp_path / "out.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out.parquet"] if atomic else [])
    assert write_batches(fs, str(tmp_path / "none.parquet"), iter([]), atomic=atomic) == 0
    assert not (tmp_path / "none.parquet").exists()
