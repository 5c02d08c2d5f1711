"""Where the feedback join writes: a local folder or an object-store prefix, replaced as a whole.

A run's output is ``ctr_cvr.json``, ``ctr_cvr.parquet`` and ``quarantine/``; a location that holds
anything else is refused (it is not the job's). A run writes everything first and only then makes
it current, so a reader sees the previous run's pair or the new one, never a mix:

* local folder: a staging folder next to it replaces it by two renames;
* object store (``s3://bucket/prefix``): the run writes into a generation of its own,
  ``prefix/g-<tag>/``, then switches the small pointer document ``prefix/_current.json`` to it with
  a conditional put (If-Match its ETag: a concurrent run that switched first makes this one fail
  and drop its generation). Readers follow the pointer (:func:`current_prefix`,
  :func:`current_location`). The previous generation stays (a reader that followed the old pointer
  a moment ago still finds its files); older ones and a pre-pointer flat layout are deleted. The
  executors write the quarantine (see :mod:`modelops.spark_store`), the driver the two small files
  and the pointer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
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
POINTER_NAME = "_current.json"
"""The object-store output's pointer: ``{"schema_version": 1, "generation": "g-<tag>", ...}``."""
GENERATION_PREFIX = "g-"
POINTER_SCHEMA_VERSION = 1


class Writer(Protocol):
    """One run's writes into its output."""

    def frame(self, name: str, frame: DataFrame) -> None:
        """Write a (large) Spark frame as the Parquet folder ``name``."""

    def put(self, name: str, data: bytes) -> None:
        """Write a small file ``name``."""

    def location(self, name: str) -> str:
        """Where ``name`` is once the run is current (a local path or an ``s3://`` URI)."""


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
        names = {k[len(prefix.strip('/')) + 1:].split("/", 1)[0] for k in keys}
        foreign = sorted(n for n in names - OUTPUT_NAMES - {POINTER_NAME} if not n.startswith(GENERATION_PREFIX))
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


def current_prefix(store, prefix: str) -> str:  # type: ignore[no-untyped-def]
    """The key prefix of the current run's files under the output ``prefix`` (an :class:`ObjectStore`'s keys).

    Followed through the pointer; an output from before the pointer (its files right under ``prefix``)
    or none at all: ``prefix`` itself.
    """
    prefix = prefix.strip("/")
    body, _ = store.get_with_etag(f"{prefix}/{POINTER_NAME}")
    generation = _generation(body, f"{prefix}/{POINTER_NAME}")
    return f"{prefix}/{generation}" if generation else prefix


def current_location(out: str) -> str:
    """Where the current run's files are: a local folder as it is, an ``s3://`` output through its pointer."""
    if not is_store_uri(out):
        return out
    bucket, prefix = split_uri(out)
    return f"s3://{bucket}/{current_prefix(_store(bucket), prefix)}"


def _generation(pointer: bytes | None, where: str) -> str | None:
    if pointer is None:
        return None
    try:
        generation = json.loads(pointer)["generation"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelopsError(f"{where}: not a pointer document ({exc})") from exc
    if not (isinstance(generation, str) and generation.startswith(GENERATION_PREFIX) and "/" not in generation):
        raise ModelopsError(f"{where}: generation {generation!r} is not a {GENERATION_PREFIX}<tag> name")
    return generation


class _LocalWriter:
    def __init__(self, staging: Path, target: Path) -> None:
        self.staging, self.target = staging, target

    def frame(self, name: str, frame: DataFrame) -> None:
        frame.write.mode("overwrite").parquet(str(self.staging / name))

    def put(self, name: str, data: bytes) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        (self.staging / name).write_bytes(data)

    def location(self, name: str) -> str:
        return str(self.target / name)


@contextlib.contextmanager
def _local_run(target: Path) -> Iterator[_LocalWriter]:
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:12]}"
    try:
        yield _LocalWriter(staging, target)
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _StoreWriter:
    def __init__(self, root: str, tag: str) -> None:
        self.root, self.tag = root.rstrip("/"), tag
        self.bucket, prefix = split_uri(self.root)
        self.prefix = prefix.strip("/")
        self.generation = f"{GENERATION_PREFIX}{tag}"
        self.written: list[str] = []

    def location(self, name: str) -> str:
        return f"{self.root}/{self.generation}/{name}"

    def frame(self, name: str, frame: DataFrame) -> None:
        from modelops.spark_store import write_parquet

        uris = write_parquet(frame, self.location(name), self.tag)
        self.written += [split_uri(u)[1] for u in uris]

    def put(self, name: str, data: bytes) -> None:
        key = f"{self.prefix}/{self.generation}/{name}"
        content_type = "application/json" if name.endswith(".json") else "application/octet-stream"
        _store(self.bucket).put_bytes(key, data, content_type=content_type)
        self.written.append(key)


@contextlib.contextmanager
def _store_run(root: str) -> Iterator[_StoreWriter]:
    writer = _StoreWriter(root, uuid.uuid4().hex[:12])
    store = _store(writer.bucket)
    try:
        yield writer
        previous = _switch(store, writer)
    except BaseException:
        for key in list(store.list_keys(f"{writer.prefix}/{writer.generation}/")):  # this run's files only
            with contextlib.suppress(ModelopsError):
                store.delete(key)
        raise
    keep = (f"{writer.prefix}/{POINTER_NAME}", f"{writer.prefix}/{writer.generation}/",
            *((f"{writer.prefix}/{previous}/",) if previous else ()))
    for key in list(store.list_keys(writer.prefix + "/")):
        if not key.startswith(keep):
            store.delete(key)


def _switch(store, writer: _StoreWriter) -> str | None:  # type: ignore[no-untyped-def]
    """Point the output at the run's generation (a conditional put); returns the generation it replaced."""
    key = f"{writer.prefix}/{POINTER_NAME}"
    body, etag = store.get_with_etag(key)
    previous = _generation(body, key)
    pointer = {"schema_version": POINTER_SCHEMA_VERSION, "generation": writer.generation, "previous": previous,
               "switched_at": datetime.now(UTC).isoformat()}
    if not store.put_if(key, (json.dumps(pointer) + "\n").encode(), etag):
        raise ModelopsError(f"{writer.root}: another run made its output current while this one wrote "
                            f"{writer.generation}; this run's output is dropped (run the job again)")
    return previous
