"""Where a job's inputs are: the hourly partitions of an event log in the object store, as ``s3://`` URIs.

The Spark jobs read the object store themselves (the executors, see :mod:`modelops.spark_store`),
so the tasks only pick the partitions and hand their locations over; nothing is copied to the
task's disk, and the tasks of one run may run on different machines.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from modelops.objectstore import ObjectStore
from modelops.records import partition_path


def hours(start: datetime, end: datetime) -> list[datetime]:
    """Every hour that starts in [start, end) (UTC, floored)."""
    first = start.replace(minute=0, second=0, microsecond=0)
    out = []
    current = first
    while current < end:
        out.append(current)
        current += timedelta(hours=1)
    return out


def partition_uris(store: ObjectStore, prefix: str, start: datetime, end: datetime) -> tuple[list[str], int]:
    """(``s3://`` URIs of the ``<prefix>/dt=…/hour=…`` partitions of [start, end) that hold Parquet, files)."""
    uris, files = [], 0
    for hour in hours(start, end):
        part = partition_path(prefix, hour)
        found = sum(1 for key in store.list_keys(part + "/") if key.endswith(".parquet"))
        if found:
            uris.append(store.uri(part))
            files += found
    return uris, files
