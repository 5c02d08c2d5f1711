"""The platform's Triton client on tritonclient.http: errors translated, safe across threads and forks.

A loopback HTTP server stands in for Triton's repository and health endpoints (the library's own
transport is what is tested); the real Triton is in tests/integration/test_publish.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from modelops.errors import ServingError
from modelops.process import free_port
from modelops.serving.triton import TritonClient
from modelops.serving.triton_library import threads_held


class _Triton(BaseHTTPRequestHandler):
    def _answer(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(200, {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/index"):
            self._answer(200, [{"name": "m", "version": "3", "state": "READY"}])
        elif "/broken/" in self.path:
            self._answer(400, {"error": "failed to load 'broken', failed to poll from model repository"})
        else:
            self._answer(200, {})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def triton() -> Iterator[TritonClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Triton)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield TritonClient(f"http://127.0.0.1:{server.server_address[1]}", admin_key="")
    server.shutdown()
    server.server_close()


def test_triton_s_refusal_keeps_its_status_and_message(triton: TritonClient) -> None:
    with pytest.raises(ServingError, match=r"Triton load broken at http://.*: HTTP 400: failed to load 'broken'"):
        triton.load("broken")


def test_an_unreachable_server_is_a_serving_error_and_not_ready() -> None:
    client = TritonClient(f"http://127.0.0.1:{free_port()}", admin_key="", timeout_s=2.0)
    assert client.is_ready() is False
    with pytest.raises(ServingError, match=r"Triton repository index at http://127\.0\.0\.1:\d+: "):
        client.repository_index()


def test_a_server_that_closes_the_connection_without_answering_is_a_serving_error() -> None:
    """A Triton SIGKILLed mid-call resets the connection: geventhttpclient raises HTTPConnectionClosed, an
    ``http.client.HTTPException`` (not an OSError). Untranslated, it once ended the reconciler's process
    (CI, test_triton_sigkilled_during_the_canary: the routed versions not served again within 90 s)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def close_every_connection() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)  # the request, then no answer at all
            conn.close()

    thread = threading.Thread(target=close_every_connection, daemon=True)
    thread.start()
    try:
        client = TritonClient(f"http://127.0.0.1:{port}", admin_key="", timeout_s=5.0)
        with pytest.raises(ServingError, match=r"Triton repository index at http://127\.0\.0\.1:\d+: "):
            client.repository_index()
        assert client.is_ready() is False
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def test_one_client_serves_several_threads_at_once(triton: TritonClient) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda _: triton.ready_versions("m"), range(60)))
    assert answers == [[3]] * 60


def test_short_lived_threads_leave_no_descriptors_behind(triton: TritonClient) -> None:
    """Each thread's gevent loop holds two descriptors; the reconciler's pool per tick once leaked them to EMFILE."""
    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def one_tick() -> list[list[int]]:
        client = TritonClient(triton.base_url, admin_key="")  # as the reconciler makes one per model and tick
        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(lambda _: client.ready_versions("m"), range(8)))

    one_tick()
    before = open_descriptors()
    for _ in range(40):  # 160 threads: 320 descriptors without the clean-up
        assert one_tick() == [[3]] * 8
    assert open_descriptors() - before <= 12
    assert threads_held() <= 5  # the last tick's four (swept by the next thread's first call) and this one


def test_a_forked_child_calls_triton_with_the_parents_client_and_a_new_one(triton: TritonClient) -> None:
    assert triton.ready_versions("m") == [3]  # the parent's event loop exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when every call answered
        code = 1
        try:
            fresh = TritonClient(triton.base_url, admin_key="")
            in_thread: list[bool] = []
            worker = threading.Thread(target=lambda: in_thread.append(triton.is_ready()))
            worker.start()
            worker.join(10)
            code = 0 if (triton.ready_versions("m") == [3] and fresh.is_ready() and in_thread == [True]) else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, "a call in the forked child failed"
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's calls hung (an inherited gevent loop)")
    assert triton.is_ready()
