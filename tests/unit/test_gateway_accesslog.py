"""Unit tests of the access log's buffered handler (modelops.gateway.accesslog)."""

from __future__ import annotations

import asyncio
import io
import logging

from modelops.gateway.accesslog import BufferedLineHandler


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _logger(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_lines_of_one_interval_leave_in_one_write_after_flush_s() -> None:
    stream = CountingStream()
    handler = BufferedLineHandler(stream, flush_s=0.05)
    logger = _logger(handler, "test.accesslog.interval")

    async def run() -> tuple[str, str]:
        for k in range(100):
            logger.info('{"n": %d}', k)
        before = stream.getvalue()
        await asyncio.sleep(0.2)
        return before, stream.getvalue()

    before, after = asyncio.run(run())
    assert before == ""  # nothing written while the lines wait for the timer
    assert after.splitlines() == [f'{{"n": {k}}}' for k in range(100)]
    assert stream.writes == 1


def test_a_full_buffer_is_written_at_once() -> None:
    stream = CountingStream()
    handler = BufferedLineHandler(stream, flush_s=60, max_bytes=100)
    logger = _logger(handler, "test.accesslog.full")

    async def run() -> str:
        for _ in range(12):
            logger.info("x" * 9)  # 10 characters with its newline
        return stream.getvalue()

    written = asyncio.run(run())
    assert written.splitlines() == ["x" * 9] * 10
    handler.close()
    assert stream.getvalue().splitlines() == ["x" * 9] * 12  # close writes the rest


def test_without_an_event_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    logger = _logger(BufferedLineHandler(stream, flush_s=60), "test.accesslog.thread")
    logger.info("one")
    assert stream.getvalue() == "one\n"
