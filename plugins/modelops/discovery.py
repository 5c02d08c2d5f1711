"""Replicas discovered through DNS: one service name, every address behind it.

A base URL written ``dns+http://gateway:8400`` stands for every replica of the service ``gateway``:
the name is resolved (A records, as Docker's and Kubernetes' headless-service DNS answer it) each
time the list is asked for, and each address becomes one URL (``http://172.18.0.7:8400``). A plain
URL stays as it is, so a hand-kept list and the embedded stack's one gateway keep working. The
same convention as Prometheus' ``dns_sd_configs`` (type A), which scrapes the same replicas.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from modelops.errors import ConfigError

DNS_PREFIX = "dns+"

Resolve = Callable[[str, int], list[str]]
"""(host, port) -> the IPv4 addresses behind the name, in any order."""


def resolve_ipv4(host: str, port: int) -> list[str]:
    """Every IPv4 address of ``host`` (getaddrinfo, AF_INET: a name with an AAAA record for the same
    machine must not count twice)."""
    infos = socket.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def is_discovered(url: str) -> bool:
    return url.startswith(DNS_PREFIX)


def expand(urls: Iterable[str], resolve: Resolve = resolve_ipv4) -> tuple[str, ...]:
    """Each ``dns+`` URL replaced by one URL per address behind its host (sorted, no duplicates).

    Raises:
        ConfigError: a ``dns+`` name that does not resolve (no replica is up, or a wrong name).
    """
    out: list[str] = []
    for url in urls:
        if not is_discovered(url):
            out.append(url)
            continue
        parts = urlsplit(url[len(DNS_PREFIX):])
        if not parts.hostname or parts.port is None:
            raise ConfigError(f"{url!r}: a discovered URL needs a host and a port, e.g. dns+http://gateway:8400")
        try:
            addresses = sorted(set(resolve(parts.hostname, parts.port)), key=_address_key)
        except OSError as exc:
            raise ConfigError(f"{url!r}: {parts.hostname!r} does not resolve ({exc}): no replica of the "
                              f"service is up, or the name is wrong (e.g. dns+http://gateway:8400)") from exc
        if not addresses:
            raise ConfigError(f"{url!r}: {parts.hostname!r} resolves to no IPv4 address")
        path = parts.path.rstrip("/")
        out.extend(f"{parts.scheme}://{address}:{parts.port}{path}" for address in addresses)
    return tuple(dict.fromkeys(out))


def _address_key(address: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in address.split("."))
    except ValueError:
        return (1 << 16,)


def address_toward(host: str, port: int) -> str:
    """This machine's own IPv4 address on the route to ``host`` (a container on several networks has one
    address per network; only the one on the network it shares with ``host`` is reachable from there).

    A UDP ``connect`` only picks the route and the source address: no packet is sent.

    Raises:
        ConfigError: ``host`` does not resolve or no route leads to it.
    """
    try:
        (address, *_) = resolve_ipv4(host, port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, port))
            return str(probe.getsockname()[0])
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no route to {host}:{port} from this machine ({exc}): is it on a network this "
                          f"service shares with {host}?") from exc


if __name__ == "__main__":  # `python -m modelops.discovery HOST PORT`: the address toward HOST (shell scripts)
    import sys

    print(address_toward(sys.argv[1], int(sys.argv[2])))
