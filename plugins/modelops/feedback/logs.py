"""Reading the gateway's logs into Spark for the feedback jobs: local Parquet or object-store locations.

Shared by the CTR join (:mod:`modelops.feedback.job`) and the outcome job
(:mod:`modelops.feedback.outcome_job`). A log's *optional* columns
(:data:`modelops.records.OPTIONAL_COLUMNS`: added after its first version) are read as nulls from
files written before them, whichever file a reader happens to look at first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from modelops import spark_store
from modelops.errors import ContractError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

Locations = str | Sequence[str]


def read_log(spark: SparkSession, location: Locations, what: str, required: tuple[str, ...], schema: pa.Schema,
             *, project: bool, optional: tuple[str, ...] = ()) -> DataFrame:
    """A log as a frame; only ``required`` + ``optional`` columns when ``project``.

    ``optional`` columns (of ``schema``) missing from the files read as nulls. An object-store
    location without objects reads as an empty log of ``schema``.

    Raises:
        ContractError: locations of both kinds, a required column missing, or unreadable Parquet.
    """
    from pyspark.errors import PySparkException

    locations = [location] if isinstance(location, str) else list(location)
    in_store = [spark_store.is_store_uri(loc) for loc in locations]
    if not locations or (any(in_store) and not all(in_store)):
        raise ContractError(f"{what}: give one or more local paths or one or more s3:// locations, not "
                            f"a mix (example: s3://modelops/logs/feedback/dt=2026-11-01/), got {locations}")
    shown = locations[0] if len(locations) == 1 else locations
    if all(in_store):
        objects = spark_store.list_parquet(locations, what, empty_schema=schema)
        check_columns(what, shown, required, objects.columns)
        columns = [*required, *optional] if project else [*objects.columns, *(
            c for c in optional if c not in objects.columns)]
        # An explicit schema: pyarrow fills a column an object lacks with nulls (older files).
        fields = [objects.schema.field(c) if c in objects.columns else schema.field(c) for c in columns]
        objects = dataclasses.replace(objects, schema=spark_store.spark_compatible(pa.schema(fields)))
        return spark_store.read_frame(spark, objects, columns)
    try:
        frame = spark.read.parquet(*locations)
        check_columns(what, shown, required, frame.columns)
        missing = [c for c in optional if c not in frame.columns]
        if missing:
            # Spark took the schema from a file older than these columns: read every file with them
            # declared (a file without a declared column reads it as nulls). No mergeSchema: that
            # reads every footer first, an extra job on each run.
            frame = spark.read.schema(_with_fields(frame.schema, schema, missing)).parquet(*locations)
    except PySparkException as exc:
        raise ContractError(f"{what}: cannot read Parquet at {shown!r}: {exc}") from exc
    return frame


def _with_fields(spark_schema: StructType, schema: pa.Schema, names: list[str]) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    added = [StructField(c, from_arrow_type(schema.field(c).type), True) for c in names]
    return StructType([*spark_schema.fields, *added])


def check_columns(what: str, shown: object, required: tuple[str, ...], columns: list[str]) -> None:
    """Refuse a log without a required column, naming what it has."""
    missing = [c for c in required if c not in columns]
    if missing:
        raise ContractError(
            f"{what} at {shown!r} lack column(s) {missing}; found {columns} "
            f"(see modelops.records for the schema)"
        )


def tune(spark: SparkSession, bloom_filter: dict[str, str]) -> None:
    """The session options both feedback jobs plan with (see :mod:`modelops.feedback.job`)."""
    # A shuffled hash join skips sorting either side; the one window function sorts only
    # the events of repeated (token, action) pairs.
    spark.conf.set("spark.sql.join.preferSortMergeJoin", "false")
    # Joins on (token, action) may reuse the partitioning by token instead of a new shuffle.
    spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
    for key, value in bloom_filter.items():
        spark.conf.set(key, value)
    # The cached ``matched`` frame is mostly random tokens: compressing it saved 18% of its
    # memory (201 vs 245 MB for 3M events) and cost 3-4 s of a 18 s run (bench/feedback.py).
    spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))
