"""Group commit of the spool's records, and what an acknowledged record is (``sync``).

``"write"`` (the default): a record is written to its segment on the event loop (one ``write``, to
the kernel's page cache) before the caller acknowledges it (feedback: 202, predictions: 200), so an
acknowledged record survives kill -9 or any crash of the gateway; the writer thread ``fdatasync``s
the segment within ``flush_interval_s`` (50 ms), so a crash of the whole machine (power loss, kernel
panic) can lose the last 50 ms. ``"fsync"``: group commit, the caller awaits its batch's ``write`` +
``fdatasync`` in the writer thread (concurrent requests share one fsync), for deployments that must
not lose an acknowledged record to a power loss either; at concurrency 1 it adds the fsync and two
thread hand-offs (~0.5 ms here) to every answer.
Opening, rotating and sealing segments stay in the writer thread
(:class:`~modelops.gateway.logs.spool.SegmentWriter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from modelops.gateway.logs.spool import SegmentWriter, SpoolFull, encode_frame

log = logging.getLogger(__name__)

SYNC_MODES = ("write", "fsync")
"""What an acknowledged record is: written to its segment (survives a crash of the gateway), or fsynced."""


class GroupCommitter:
    """Batches appends from the event loop into one write + fsync per batch in a writer thread.

    Args:
        writer: the kind's segment writer (from the writer thread; with ``sync="write"`` the event
            loop also appends through its :meth:`~SegmentWriter.write_now`).
        budget_bytes: refuse appends while the spool root holds more than this.
        usage: returns the spool root's current bytes (refreshed by the uploader).
        flush_interval_s: how often records queued without waiting are written.
    """

    def __init__(self, writer: SegmentWriter, *, budget_bytes: int, usage: Callable[[], int],
                 flush_interval_s: float = 0.05, sync: str = "write") -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync: must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.writer = writer
        self.sync = sync
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
        self._queue(encode_frame(record))

    def _queue(self, frame: bytes) -> None:
        self._pending.append(frame)
        self.unflushed_bytes += len(frame)

    async def append(self, record: Sequence[Any]) -> None:
        """Make a record durable as ``sync`` says: written to its segment (``"write"``), or fsynced (``"fsync"``).

        ``"write"`` appends on the event loop when the segment is open and not due for rotation
        (otherwise, e.g. the first record after a rotation, it takes the ``"fsync"`` path); the
        writer thread fdatasyncs it within ``flush_interval_s``.
        """
        frame = encode_frame(record)
        if self.sync == "write" and not self._closing:
            try:
                if self.writer.write_now(frame):
                    return
            except OSError as exc:  # disk full, I/O error: the caller must not acknowledge
                log.exception("spool write failed")
                raise SpoolFull(f"event spool write failed: {exc}") from exc
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._queue(frame)
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
                elif self.writer.unsynced:  # records the loop wrote (sync="write"): fdatasync them now
                    await loop.run_in_executor(self._executor, self.writer.sync)
                    sealed = None
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
