"""A local HTTP receiver for apprise's json:// notifications, so tests can read what was sent."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class NotificationReceiver:
    """Collects JSON bodies POSTed to it on 127.0.0.1 (a free port)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        received = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                try:
                    received.append(json.loads(self.rfile.read(length) or b"{}"))
                except ValueError:
                    received.append({"raw": True})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"json://127.0.0.1:{self.port}/notify"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NotificationReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int = 1, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.messages)
