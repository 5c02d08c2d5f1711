"""uvicorn's httptools protocol, writing a response's head and its body in one ``write``.

uvicorn writes the status line and headers when the app sends ``http.response.start`` and
the body when it sends ``http.response.body``: two ``send`` system calls and two TCP
segments per answer (the sockets are ``TCP_NODELAY``), so the client is woken twice. The
gateway always sends the whole body in one message right after the start, so this
protocol holds the head back and writes it in front of the body. Everything else
(parsing, keep-alive, flow control, pipelining, errors) is uvicorn's own code.

Used by ``modelops gateway serve`` (``uvicorn.run(http=OneWriteHttpToolsProtocol)``).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _Collect:
    """Stands in for the transport while uvicorn formats a response head."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)


class _Prepend:
    """Stands in for the transport while uvicorn writes a body: the held head goes out with it."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport = transport
        self.head = head

    def write(self, data: bytes) -> None:
        head, self.head = self.head, b""
        self.transport.write(head + data if head else data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def flush(self) -> None:
        if self.head:
            head, self.head = self.head, b""
            self.transport.write(head)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class OneWriteCycle(RequestResponseCycle):
    """A request/response cycle whose response head waits for the first body message."""

    _head = b""

    async def send(self, message: Any) -> None:  # the ASGI send (uvicorn's ASGISendEvent)
        if message["type"] == "http.response.start" and not self.response_started:
            transport, collect = self.transport, _Collect()
            self.transport = collect  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = transport
            self._head = b"".join(collect.chunks)
            return
        if not self._head:
            await super().send(message)
            return
        transport, prepend = self.transport, _Prepend(self.transport, self._head)
        self._head = b""
        self.transport = prepend  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = transport
            if not transport.is_closing():
                prepend.flush()  # nothing was written (HEAD, an empty chunked body): the head alone


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol with :class:`OneWriteCycle` cycles."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # The cycle was built by uvicorn's on_headers_complete; only its send differs, and the
        # subclass adds no state of its own (a class attribute default), so switching the class
        # before its task starts is safe.
        cycle.__class__ = OneWriteCycle
        super()._start_asgi_task(cycle, app)
