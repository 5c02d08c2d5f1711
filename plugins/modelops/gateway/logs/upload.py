"""Uploading sealed spool segments: one verified Parquet file per partition hour, then delete.

:class:`Uploader` converts a sealed segment to one Parquet file per ``dt=YYYY-MM-DD/hour=HH``
partition, uploads it under a name derived from the segment (a retry overwrites, never
duplicates), re-reads it to verify, and only then deletes the segment. A segment with
unreadable bytes or records is copied aside (quarantine) and named in the log, never dropped
silently; the segments behind it still upload.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from modelops.errors import ObjectStoreError
from modelops.gateway.logs.spool import SEALED_SUFFIX, fsync_dir, read_frames, recover_orphans

log = logging.getLogger(__name__)


class BlobStore(Protocol):
    """The two object-store operations the uploader needs (``modelops.objectstore.ObjectStore``)."""

    def put_bytes(self, key: str, data: bytes, *, content_type: str = ...) -> str: ...

    def get_bytes(self, key: str) -> bytes: ...



SegmentConverter = Callable[[list[list[Any]]], dict[datetime, bytes]]
"""Records of one segment -> Parquet bytes per partition hour (a UTC datetime truncated to the hour)."""


@dataclass
class UploadStats:
    uploaded_segments: int = 0
    uploaded_records: int = 0
    failures: int = 0
    quarantined: int = 0
    last_error: str = ""


@dataclass
class Uploader:
    """Uploads sealed segments of one log kind, oldest first; deletes each only after verifying it.

    Args:
        directory: the kind's spool directory.
        prefix: the log's key prefix (``LOG_PREFIXES[kind]``).
        store: the object store.
        convert: records -> Parquet bytes per partition hour.
    """

    directory: Path
    prefix: str
    store: BlobStore
    convert: SegmentConverter
    stats: UploadStats = field(default_factory=UploadStats)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _kept: set[str] = field(default_factory=set)  # segments already copied aside (retries copy once)

    def pending(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{SEALED_SUFFIX}"))

    def key_for(self, segment: Path, hour: datetime) -> str:
        return f"{self.prefix.rstrip('/')}/dt={hour:%Y-%m-%d}/hour={hour:%H}/{segment.stem}.parquet"

    def run_once(self) -> int:
        """Recover orphans, then upload every sealed segment; returns how many were uploaded.

        Raises:
            ObjectStoreError: the store failed (the segment stays for the next try).
        """
        with self._lock:
            recover_orphans(self.directory)
            done = 0
            for segment in self.pending():
                if self._upload(segment):
                    done += 1
            return done

    def _upload(self, segment: Path) -> bool:
        try:
            fd = os.open(segment, os.O_RDONLY)
        except FileNotFoundError:
            return False  # another worker uploaded it
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # another worker is uploading it
            if not segment.exists():
                return False
            data = Path(segment).read_bytes()
            records, used = read_frames(data)
            if used != len(data):
                self._quarantine(segment, data, f"{len(data) - used} unreadable trailing bytes")
            try:
                parts = self.convert(records)
            except Exception as exc:  # any converter failure is about the data, not the store
                # Deterministic (a record of an older format, a changed feature list): retrying would block
                # every later segment behind this one. Set the whole segment aside, named in the log.
                self._quarantine(segment, data, f"records the converter refused ({exc!r})")
                segment.unlink()
                fsync_dir(self.directory)
                return False
            for hour, parquet in sorted(parts.items()):
                key = self.key_for(segment, hour)
                self.store.put_bytes(key, parquet, content_type="application/vnd.apache.parquet")
                stored = self.store.get_bytes(key)
                if stored != parquet:
                    raise ObjectStoreError(f"verify of {key} failed: stored {len(stored)} bytes, "
                                           f"uploaded {len(parquet)}")
            segment.unlink()
            fsync_dir(self.directory)
            self.stats.uploaded_segments += 1
            self.stats.uploaded_records += len(records)
            return True
        finally:
            os.close(fd)

    def _quarantine(self, segment: Path, data: bytes, why: str) -> None:
        """Keep a copy of a segment with bytes or records that cannot be uploaded, for people to inspect.

        The copy goes next to the spool; when that disk is full (the usual reason for a torn
        tail) it goes to the object store under ``<prefix>/_quarantine/`` instead, so the
        readable records are still uploaded and the spool can drain.

        Raises:
            ObjectStoreError: neither copy could be kept (the segment stays for the next try).
        """
        if segment.name in self._kept:  # a retry (the store failed after the copy): the copy is there
            return
        target = self.directory.parent / "quarantine" / segment.name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                target.unlink()  # a partial local copy is worse than none
            key = f"{self.prefix.rstrip('/')}/_quarantine/{segment.name}"
            self.store.put_bytes(key, data, content_type="application/octet-stream")
            self._kept_once(segment)
            log.warning("spool segment %s has %s; no local copy (%s), kept at %s", segment, why, exc, key)
            return
        self._kept_once(segment)
        log.warning("spool segment %s has %s; copy kept at %s", segment, why, target)

    def _kept_once(self, segment: Path) -> None:
        self._kept.add(segment.name)
        self.stats.quarantined += 1


def iter_hours(timestamps_us: Sequence[int]) -> Iterator[tuple[datetime, list[int]]]:
    """Group record indexes by the UTC hour of their microsecond timestamps."""
    groups: dict[int, list[int]] = {}
    for index, ts in enumerate(timestamps_us):
        groups.setdefault(int(ts) // 3_600_000_000, []).append(index)
    for hour, indexes in sorted(groups.items()):
        yield datetime.fromtimestamp(hour * 3600, tz=UTC), indexes
