"""The access log's handler: JSON lines buffered and written together (nginx's ``access_log buffer= flush=``).

A ``StreamHandler`` writes and flushes every record: one ``write`` system call per request
on the hot path (to a pipe in a container, waking its reader). :class:`BufferedLineHandler`
keeps the formatted lines and writes them in one call ``flush_s`` after the first one
buffered (a timer on the running event loop), when ``max_bytes`` are buffered, and at close.
A kill -9 loses at most the last ``flush_s`` of access lines, never a prediction (the event
logs are separate and durable).

Several uvicorn workers share one stdout pipe (compose runs two per container), and POSIX
makes a pipe write atomic only up to ``PIPE_BUF`` (4096 bytes on Linux): a larger write of
one worker can be interleaved with another's in the middle of a line. A flush therefore
writes chunks of at most :data:`PIPE_BUF` bytes, each cut at a line end (a single longer
line goes alone, as it would unbuffered), each flushed on its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TextIO

PIPE_BUF = 4096
"""Bytes a pipe write is atomic up to (POSIX guarantees >= 512; Linux 4096)."""


def line_chunks(data: bytes, limit: int = PIPE_BUF) -> Iterator[bytes]:
    """Cuts newline-terminated ``data`` into chunks of at most ``limit`` bytes at line ends.

    A line longer than ``limit`` (with its newline) is a chunk of its own.
    """
    start, size = 0, len(data)
    while start < size:
        if size - start <= limit:
            yield data[start:]
            return
        cut = data.rfind(b"\n", start, start + limit)
        if cut < 0:  # the next line alone exceeds the limit
            cut = data.find(b"\n", start + limit)
            if cut < 0:
                cut = size - 1
        yield data[start : cut + 1]
        start = cut + 1


def direct_sink(logger: logging.Logger) -> Callable[[str], None] | None:
    """``add_line`` of ``logger``'s :class:`BufferedLineHandler` when a line logged at INFO goes there and nowhere else.

    Then a caller can hand it the formatted line itself and skip the ``LogRecord`` (time,
    thread, process id, caller lookup: ~10 us per request on the gateway's hot path);
    otherwise (another handler, a level above INFO, propagation) None: log as usual.
    """
    handlers = logger.handlers
    if len(handlers) != 1 or logger.propagate or not logger.isEnabledFor(logging.INFO) or logger.filters:
        return None
    handler = handlers[0]
    if type(handler) is not BufferedLineHandler or handler.filters or handler.level > logging.INFO:
        return None
    formatter = handler.formatter
    if formatter is not None and formatter._fmt not in (None, "%(message)s"):
        return None
    return handler.add_line


class BufferedLineHandler(logging.Handler):
    """Buffers formatted records and writes them to ``stream`` in batches.

    Args:
        stream: where the lines go (the gateway's stdout).
        flush_s: the longest a line waits when an event loop runs in the emitting thread.
        max_bytes: write at once when this many characters are buffered.
    """

    def __init__(self, stream: TextIO, *, flush_s: float = 0.2, max_bytes: int = 64 * 1024) -> None:
        super().__init__()
        self.stream = stream
        self.flush_s = flush_s
        self.max_bytes = max_bytes
        self._lines: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add_line(line)

    def add_line(self, line: str) -> None:
        """Buffer one formatted line (what :meth:`emit` does after formatting; the gateway calls it directly)."""
        with self._guard:
            self._lines.append(line)
            self._size += len(line) + 1
            full = self._size >= self.max_bytes
        if full:
            self.flush()
            return
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop in this thread: nothing would flush later
                self.flush()
                return
            self._timer = loop.call_later(self.flush_s, self.flush)

    def flush(self) -> None:
        with self._guard:
            lines, self._lines, self._size = self._lines, [], 0
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if not lines:
            return
        text = "\n".join(lines) + "\n"
        binary = getattr(self.stream, "buffer", None)
        try:
            self.stream.flush()  # whatever else was written to the stream goes first, alone
            if len(text) <= PIPE_BUF and text.isascii():  # the usual flush: one write
                self.stream.write(text)
                self.stream.flush()
                return
            for chunk in line_chunks(text.encode("utf-8")):
                if binary is not None:
                    binary.write(chunk)
                    binary.flush()
                else:
                    self.stream.write(chunk.decode("utf-8"))
                    self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stdout must not fail requests
            pass

    def close(self) -> None:
        self.flush()
        super().close()
