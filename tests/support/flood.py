"""A load generator that overloads one gateway: keep-alive connections posting one request in a loop.

``python -m tests.support.flood --url http://127.0.0.1:PORT --path /v1/... --body FILE
--connections 48`` runs until stopped (SIGTERM, by its PID) or ``--seconds``; it prints
``ready`` once every connection is open and, at the end, ``answered N`` (the number of
answers it read). Raw asyncio sockets: a request costs the client far less than the
gateway, so the gateway's event loop, not this process, is the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit


async def _worker(host: str, port: int, request: bytes, stop: asyncio.Event, answered: list[int],
                  opened: asyncio.Queue[None]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    await opened.put(None)
    try:
        while not stop.is_set():
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            answered[0] += 1
    finally:
        writer.close()


async def _run(url: str, path: str, body: bytes, connections: int, seconds: float) -> int:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.call_later(seconds, stop.set)
    answered = [0]
    opened: asyncio.Queue[None] = asyncio.Queue()
    tasks = [loop.create_task(_worker(host, port, request, stop, answered, opened)) for _ in range(connections)]
    for _ in range(connections):
        await opened.get()
    print("ready", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return answered[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--body", type=Path, required=True, help="file with the JSON body to post")
    parser.add_argument("--connections", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=120.0, help="stop after this long at the latest")
    args = parser.parse_args()
    started = time.monotonic()
    answered = asyncio.run(_run(args.url, args.path, args.body.read_bytes(), args.connections, args.seconds))
    print(f"answered {answered} in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
