"""Spark jobs on the object store without an S3 connector: pyarrow's S3 filesystem in the executors.

hadoop-aws (``s3a://``) comes from Maven, which this platform does not reach, so Spark's own
readers cannot open ``s3://`` locations. Instead:

* reading: the driver lists the Parquet objects under the given ``s3://bucket/prefix``
  locations (and reads the first one's schema); a DataFrame of their paths is spread over the
  executors and ``mapInArrow`` reads each object there with :class:`pyarrow.fs.S3FileSystem`,
  only the requested columns, as Arrow record batches;
* writing: ``mapInArrow`` over the frame to write, each partition streaming its batches into
  one Parquet object ``<prefix>/part-<run tag>-<partition>.parquet``.

Executors (and the driver) take the endpoint and the credentials from their own settings:
``MODELOPS_S3_ENDPOINT_URL`` / ``MODELOPS_S3_ACCESS_KEY`` / ``MODELOPS_S3_SECRET_KEY``, or the
embedded stack's keys under ``MODELOPS_HOME``. In the compose topology the Spark workers carry
an object-store identity of their own. Nothing here is passed through the job's arguments.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa

from modelops.errors import ContractError, ObjectStoreError

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem
    from pyspark.sql import DataFrame, SparkSession

SCHEMES = ("s3://", "s3a://")
EXAMPLE = "s3://modelops/logs/predictions/dt=2026-11-01/"
SPLIT_BYTES = 128 * 1024 * 1024
"""Parquet bytes per read partition when there are more bytes than executor cores can take at once."""


def is_store_uri(location: str) -> bool:
    """True for ``s3://`` and ``s3a://`` locations."""
    return location.startswith(SCHEMES)


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key or prefix) of ``s3://bucket/prefix``."""
    scheme, sep, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    if not sep or scheme not in ("s3", "s3a") or not bucket:
        raise ContractError(f"{uri!r}: an object-store location must be s3://BUCKET/PREFIX (example: {EXAMPLE})")
    return bucket, key


def filesystem() -> S3FileSystem:
    """The object store as a pyarrow filesystem, from this process's settings (one per process)."""
    from modelops.config import settings
    from modelops.credentials import s3_credentials

    cfg = settings()
    access, secret = s3_credentials(cfg)
    return _filesystem(cfg.s3_endpoint, cfg.s3_region, access, secret)


@functools.lru_cache(maxsize=4)
def _filesystem(endpoint: str, region: str, access: str | None, secret: str | None) -> S3FileSystem:
    from pyarrow import fs

    url = urlparse(endpoint)
    keys: dict[str, Any] = {"access_key": access, "secret_key": secret} if access and secret else {}
    return fs.S3FileSystem(
        endpoint_override=url.netloc or endpoint, scheme=url.scheme or "http", region=region,
        connect_timeout=5, request_timeout=60,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=5), **keys,
    )


@dataclass(frozen=True)
class ParquetObjects:
    """The Parquet objects found under some object-store locations, and the schema to read them with."""

    locations: tuple[str, ...]
    paths: tuple[str, ...]
    """``bucket/key`` of every object (pyarrow's form), sorted."""
    sizes: tuple[int, ...]
    schema: pa.Schema
    """The first object's schema made Spark-compatible (or the given one when nothing was found)."""

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def uris(self) -> list[str]:
        return [f"s3://{p}" for p in self.paths]


def list_parquet(locations: Sequence[str], what: str, *, empty_schema: pa.Schema | None = None) -> ParquetObjects:
    """Every ``*.parquet`` object under ``locations`` (prefixes, read recursively, or single objects).

    Objects and folders whose name starts with ``.`` or ``_`` are skipped (staging, markers).

    Raises:
        ContractError: a location is not ``s3://``, or nothing was found and no ``empty_schema``.
        ObjectStoreError: the store could not be listed or a schema not read.
    """
    from pyarrow import fs as pafs

    store = filesystem()
    found: dict[str, int] = {}
    for location in locations:
        bucket, key = split_uri(location)
        base = f"{bucket}/{key}".rstrip("/")
        try:
            if key.endswith(".parquet"):
                infos = [store.get_file_info(base)]
            else:
                infos = store.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise ObjectStoreError(f"{what}: cannot list {location}: {exc}") from exc
        for info in infos:
            relative = info.path[len(base):].strip("/").split("/") if info.path != base else [info.base_name]
            if (info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
                    and not any(part.startswith((".", "_")) for part in relative)):
                found[info.path] = int(info.size or 0)
    paths = tuple(sorted(found))
    if paths:
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(paths[0], filesystem=store)
        except (OSError, pa.ArrowException) as exc:
            raise ObjectStoreError(f"{what}: cannot read the Parquet schema of s3://{paths[0]}: {exc}") from exc
    elif empty_schema is not None:
        schema = empty_schema
    else:
        raise ContractError(f"{what}: no Parquet objects under {', '.join(locations)} "
                            f"(expected *.parquet objects under a prefix such as {EXAMPLE})")
    return ParquetObjects(tuple(locations), paths, tuple(found[p] for p in paths), spark_compatible(schema))


def spark_compatible(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the Arrow types Spark's Arrow exchange takes: microsecond timestamps, plain strings."""
    def convert(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz=t.tz)
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        if pa.types.is_dictionary(t):
            return convert(t.value_type)
        return t

    return pa.schema([pa.field(f.name, convert(f.type), f.nullable) for f in schema])


def count_rows(objects: ParquetObjects) -> int:
    """Rows of every object, from the Parquet footers (one small read per object, on the driver)."""
    import pyarrow.parquet as pq

    store = filesystem()
    try:
        return sum(pq.read_metadata(path, filesystem=store).num_rows for path in objects.paths)
    except (OSError, pa.ArrowException) as exc:
        raise ObjectStoreError(f"cannot read Parquet footers under {', '.join(objects.locations)}: {exc}") from exc


def read_frame(spark: SparkSession, objects: ParquetObjects, columns: Sequence[str] | None = None, *,
               batch_rows: int = 65_536) -> DataFrame:
    """A DataFrame of ``objects`` (only ``columns``), read by the executors from the store."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = objects.schema if columns is None else pa.schema([objects.schema.field(c) for c in columns])
    spark_schema = from_arrow_schema(schema)
    if not objects.paths:
        return spark.createDataFrame([], spark_schema)
    cores = spark.sparkContext.defaultParallelism
    slices = min(len(objects.paths), max(cores, math.ceil(sum(objects.sizes) / SPLIT_BYTES)))
    # Largest first, dealt round-robin: the slices get similar byte counts.
    ordered = sorted(zip(objects.sizes, objects.paths, strict=True), reverse=True)
    dealt = [p for i in range(slices) for p in (path for j, (_, path) in enumerate(ordered) if j % slices == i)]
    paths = spark.createDataFrame(spark.sparkContext.parallelize([(p,) for p in dealt], slices), "path string")
    task = functools.partial(_read_task, schema, batch_rows)
    return paths.mapInArrow(task, spark_schema)


def _read_task(schema: pa.Schema, batch_rows: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: every object named in the batches, read with the executor's own store identity."""
    import pyarrow.dataset as ds

    store = filesystem()
    for batch in batches:
        for path in batch.column(0).to_pylist():
            try:
                dataset = ds.dataset(path, filesystem=store, format="parquet", schema=schema)
                for out in dataset.to_batches(columns=schema.names, batch_size=batch_rows):
                    if out.num_rows:
                        yield out if out.schema.equals(schema) else out.cast(schema)
            except OSError as exc:
                raise ObjectStoreError(f"cannot read s3://{path}: {exc}") from exc


def write_parquet(frame: DataFrame, uri: str, tag: str) -> list[str]:
    """Write ``frame`` from the executors as ``<uri>/part-<tag>-<partition>.parquet`` objects.

    One object per non-empty partition (a retried task rewrites the same key); an empty frame
    gets one empty object, so the schema stays readable. Returns the URIs written.
    """
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    bucket, prefix = split_uri(uri)
    base = f"{bucket}/{prefix.strip('/')}"
    task = functools.partial(_write_task, base, tag)
    try:
        paths = sorted(str(row["path"]) for row in frame.mapInArrow(task, "path string, rows long").collect())
    except Exception:
        # The job failed after some tasks wrote their part: no reader may see a part of a failed run.
        _delete_parts(base, tag)
        raise
    if not paths:
        path = f"{base}/part-{tag}-empty.parquet"
        schema = to_arrow_schema(frame.schema, timezone="UTC")
        try:
            with filesystem().open_output_stream(path) as sink:
                pq.write_table(schema.empty_table(), sink)
        except OSError as exc:
            raise ObjectStoreError(f"cannot write s3://{path}: {exc}") from exc
        paths = [path]
    return [f"s3://{p}" for p in paths]


def _write_task(base: str, tag: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    context = TaskContext.get()
    path = f"{base}/part-{tag}-{context.partitionId() if context else 0:05d}.parquet"
    rows = write_batches(filesystem(), path, batches)
    if rows:
        yield pa.RecordBatch.from_pydict({"path": [path], "rows": [rows]},
                                         schema=pa.schema([("path", pa.string()), ("rows", pa.int64())]))


def _delete_parts(base: str, tag: str) -> None:
    """Remove every ``part-<tag>-*`` object under ``base`` (best effort: the run is failing anyway)."""
    from pyarrow.fs import FileSelector, FileType

    store = filesystem()
    try:
        for info in store.get_file_info(FileSelector(base, allow_not_found=True)):
            if info.type is FileType.File and info.base_name.startswith(f"part-{tag}-"):
                store.delete_file(info.path)
    except OSError:
        pass


def write_batches(store: Any, path: str, batches: Iterable[pa.RecordBatch], *, atomic: bool = False) -> int:
    """Stream record batches into one Parquet object at ``path`` (``bucket/key``); returns the rows written.

    Nothing is written when no batch has rows. A failure never leaves a truncated object
    behind: closing an S3 stream completes the upload, so the object is removed again. With
    ``atomic`` the object is written under a temporary key and moved into place once
    complete, so an object that existed before stays whole until then.

    Raises:
        ObjectStoreError: the store refused a write (the message names the object).
    """
    import uuid

    import pyarrow.parquet as pq

    target = f"{path}.tmp-{uuid.uuid4().hex[:12]}" if atomic else path
    rows = 0
    sink: Any = None
    writer: Any = None
    complete = placed = False
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            if writer is None:
                sink = store.open_output_stream(target)
                writer = pq.ParquetWriter(sink, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            sink.close()
        complete = True
        if atomic and rows:
            store.move(target, path)
        placed = True
    except OSError as exc:
        raise ObjectStoreError(f"cannot write s3://{path}: {exc}") from exc
    finally:
        if sink is not None and not placed:
            if not complete:
                with contextlib.suppress(Exception):
                    sink.close()  # completes the upload of what was written, which must not stay:
            with contextlib.suppress(OSError):
                store.delete_file(target)
    return rows
