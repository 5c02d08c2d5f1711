"""Replica discovery through DNS (``dns+`` URLs): pure expansion with a stand-in resolver."""

from __future__ import annotations

import socket

import pytest

from modelops.config import load_settings
from modelops.discovery import expand, resolve_ipv4
from modelops.errors import ConfigError


def _resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]
    return resolve


def test_a_dns_url_becomes_one_url_per_address_and_plain_urls_stay() -> None:
    resolve = _resolver({"gateway": ["172.18.0.12", "172.18.0.9", "172.18.0.12", "172.18.0.10"]})
    urls = expand(["dns+http://gateway:8400", "http://edge:8400"], resolve)
    assert urls == ("http://172.18.0.9:8400", "http://172.18.0.10:8400", "http://172.18.0.12:8400",
                    "http://edge:8400")


def test_a_name_that_does_not_resolve_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"'dns\+http://gatewya:8400': 'gatewya' does not resolve .*"
                                          r"e\.g\. dns\+http://gateway:8400"):
        expand(["dns+http://gatewya:8400"], _resolver({}))
    with pytest.raises(ConfigError, match=r"needs a host and a port, e\.g\. dns\+http://gateway:8400"):
        expand(["dns+http://gateway"], _resolver({"gateway": ["10.0.0.1"]}))


def test_localhost_counts_once() -> None:
    """IPv4 only: a name with an A and an AAAA record of one machine is one replica, not two."""
    assert set(resolve_ipv4("localhost", 80)) == {"127.0.0.1"}
    assert expand(["dns+http://localhost:8400"]) == ("http://127.0.0.1:8400",)


def test_the_gateway_setting_accepts_discovered_urls() -> None:
    cfg = load_settings({"MODELOPS_GATEWAY_URLS": "dns+http://localhost:8400"})
    assert cfg.gateway_urls == ("dns+http://localhost:8400",)
    assert cfg.gateway_url_list == ("http://127.0.0.1:8400",)
    with pytest.raises(ConfigError, match=r"MODELOPS_GATEWAY_URLS='dns:gateway': .*not a URL"):
        load_settings({"MODELOPS_GATEWAY_URLS": "dns:gateway"})
