"""Unit tests of the gateway's uvicorn protocol: a response's head and body leave in one write.

uvicorn's own protocol code runs on a stand-in transport that records each ``write``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from modelops.gateway.server import OneWriteHttpToolsProtocol


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.closed_by_response = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8400), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    if scope["path"] == "/stream":  # no content-length: chunked, in two body messages
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        return
    body = b'{"ok":true}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def exchange(request: bytes) -> RecordingTransport:
    async def run() -> RecordingTransport:
        config = Config(app, http=OneWriteHttpToolsProtocol, lifespan="off")
        config.load()
        state = ServerState()
        protocol = OneWriteHttpToolsProtocol(config=config, server_state=state, app_state={})
        transport = RecordingTransport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(request)
        for _ in range(100):
            await asyncio.sleep(0)
            if not state.tasks:
                break
        assert not state.tasks, "the response did not complete"
        transport.closed_by_response = transport.closed
        protocol.connection_lost(None)
        return transport

    return asyncio.run(run())


def test_head_and_body_leave_in_one_write() -> None:
    transport = exchange(b"POST /v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}")
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: 11" in head
    assert body == b'{"ok":true}'
    assert not transport.closed_by_response  # keep-alive


def test_two_pipelined_requests_get_one_write_each_in_order() -> None:
    request = b"GET /a HTTP/1.1\r\nHost: gw\r\n\r\n"
    transport = exchange(request + request)
    assert len(transport.writes) == 2
    assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") and w.endswith(b'{"ok":true}') for w in transport.writes)


def test_http_1_0_closes_after_its_one_write() -> None:
    transport = exchange(b"GET /a HTTP/1.0\r\n\r\n")
    assert len(transport.writes) == 1
    assert b"connection: close" in transport.writes[0]
    assert transport.closed_by_response


@pytest.mark.parametrize("method", ["HEAD"])
def test_a_head_answer_still_sends_its_head(method: str) -> None:
    transport = exchange(f"{method} /a HTTP/1.1\r\nHost: gw\r\n\r\n".encode())
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and transport.writes[0].endswith(b"\r\n\r\n")


def test_a_streamed_body_carries_the_head_with_its_first_chunk() -> None:
    transport = exchange(b"GET /stream HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert len(transport.writes) == 2
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding: chunked" in transport.writes[0]
    assert transport.writes[0].endswith(b"3\r\none\r\n")
    assert transport.writes[1] == b"3\r\ntwo\r\n0\r\n\r\n"
