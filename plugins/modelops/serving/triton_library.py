"""``tritonclient.http`` clients, one per thread, process and server, closed with their gevent hub after the thread.

``tritonclient.http.InferenceServerClient`` is not thread-safe (its docstring: "intended to be used by a
single thread"), and it runs on gevent: a thread's first call gives that thread a gevent hub (an event
loop, a resolver's thread pool) that gevent never closes when the thread ends. Worse, a client dropped
with its thread is garbage-collected inside the dying thread, where its ``close()`` makes a new hub, also
never closed. A process that calls from short-lived threads (the reconciler's pool per tick, the loader's
per load) lost four descriptors per thread this way: on CI's shared stack the reconciler reached its limit
(20,000) after ~45 min and every later Triton call failed with EMFILE.

So the clients and hub of each thread are held here, not by the thread: when a thread makes its first
client, the clients of every thread that has ended are closed and its hub destroyed (gevent's
``Hub.destroy`` "can be called from other threads after that thread has exited"). The descriptors of a
process are then bounded by its live threads. A thread shares one client per server and timeouts among
all its :class:`~modelops.serving.triton.TritonClient` objects (headers are sent per call), so making a
``TritonClient`` per call costs no new connection.

A forked child (an Airflow task process, a Celery pool process) inherits its parent's gevent loop, on
which every library call would hang: it is prepared for the new process, as gevent's docs ask, and the
parent's clients and hubs are left untouched (stopping their watchers in the child would change the
parent's epoll set, which the child shares).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import gevent
from tritonclient import http as triton_http

Key = tuple[str, bool, float, float]
"""(host:port/path, TLS, connection timeout, network timeout)."""


@dataclass
class _ThreadClients:
    hub: Any
    clients: dict[Key, triton_http.InferenceServerClient] = field(default_factory=dict)


_lock = threading.Lock()
_threads: dict[threading.Thread, _ThreadClients] = {}
_inherited: list[_ThreadClients] = []
"""A forked child's copy of its parent's: referenced so that the collector never closes them here."""


def library_client(location: str, *, ssl: bool, connection_timeout: float,
                   network_timeout: float) -> triton_http.InferenceServerClient:
    """The calling thread's client of ``location`` (``host:port[/path]``) with these timeouts."""
    key = (location, ssl, connection_timeout, network_timeout)
    mine = _threads.get(threading.current_thread())
    if mine is None:
        mine = _enter_thread()
    client = mine.clients.get(key)
    if client is None:
        client = triton_http.InferenceServerClient(location, ssl=ssl, connection_timeout=connection_timeout,
                                                   network_timeout=network_timeout)
        mine.clients[key] = client  # only this thread adds to its own entry
    return client


def threads_held() -> int:
    """Threads whose clients and hub are held (the live ones and those ended since the last sweep)."""
    with _lock:
        return len(_threads)


def _enter_thread() -> _ThreadClients:
    me = threading.current_thread()
    with _lock:
        for thread, held in list(_threads.items()):
            if not thread.is_alive():
                del _threads[thread]
                _close(held)
        mine = _threads[me] = _ThreadClients(gevent.get_hub())
        return mine


def _close(held: _ThreadClients) -> None:
    """Close an ended thread's clients (while their hub still exists), then its hub."""
    for client in held.clients.values():
        with contextlib.suppress(Exception):  # a socket already broken must not keep the hub open
            client.close()
    held.hub.destroy(destroy_loop=True)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    _inherited.extend(_threads.values())
    _threads.clear()
    gevent.reinit()


os.register_at_fork(after_in_child=_after_fork_in_child)
