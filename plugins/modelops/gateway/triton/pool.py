"""Several Triton servers behind one configured URL: the gateway's pool of :class:`TritonHTTP` clients.

``MODELOPS_TRITON_URL=dns+http://triton:8000`` stands for every server of the ``triton`` service
(:mod:`modelops.discovery`: the name's A records); a plain URL is a pool of one and behaves exactly
like a single client (no background work, nothing skipped, no retry: there is nowhere else to go).

- **Healthy set.** Every ``refresh_s`` the name is resolved again (servers added with ``--scale``
  join, removed ones leave and their connections close) and each server's ``/v2/health/ready`` is
  asked; the servers that answer 200 are the healthy set.
- **Choice.** Round robin over the healthy servers that are not known to lack the requested
  version (:func:`attempt_order`); with none healthy, over every known server (the call then fails
  with the server's own error, as with one server).
- **One retry elsewhere.** A call that fails because of the server, not the request — refused,
  reset or lost connection or HTTP 503 (:class:`TritonUnreachable`: down or going away), or the
  version not served there (:class:`VersionNotServed`: e.g. restarted and not reconciled yet) — is
  sent once to another server (:func:`retryable`); the failed server leaves the healthy set (or,
  for a missing version, is skipped for that version for ``not_served_hold_s``) until a refresh
  finds it ready again. A refusal of the request itself (HTTP 4xx, a model error, a malformed
  answer: :class:`TritonFailed`) is never retried: another server would refuse it the same way.
  The deadline stays the caller's: a retry only uses what is left of it.
- **Lost servers.** A call in flight on a server that then fails a health round (killed without
  closing its connections: no reset ever comes) is abandoned and retried elsewhere
  (:class:`TritonLost`, reason ``lost``), instead of waiting out the caller's deadline.
- **Hedge.** A call unanswered after ``hedge_after_s`` (0.5 s; the median call takes milliseconds)
  is also sent to the next server and the first answer wins (a "hedged request", Dean and Barroso,
  "The Tail at Scale", 2013): a server that restarted and is still starting its python stubs on a
  loaded machine answers late, not wrong. Inference has no side effects; at most
  ``max_hedges_in_flight`` (4) second calls run at once, so an overloaded pool is not doubled.
- **Statistics** (the delay split's queue and compute means) are summed over the healthy servers
  (:func:`merge_stats`), so the means are those of every server the gateway spreads requests over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from modelops.discovery import Resolve, expand, is_discovered, resolve_ipv4
from modelops.errors import ModelopsError, ServingError
from modelops.gateway.triton.inference import (
    TritonFailed,
    TritonHTTP,
    TritonUnavailable,
    TritonUnreachable,
    VersionNotServed,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class TritonLost(TritonUnreachable):
    """The server failed its health check while a call was in flight on it (the call was abandoned)."""


def retryable(exc: BaseException) -> bool:
    """Whether a failed call may be sent to another server: the server failed, not the request."""
    return isinstance(exc, (TritonUnreachable, VersionNotServed))


def attempt_order(servers: Sequence[str], healthy: frozenset[str] | set[str], lacking: frozenset[str] | set[str],
                  turn: int) -> tuple[str, ...]:
    """The servers to try for one call, first choice first; at most two (one retry).

    Args:
        servers: every known server, in a stable order.
        healthy: those whose last health check (or call) succeeded.
        lacking: those known not to serve the requested version right now.
        turn: the round-robin counter (any integer; one per call).

    The first choice rotates over the healthy servers that serve the version (else the healthy
    ones, else every server); the retry goes to the next of those, else to any other server.
    """
    if not servers:
        return ()
    candidates = [s for s in servers if s in healthy and s not in lacking] \
        or [s for s in servers if s in healthy] or list(servers)
    first = turn % len(candidates)
    rotated = candidates[first:] + candidates[:first]
    others = [s for s in servers if s not in rotated]
    return tuple((rotated + others)[:2])


async def _first_answer(first: asyncio.Future[T], second: asyncio.Future[T]) -> T:
    """The first of two calls to answer; when both fail, the first call's error."""
    pending: set[asyncio.Future[T]] = {first, second}
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is None:
                return task.result()
    raise first.exception() or second.exception() or ServingError("no answer")  # both failed


def merge_stats(documents: Sequence[Mapping[str, Any]], version: int) -> dict[str, Any]:
    """One statistics document of ``version`` whose counters are the sums over several servers.

    Each ``inference_stats`` entry (``{"count": n, "ns": t}``) is summed; a server that does not
    list the version adds nothing.

    Raises:
        ValueError: a document is not of the statistics extension's shape.
    """
    totals: dict[str, dict[str, int]] = {}
    name = ""
    for document in documents:
        try:
            for entry in document["model_stats"]:
                if str(entry.get("version", "")) != str(version):
                    continue
                name = str(entry.get("name", name))
                for part, value in entry["inference_stats"].items():
                    slot = totals.setdefault(part, {"count": 0, "ns": 0})
                    slot["count"] += int(value.get("count", 0))
                    slot["ns"] += int(value.get("ns", 0))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a Triton statistics document ({exc!r} missing or malformed)") from exc
    if not totals:
        return {"model_stats": []}
    return {"model_stats": [{"name": name, "version": str(version), "inference_stats": totals}]}


class TritonPool:
    """Every Triton server behind ``url`` (see the module doc); the interface of :class:`TritonHTTP`.

    Args:
        url: ``http://host:port`` (one server) or ``dns+http://name:port`` (every address of ``name``).
        refresh_s: seconds between discovery + health rounds (discovered URLs only).
        health_timeout_s: deadline of one ``/v2/health/ready`` call.
        not_served_hold_s: how long a server that lacked a version is skipped for it.
        resolve: the DNS lookup (tests give their own).
        max_idle / connect_timeout_s: per-server client settings (:class:`TritonHTTP`).
        hedge_after_s: a call unanswered this long is also sent to the next server; the first answer wins.
        max_hedges_in_flight: at most this many such second calls at once (an overloaded pool is not doubled).
    """

    def __init__(self, url: str, *, refresh_s: float = 1.0, health_timeout_s: float = 0.5,
                 not_served_hold_s: float = 2.0, resolve: Resolve = resolve_ipv4, max_idle: int = 64,
                 connect_timeout_s: float = 1.0, hedge_after_s: float = 0.5, max_hedges_in_flight: int = 4) -> None:
        self.url = url
        self.discovered = is_discovered(url)
        self.refresh_s = refresh_s
        self.health_timeout_s = health_timeout_s
        self.not_served_hold_s = not_served_hold_s
        self.resolve = resolve
        self.max_idle = max_idle
        self.connect_timeout_s = connect_timeout_s
        self.hedge_after_s = hedge_after_s
        self.max_hedges_in_flight = max_hedges_in_flight
        self._hedges_in_flight = 0
        self.clients: dict[str, TritonHTTP] = {}
        self.healthy: set[str] = set()
        self.lacking: dict[tuple[str, str, int], float] = {}  # (server, model, version) -> skipped until
        self.retries: dict[str, int] = {"unreachable": 0, "not_served": 0, "lost": 0, "hedged": 0}
        self._lost: dict[str, asyncio.Event] = {}  # set when a server leaves the healthy set or the name
        self._turn = 0
        self._task: asyncio.Task[None] | None = None
        if not self.discovered:  # a pool of one: the URL is checked now, as TritonHTTP always did
            self.clients[url] = self._client(url)
            self.healthy.add(url)

    def _client(self, url: str) -> TritonHTTP:
        return TritonHTTP(url, max_idle=self.max_idle, connect_timeout_s=self.connect_timeout_s)

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self.clients)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """First discovery round (a name that does not resolve yet is retried in the background)."""
        if not self.discovered or self._task is not None:
            return
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="triton-pool")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for client in self.clients.values():
            await client.close()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception:  # the pool must keep serving with the last known servers
                log.exception("Triton pool refresh failed")

    async def refresh(self) -> None:
        """Resolve the name again and ask every server whether it is ready."""
        try:
            found = await asyncio.to_thread(expand, [self.url], self.resolve)
        except ModelopsError as exc:  # no server resolves right now: keep the known ones, ask them
            log.warning("Triton pool: %s", exc)
            found = tuple(self.clients)
        for gone in set(self.clients) - set(found):
            self._signal_lost(gone)
            await self.clients.pop(gone).close()
            log.info("Triton pool: %s left", gone)
        for url in found:
            if url not in self.clients:
                self.clients[url] = self._client(url)
                log.info("Triton pool: %s joined", url)
        ready = await asyncio.gather(*(self._ready(url) for url in self.clients))
        healthy = {url for url, ok in zip(self.clients, ready, strict=True) if ok}
        if healthy != self.healthy:
            log.info("Triton pool: healthy %s of %s", sorted(healthy), sorted(self.clients))
        for lost in self.healthy - healthy:
            self._signal_lost(lost)
        self.healthy = healthy
        now = time.monotonic()
        self.lacking = {key: until for key, until in self.lacking.items() if until > now and key[0] in self.clients}

    def _signal_lost(self, url: str) -> None:
        """Wake the calls in flight on ``url``: it stopped answering its health check (or left the name)."""
        event = self._lost.pop(url, None)
        if event is not None:
            event.set()

    async def _on_server(self, server: str, call: Awaitable[T]) -> T:
        """``call`` on ``server``, abandoned (:class:`TritonUnreachable`) if the server is lost meanwhile.

        A server killed without closing its connections (SIGKILL, a container's network gone) sends no
        reset: a call in flight on it would wait out the caller's whole deadline and leave no time for
        the retry elsewhere (a 504 in the compose Triton-kill test). The health round that finds the
        server gone ends such calls, so they go to another server within about ``refresh_s`` +
        ``health_timeout_s``. Inference has no side effects, so an abandoned call answered late costs
        nothing but the work. A pool of one (no health rounds) waits as a single client does.
        """
        task = asyncio.ensure_future(call)
        if not self.discovered:
            return await task
        lost = self._lost.setdefault(server, asyncio.Event())
        waiter = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the caller's deadline (or shutdown): stop both
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        raise TritonLost(f"Triton {server}: failed its health check while the call was in flight")

    async def _ready(self, url: str) -> bool:
        try:
            async with asyncio.timeout(self.health_timeout_s):
                return await self.clients[url].ready()
        except (TimeoutError, ModelopsError, OSError):
            return False

    # ------------------------------------------------------------------ calls
    def order(self, model: str, version: int) -> tuple[str, ...]:
        """The servers to try for one call of ``model`` ``version`` (advances the round robin)."""
        self._turn += 1
        now = time.monotonic()
        lacking = {server for (server, m, v), until in self.lacking.items()
                   if m == model and v == version and until > now}
        return attempt_order(tuple(self.clients), self.healthy, lacking, self._turn)

    def _note_failure(self, server: str, model: str, version: int, exc: BaseException) -> str | None:
        """Book a failed call on ``server``; returns the retry reason, None when another server would fail too."""
        if isinstance(exc, TritonLost):
            return "lost"
        if isinstance(exc, TritonUnreachable):
            self.healthy.discard(server)  # back when a refresh finds it ready
            return "unreachable"
        if isinstance(exc, VersionNotServed):
            self.lacking[(server, model, version)] = time.monotonic() + self.not_served_hold_s
            return "not_served"
        return None

    async def _attempt(self, server: str, model: str, version: int, call: Awaitable[T]) -> T:
        try:
            return await self._on_server(server, call)
        except (TritonUnreachable, VersionNotServed) as exc:
            self._note_failure(server, model, version, exc)
            raise

    async def _call(self, model: str, version: int, call: Callable[[TritonHTTP], Awaitable[T]]) -> T:
        order = self.order(model, version)
        if not order:
            raise TritonUnreachable(f"Triton {self.url}: no server found (is the service up?)")
        clients = [self.clients[server] for server in order]  # a refresh may drop a server meanwhile
        first = asyncio.ensure_future(self._attempt(order[0], model, version, call(clients[0])))
        if len(order) < 2:
            return await first
        second: asyncio.Future[T] | None = None
        hedged = False
        try:
            await asyncio.wait({first}, timeout=self.hedge_after_s)
            if not first.done() and self._hedges_in_flight < self.max_hedges_in_flight:
                hedged = True
                self._hedges_in_flight += 1
                self.retries["hedged"] += 1
                log.info("Triton %s: no answer after %.0f ms, also asking %s", order[0],
                         self.hedge_after_s * 1000, order[1])
                second = asyncio.ensure_future(self._attempt(order[1], model, version, call(clients[1])))
                return await _first_answer(first, second)
            try:
                return await first
            except (TritonUnreachable, VersionNotServed) as exc:
                reason = self._note_failure(order[0], model, version, exc) or "unreachable"
                self.retries[reason] += 1
                log.info("Triton %s failed (%s), retrying on %s: %s", order[0], reason, order[1], exc)
            second = asyncio.ensure_future(self._attempt(order[1], model, version, call(clients[1])))
            return await second
        finally:
            for task in (first, second):
                if task is not None and not task.done():
                    task.cancel()
            if hedged:
                self._hedges_in_flight -= 1

    async def infer_scores(self, model: str, version: int,
                           features: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """:meth:`TritonHTTP.infer_scores` on one server, once more on another if that server failed."""
        return await self._call(model, version, lambda c: c.infer_scores(model, version, features))

    async def infer_output(self, model: str, version: int, inputs: tuple[tuple[str, npt.NDArray[Any]], ...],
                           output: str) -> npt.NDArray[np.float32]:
        """:meth:`TritonHTTP.infer_output` on one server, once more on another if that server failed."""
        return await self._call(model, version, lambda c: c.infer_output(model, version, inputs, output))

    async def infer_tensors(self, model: str, version: int, inputs: tuple[tuple[str, npt.NDArray[Any]], ...],
                            outputs: tuple[str, ...]) -> dict[str, npt.NDArray[Any]]:
        """:meth:`TritonHTTP.infer_tensors` on one server, once more on another if that server failed."""
        return await self._call(model, version, lambda c: c.infer_tensors(model, version, inputs, outputs))

    async def version_config(self, model: str, version: int) -> dict[str, Any]:
        return await self._call(model, version, lambda c: c.version_config(model, version))

    async def version_stats(self, model: str, version: int) -> dict[str, Any]:
        """The version's statistics summed over the healthy servers (one server: its own document).

        Raises:
            TritonUnavailable / TritonFailed: no server answered (the first error).
        """
        if len(self.clients) == 1:
            (client,) = self.clients.values()
            return await client.version_stats(model, version)
        servers = [s for s in self.clients if s in self.healthy] or list(self.clients)
        answers = await asyncio.gather(*(self.clients[s].version_stats(model, version) for s in servers),
                                       return_exceptions=True)
        documents = [a for a in answers if isinstance(a, dict)]
        if not documents:
            first = next(a for a in answers if isinstance(a, BaseException))
            if isinstance(first, ServingError):
                raise first
            raise TritonUnavailable(f"Triton statistics of {model} v{version}: {first!r}")
        return merge_stats(documents, version)


__all__ = ["TritonFailed", "TritonLost", "TritonPool", "TritonUnavailable", "attempt_order", "merge_stats", "retryable"]
