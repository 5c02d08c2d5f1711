"""Unit tests of the access log's buffered handler (modelops.gateway.logs.accesslog)."""

from __future__ import annotations

import asyncio
import io
import logging

from modelops.gateway.logs.accesslog import BufferedLineHandler, direct_sink


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


class RecordingRaw(io.RawIOBase):
    """A pipe's write end: records each write system call."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.calls.append(bytes(data))
        return len(data)


def test_a_flush_writes_chunks_of_at_most_pipe_buf_cut_at_line_ends() -> None:
    # compose runs two workers per container on one stdout pipe: writes > PIPE_BUF (4096)
    # are not atomic and could interleave mid-line
    raw = RecordingRaw()
    stream = io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=64 * 1024), encoding="utf-8")
    handler = BufferedLineHandler(stream, flush_s=60, max_bytes=64 * 1024)
    logger = _logger(handler, "test.accesslog.pipebuf")
    lines = [f'{{"n": {k}, "path": "/v1/models/{"é" * (k % 7)}{"a" * (k % 300)}"}}' for k in range(400)]
    lines.insert(17, "L" * 10_000)  # a single line longer than PIPE_BUF goes alone

    async def run() -> None:
        for line in lines:
            logger.info("%s", line)

    asyncio.run(run())
    handler.close()
    assert len(raw.calls) > 1
    for call in raw.calls:
        assert call.endswith(b"\n")
        assert len(call) <= 4096 or call.count(b"\n") == 1, len(call)
    assert [len(c) for c in raw.calls if len(c) > 4096] == [10_001]
    assert b"".join(raw.calls).decode("utf-8").splitlines() == lines


def test_line_chunks_cut_at_line_ends() -> None:
    from modelops.gateway.logs.accesslog import line_chunks

    assert list(line_chunks(b"aa\nbb\ncc\n", limit=6)) == [b"aa\nbb\n", b"cc\n"]
    assert list(line_chunks(b"aa\nbbbbbbbb\ncc\n", limit=6)) == [b"aa\n", b"bbbbbbbb\n", b"cc\n"]
    assert list(line_chunks(b"abcdef\n", limit=7)) == [b"abcdef\n"]
    assert list(line_chunks(b"", limit=7)) == []


def test_direct_sink_only_when_the_buffered_handler_alone_gets_info_lines() -> None:
    handler = BufferedLineHandler(CountingStream())
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = _logger(handler, "test.accesslog.direct")
    assert direct_sink(logger) == handler.add_line
    sink = direct_sink(logger)
    assert sink is not None
    sink('{"a":1}')
    logger.info('{"b":2}')
    handler.flush()
    assert handler.stream.getvalue() == '{"a":1}\n{"b":2}\n'  # type: ignore[attr-defined]

    logger.propagate = True  # a parent's handlers (e.g. pytest's caplog) must see the records
    assert direct_sink(logger) is None
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    assert direct_sink(logger) is None
    logger.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))  # a formatter that adds to the line
    assert direct_sink(logger) is None
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    assert direct_sink(logger) is None
