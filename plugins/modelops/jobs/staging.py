"""Copy the hourly partitions of an event log from the object store to a local folder.

The embedded Spark has no S3 connector (hadoop-aws comes from Maven, which this platform
does not reach), so jobs read a local copy of exactly the partitions they need. On a
cluster with s3a configured, jobs can read ``s3a://`` paths directly instead.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

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


def stage_partitions(store: ObjectStore, prefix: str, start: datetime, end: datetime, dst: Path) -> int:
    """Mirror ``<prefix>/dt=…/hour=…/`` for the hours of [start, end) into ``dst`` (replaced). Returns files."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    copied = 0
    for hour in hours(start, end):
        part = partition_path(prefix, hour)
        for key in store.list_keys(part + "/"):
            if not key.endswith(".parquet"):
                continue
            target = dst / key[len(prefix.rstrip("/")) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(store.get_bytes(key))
            copied += 1
    return copied


def upload_folder(store: ObjectStore, folder: Path, prefix: str) -> list[str]:
    """Upload every file under ``folder`` to ``prefix`` (same relative paths); returns the keys."""
    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        key = f"{prefix.rstrip('/')}/{path.relative_to(folder).as_posix()}"
        store.put_bytes(key, path.read_bytes())
        keys.append(key)
    return keys
