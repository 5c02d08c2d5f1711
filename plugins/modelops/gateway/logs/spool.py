"""The local spool of the event logs: durable first, uploaded as Parquet after.

Each log kind (predictions, feedback, scored samples) has a directory of append-only
segment files. A record is a framed msgpack list (``<u32 length><u32 crc32><payload>``),
so a torn tail after a crash is detected and cut, never misread.

* **Durability before the answer.** :class:`modelops.gateway.logs.groupcommit.GroupCommitter`
  appends a request's record before it is acknowledged: written to the segment on the event
  loop (:meth:`SegmentWriter.write_now`, fdatasynced within 50 ms) or group-committed with an
  fsync (:data:`~modelops.gateway.logs.groupcommit.SYNC_MODES`).
* **Rotation.** A segment is sealed (``.open`` renamed to ``.seg``) when it reaches a
  size or an age; the writer holds an exclusive ``flock`` on its open segment.
* **Upload.** :class:`modelops.gateway.logs.upload.Uploader` converts a sealed segment to one Parquet file per
  ``dt=YYYY-MM-DD/hour=HH`` partition, uploads it under a name derived from the
  segment (a retry overwrites, never duplicates), re-reads it to verify, and only then
  deletes the segment.
* **Recovery.** An ``.open`` segment whose ``flock`` can be taken belongs to a dead
  process: it is sealed and uploaded (leftovers at restart).
* **Budget.** When the object store is down the spool grows; past the disk budget new
  appends raise :class:`SpoolFull` (the gateway answers 503) instead of losing data.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from modelops.errors import ModelopsError

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
OPEN_SUFFIX = ".open"
SEALED_SUFFIX = ".seg"
_FRESH_SUFFIX = ".new"
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder().decode


class SpoolFull(ModelopsError):
    """The spool reached its disk budget (the object store is probably down): refuse new writes."""


# --------------------------------------------------------------------------- frames


def encode_frame(record: Sequence[Any]) -> bytes:
    """One framed record."""
    payload = _ENCODE(record)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def read_frames(data: bytes) -> tuple[list[list[Any]], int]:
    """Decode the records of a segment; returns them and the number of bytes they span.

    Reading stops at the first incomplete or corrupt frame (a torn tail after a crash).
    """
    records: list[list[Any]] = []
    offset, size = 0, len(data)
    while offset + _HEADER.size <= size:
        length, crc = _HEADER.unpack_from(data, offset)
        end = offset + _HEADER.size + length
        if end > size:
            break
        payload = data[offset + _HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            records.append(_DECODE(payload))
        except msgspec.DecodeError:
            break
        offset = end
    return records, offset


# --------------------------------------------------------------------------- segments


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class SegmentWriter:
    """Appends framed batches to the current ``.open`` segment of one log kind; not thread-safe.

    Args:
        directory: the kind's spool directory.
        max_bytes: seal the segment once it holds this many bytes.
        max_age_s: seal the segment once it is this old (and not empty).
        clock: wall clock, replaceable in tests.
    """

    directory: Path
    max_bytes: int = 8 * 1024 * 1024
    max_age_s: float = 30.0
    clock: Callable[[], float] = time.time
    _fd: int = -1
    _path: Path | None = None
    _size: int = 0
    _opened_at: float = 0.0
    _seq: int = 0
    _host: str = field(default_factory=lambda: socket.gethostname().split(".")[0][:32] or "host")
    _unsynced: bool = False  # written by write_now and not yet fdatasynced
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the fd and size: the loop vs the writer thread

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def write_now(self, frames: bytes) -> bool:
        """Append ``frames`` from the event loop without fsync; False when it must go through :meth:`write`.

        Only a plain append to an open segment that is not due for rotation happens here (one
        ``write`` to the page cache, a few microseconds); opening, rotating and syncing stay in the
        writer thread. A writer-thread operation holding the lock makes this return False rather
        than wait. On a write error the segment is cut back to its last whole frame, as in
        :meth:`write`, and the error raised.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._fd < 0 or self.due():
                return False
            self._append(frames)
            self._unsynced = True
            return True
        finally:
            self._lock.release()

    def sync(self) -> None:
        """``fdatasync`` what :meth:`write_now` appended (writer thread).

        Under the lock, so the fd cannot be closed meanwhile (:meth:`write_now` seals the segment
        when a failed write cannot be cut back); appends arriving during the sync take the
        writer thread's path instead of waiting.
        """
        with self._lock:
            if self._fd >= 0 and self._unsynced:
                os.fdatasync(self._fd)
                self._unsynced = False

    @property
    def current(self) -> Path | None:
        return self._path

    @property
    def unsynced(self) -> bool:
        """Whether :meth:`write_now` appended records that are not fdatasynced yet."""
        return self._unsynced

    def _open(self) -> None:
        self._seq += 1
        name = f"{time.time_ns():020d}-{self._host}-{os.getpid()}-{self._seq:06d}{OPEN_SUFFIX}"
        path = self.directory / name
        # Lock under a name recovery ignores, then rename: recovery never sees an unlocked live segment.
        fresh = path.with_suffix(_FRESH_SUFFIX)
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(fresh, path)
        fsync_dir(self.directory)
        self._fd, self._path, self._size, self._opened_at = fd, path, 0, self.clock()

    def write(self, frames: bytes) -> None:
        """Append ``frames`` and fsync them (with anything :meth:`write_now` appended); rotate first when due."""
        if not frames:
            return
        self.rotate_if_due()
        with self._lock:
            if self._fd < 0:
                self._open()
            self._append(frames)
            os.fdatasync(self._fd)  # data and the size that reads it back (fsync would also flush mtime)
            self._unsynced = False

    def _append(self, frames: bytes) -> None:
        view = memoryview(frames)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            # A full disk can take part of the batch (up to a page boundary) before ENOSPC: cut the
            # segment back to its last acknowledged frame, so the refused batch leaves no torn bytes
            # that later batches would follow (the reader stops at the first bad frame). Shrinking
            # never needs space.
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                # Cannot cut: seal the segment as it is (the reader stops at the torn bytes, after every
                # acknowledged frame) so that no later batch lands behind them.
                with contextlib.suppress(OSError):
                    self._seal_locked()
            raise
        self._size += len(frames)

    def due(self) -> bool:
        """Whether the current segment reached its size or age (False when none is open or it is empty)."""
        return self._fd >= 0 and self._size > 0 and (
            self._size >= self.max_bytes or self.clock() - self._opened_at >= self.max_age_s)

    def rotate_if_due(self) -> Path | None:
        """Seal the current segment when it reached its size or age; returns the sealed path."""
        return self.seal() if self.due() else None

    def seal(self) -> Path | None:
        """Close and seal the current segment (no-op when none is open); returns the sealed path."""
        with self._lock:
            return self._seal_locked()

    def _seal_locked(self) -> Path | None:
        if self._fd < 0 or self._path is None:
            return None
        path, fd, size, unsynced = self._path, self._fd, self._size, self._unsynced
        self._fd, self._path, self._size, self._unsynced = -1, None, 0, False
        sealed = path.with_suffix(SEALED_SUFFIX) if size else None
        try:
            if unsynced and sealed is not None:
                os.fdatasync(fd)  # a sealed segment is whole on disk before it is uploaded and deleted
            if sealed is not None:
                os.rename(path, sealed)
            else:
                os.unlink(path)
            fsync_dir(self.directory)
        finally:
            os.close(fd)  # releases the flock only after the rename is durable (or failed: never leak it)
        return sealed


def recover_orphans(directory: Path) -> list[Path]:
    """Seal ``.open`` segments left by dead processes (their flock is free); returns them."""
    sealed: list[Path] = []
    for path in sorted(directory.glob(f"*{_FRESH_SUFFIX}")):  # a crash between create and rename
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime < 60:
                continue  # a live writer is between create and flock
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                path.unlink()
            finally:
                os.close(fd)
    for path in sorted(directory.glob(f"*{OPEN_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live writer holds it
        try:
            if not path.exists():
                continue
            if path.stat().st_size == 0:
                path.unlink()
            else:
                target = path.with_suffix(SEALED_SUFFIX)
                os.rename(path, target)
                sealed.append(target)
            fsync_dir(directory)
        finally:
            os.close(fd)
    return sealed


def spool_usage(root: Path) -> tuple[int, int]:
    """(bytes, segments) of every segment under ``root`` (all kinds, all processes)."""
    total = count = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith((OPEN_SUFFIX, SEALED_SUFFIX)):
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(os.path.join(dirpath, name)).st_size
                    count += 1
    return total, count
