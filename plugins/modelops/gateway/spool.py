"""The local spool of the event logs: durable first, uploaded as Parquet after.

Each log kind (predictions, feedback, scored samples) has a directory of append-only
segment files. A record is a framed msgpack list (``<u32 length><u32 crc32><payload>``),
so a torn tail after a crash is detected and cut, never misread.

* **Group commit.** :class:`GroupCommitter` collects records from many requests and
  writes them with one ``write`` + ``fsync`` in a writer thread; a caller awaits its
  batch's fsync before acknowledging (feedback: 202, predictions and scored samples: 200),
  so concurrent requests share one fsync and an acknowledged record survives kill -9.
* **Rotation.** A segment is sealed (``.open`` renamed to ``.seg``) when it reaches a
  size or an age; the writer holds an exclusive ``flock`` on its open segment.
* **Upload.** :class:`modelops.gateway.upload.Uploader` converts a sealed segment to one Parquet file per
  ``dt=YYYY-MM-DD/hour=HH`` partition, uploads it under a name derived from the
  segment (a retry overwrites, never duplicates), re-reads it to verify, and only then
  deletes the segment.
* **Recovery.** An ``.open`` segment whose ``flock`` can be taken belongs to a dead
  process: it is sealed and uploaded (leftovers at restart).
* **Budget.** When the object store is down the spool grows; past the disk budget new
  appends raise :class:`SpoolFull` (the gateway answers 503) instead of losing data.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def current(self) -> Path | None:
        return self._path

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
        """Append ``frames`` and fsync them; rotate first when the segment is full or old."""
        if not frames:
            return
        self.rotate_if_due()
        if self._fd < 0:
            self._open()
        view = memoryview(frames)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fdatasync(self._fd)  # data and the size that reads it back (fsync would also flush mtime)
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
                    self.seal()
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
        if self._fd < 0 or self._path is None:
            return None
        path, fd, size = self._path, self._fd, self._size
        self._fd, self._path, self._size = -1, None, 0
        sealed = path.with_suffix(SEALED_SUFFIX) if size else None
        try:
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


# --------------------------------------------------------------------------- group commit


class GroupCommitter:
    """Batches appends from the event loop into one write + fsync per batch in a writer thread.

    Args:
        writer: the kind's segment writer (used only from the writer thread).
        budget_bytes: refuse appends while the spool root holds more than this.
        usage: returns the spool root's current bytes (refreshed by the uploader).
        flush_interval_s: how often records queued without waiting are written.
    """

    def __init__(self, writer: SegmentWriter, *, budget_bytes: int, usage: Callable[[], int],
                 flush_interval_s: float = 0.05) -> None:
        self.writer = writer
        self.flush_interval_s = flush_interval_s
        self.budget_bytes = budget_bytes
        self._usage = usage
        self._pending: list[bytes] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spool-" + writer.directory.name)
        self.on_sealed: Callable[[Path], None] = lambda _path: None
        self.unflushed_bytes = 0

    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="spool-" + self.writer.directory.name)

    def check_budget(self) -> None:
        """Raise :class:`SpoolFull` when the spool is over its disk budget."""
        if self._usage() + self.unflushed_bytes > self.budget_bytes:
            raise SpoolFull(f"event spool over its disk budget of {self.budget_bytes} bytes "
                            "(the object store is probably unreachable)")

    def append_nowait(self, record: Sequence[Any]) -> None:
        """Queue a record for the next timed flush (within ``flush_interval_s``; lost if the process dies first).

        Not waking the writer per record keeps thread hand-offs off the hot path: the
        prediction logs are written in batches every few tens of milliseconds.
        """
        frame = encode_frame(record)
        self._pending.append(frame)
        self.unflushed_bytes += len(frame)

    async def append(self, record: Sequence[Any]) -> None:
        """Queue a record and wait until its batch is on disk (written and fsynced)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self.append_nowait(record)
        if self._wakeup is not None:
            self._wakeup.set()
        await future

    def _write_batch(self, frames: bytes) -> Path | None:
        self.writer.write(frames)
        return self.writer.rotate_if_due()

    def _rotate(self) -> Path | None:
        return self.writer.rotate_if_due()

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.flush_interval_s):
                    await self._wakeup.wait()
            self._wakeup.clear()
            if self._closing:
                return  # close() writes what is pending; a batch already in the writer thread was finished
            frames, self._pending = self._pending, []
            waiters, self._waiters = self._waiters, []
            size = sum(len(f) for f in frames)
            try:
                if frames:
                    sealed = await loop.run_in_executor(self._executor, self._write_batch, b"".join(frames))
                elif self.writer.due():  # no job runs in the writer thread now: its state is safe to read
                    sealed = await loop.run_in_executor(self._executor, self._rotate)
                else:  # an idle tick: no thread hand-off (four logs x 20 ticks a second otherwise)
                    sealed = None
            except Exception as exc:  # disk full, I/O error: the callers must not get a 202
                log.exception("spool write failed")
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(SpoolFull(f"event spool write failed: {exc}"))
                self.unflushed_bytes -= size
                continue
            self.unflushed_bytes -= size
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            if sealed is not None:
                self.on_sealed(sealed)

    async def close(self) -> None:
        """Finish the batch in flight, write what is pending, seal the segment, stop the writer thread.

        Every waiter is answered: done when its record is on disk, :class:`SpoolFull` when the
        last write failed (never left hanging). Not cancelling the writer task mid-batch keeps
        the answer of the batch it was writing.
        """
        self._closing = True
        if self._task is not None:
            if self._wakeup is not None:
                self._wakeup.set()
            await self._task
        frames, self._pending = self._pending, []
        waiters, self._waiters = self._waiters, []
        loop = asyncio.get_running_loop()
        try:
            if frames:
                await loop.run_in_executor(self._executor, self.writer.write, b"".join(frames))
        except Exception as exc:
            log.exception("spool: the last write at close failed")
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(SpoolFull(f"event spool write failed: {exc}"))
        else:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        finally:
            self.unflushed_bytes = 0
            try:
                await loop.run_in_executor(self._executor, self.writer.seal)
            finally:
                self._executor.shutdown(wait=True)
