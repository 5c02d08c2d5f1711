"""Where the feedback join writes: a local folder or an object-store prefix, replaced as a whole.

Both hold ``ctr_cvr.json``, ``ctr_cvr.parquet`` and ``quarantine/`` and refuse a location that
holds anything else (it is not the job's). A run writes everything first and only then removes
what an earlier run left:

* local folder: a staging folder next to it replaces it by two renames;
* object store (``s3://bucket/prefix``): the quarantine objects carry the run's tag, the JSON
  document is written last, then the keys of earlier runs are deleted. The executors write the
  quarantine (see :mod:`modelops.spark_store`), the driver the two small files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from modelops.errors import ModelopsError
from modelops.spark_store import is_store_uri, split_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

JSON_NAME = "ctr_cvr.json"
PARQUET_NAME = "ctr_cvr.parquet"
QUARANTINE_NAME = "quarantine"
OUTPUT_NAMES = frozenset({JSON_NAME, PARQUET_NAME, QUARANTINE_NAME})


class Writer(Protocol):
    """One run's writes into its output."""

    def frame(self, name: str, frame: DataFrame) -> None:
        """Write a (large) Spark frame as the Parquet folder ``name``."""

    def put(self, name: str, data: bytes) -> None:
        """Write a small file ``name``."""


@dataclass(frozen=True)
class Output:
    """The job's output location (``root``: a resolved local folder or an ``s3://`` prefix)."""

    root: str

    @property
    def in_store(self) -> bool:
        return is_store_uri(self.root)

    def location(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    @contextlib.contextmanager
    def writing(self) -> Iterator[Writer]:
        """Yield a writer; when the block ends without error the run's output replaces the old one."""
        if self.in_store:
            with _store_run(self.root) as writer:
                yield writer
        else:
            with _local_run(Path(self.root)) as local:
                yield local


def output_for(out: str) -> Output:
    """The output at ``out``, checked: it must be empty, absent or hold only this job's names."""
    if is_store_uri(out):
        bucket, prefix = split_uri(out)
        root = f"s3://{bucket}/{prefix.strip('/')}"
        keys = _store(bucket).list_keys(prefix.strip("/") + "/")
        foreign = sorted({k[len(prefix.strip('/')) + 1:].split("/", 1)[0] for k in keys} - OUTPUT_NAMES)
        _refuse(root, foreign)
        return Output(root)
    target = Path(out).resolve()
    if target.exists():
        if not target.is_dir():
            raise ModelopsError(f"output {target} exists and is not a folder")
        _refuse(str(target), sorted(p.name for p in target.iterdir() if p.name not in OUTPUT_NAMES))
    target.parent.mkdir(parents=True, exist_ok=True)
    return Output(str(target))


def _refuse(root: str, foreign: list[str]) -> None:
    if foreign:
        raise ModelopsError(
            f"refusing to replace output folder {root}: it holds files this job did not write "
            f"{foreign[:5]}; pass an empty or dedicated folder (example: --out runs/feedback/2026-11-01)"
        )


def _store(bucket: str):  # type: ignore[no-untyped-def]
    from modelops.objectstore import ObjectStore

    return ObjectStore.from_settings(bucket=bucket)


class _LocalWriter:
    def __init__(self, staging: Path) -> None:
        self.staging = staging

    def frame(self, name: str, frame: DataFrame) -> None:
        frame.write.mode("overwrite").parquet(str(self.staging / name))

    def put(self, name: str, data: bytes) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        (self.staging / name).write_bytes(data)


@contextlib.contextmanager
def _local_run(target: Path) -> Iterator[_LocalWriter]:
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:12]}"
    try:
        yield _LocalWriter(staging)
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _StoreWriter:
    def __init__(self, root: str, tag: str) -> None:
        self.root, self.tag = root, tag
        self.bucket, self.prefix = split_uri(root)
        self.written: list[str] = []

    def frame(self, name: str, frame: DataFrame) -> None:
        from modelops.spark_store import write_parquet

        uris = write_parquet(frame, f"{self.root}/{name}", self.tag)
        self.written += [split_uri(u)[1] for u in uris]

    def put(self, name: str, data: bytes) -> None:
        key = f"{self.prefix}/{name}"
        content_type = "application/json" if name.endswith(".json") else "application/octet-stream"
        _store(self.bucket).put_bytes(key, data, content_type=content_type)
        self.written.append(key)


@contextlib.contextmanager
def _store_run(root: str) -> Iterator[_StoreWriter]:
    writer = _StoreWriter(root, uuid.uuid4().hex[:12])
    store = _store(writer.bucket)
    try:
        yield writer
    except BaseException:
        for key in (k for k in writer.written if f"/part-{writer.tag}-" in k):  # this run's quarantine only
            with contextlib.suppress(ModelopsError):
                store.delete(key)
        raise
    keep = set(writer.written)
    for key in list(store.list_keys(writer.prefix + "/")):
        if key not in keep:
            store.delete(key)
