"""Raw-ASGI plumbing of the gateway: error answers, response writing, header reading, sampling."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON_ENCODE = msgspec.json.Encoder().encode


class HTTPError(Exception):
    """An answer other than 2xx, raised inside a handler."""

    def __init__(self, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.status = status
        self.body = body
        self.headers = headers or []


def error(status: int, error: str, message: str, **extra: Any) -> HTTPError:
    return HTTPError(status, {"error": error, "message": message, **extra})


def sampled(request_id: str, share: float) -> bool:
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < share


def headers_of(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def respond(send: Send, status: int, body: bytes, request_id: str,
                   headers: list[tuple[bytes, bytes]] | None = None,
                   content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, document: Any, request_id: str,
                        headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await respond(send, status, _JSON_ENCODE(document), request_id, headers)
