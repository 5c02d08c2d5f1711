"""A StatsD → Prometheus bridge for Airflow's metrics (embedded stack and compose).

Airflow 3 emits StatsD (``[metrics] statsd_on``) through the ``statsd`` client; with
``statsd_influxdb_enabled`` its tags travel InfluxDB-style in the name
(``airflow.ti_failures,dag_id=d,task_id=t:1|c``). Debian 12 has no statsd exporter and
the official one is a container image, so both topologies run this small bridge (the
embedded stack on loopback, compose as its ``statsd-bridge`` service). It listens on UDP,
keeps counters, gauges and timers by name and tags, and serves them on ``/metrics``
with ``prometheus_client``:

=============  =====================================================
StatsD         Prometheus
=============  =====================================================
``|c``         counter ``<name>_total`` (divided by the sample rate)
``|g``         gauge ``<name>`` (``+N``/``-N``: a change)
``|ms``/``|h``  summary ``<name>_seconds`` (``_sum`` and ``_count``)
=============  =====================================================

Names: dots and other characters outside ``[a-zA-Z0-9_]`` become ``_`` (``airflow.ti_failures``
→ ``airflow_ti_failures_total``); tags become labels. :func:`parse` is pure; malformed
lines are counted in ``modelops_statsd_bridge_malformed_total`` and dropped.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

_NAME = re.compile(r"[^a-zA-Z0-9_]")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One parsed StatsD line."""

    name: str
    labels: Labels
    kind: str  # counter | gauge | timer
    value: float
    delta: bool = False  # a gauge change (+N / -N) rather than a value


def _metric_name(raw: str) -> str:
    name = _NAME.sub("_", raw)
    return f"_{name}" if name[:1].isdigit() else name


def parse(line: str) -> Sample:
    """Parse ``name[,tag=value...]:value|type[|@rate]``.

    Raises:
        ValueError: not a StatsD line (the message says which part and gives an example).
    """
    head, sep, rest = line.strip().rpartition(":") if "|" in line else ("", "", "")
    if not sep or not head:
        raise ValueError(f"{line!r}: expected name:value|type (example: airflow.ti_failures,dag_id=d:1|c)")
    parts = rest.split("|")
    value_text, kind_code = parts[0], parts[1] if len(parts) > 1 else ""
    rate = 1.0
    for extra in parts[2:]:
        if extra.startswith("@"):
            rate = float(extra[1:])
            if not 0 < rate <= 1:
                raise ValueError(f"{line!r}: sample rate {extra} must be in (0, 1]")
    name, *tags = head.split(",")
    labels = []
    for tag in tags:
        key, eq, value = tag.partition("=")
        key = _NAME.sub("_", key)
        if not eq or not _LABEL.match(key):
            raise ValueError(f"{line!r}: tag {tag!r} is not key=value")
        labels.append((key, value))
    number = float(value_text)
    kinds = {"c": "counter", "g": "gauge", "ms": "timer", "h": "timer"}
    if kind_code not in kinds:
        raise ValueError(f"{line!r}: type {kind_code!r} is not one of c, g, ms, h")
    kind = kinds[kind_code]
    return Sample(_metric_name(name), tuple(sorted(labels)), kind,
                  number / rate if kind == "counter" else number,
                  delta=kind == "gauge" and value_text[:1] in "+-")


class Store(Collector):
    """The bridge's state: counters, gauges and timers by (name, labels); a Prometheus collector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[tuple[str, Labels], float] = {}
        self.gauges: dict[tuple[str, Labels], float] = {}
        self.timers: dict[tuple[str, Labels], tuple[float, int]] = {}
        self.malformed = 0

    def add(self, sample: Sample) -> None:
        key = (sample.name, sample.labels)
        with self._lock:
            if sample.kind == "counter":
                self.counters[key] = self.counters.get(key, 0.0) + sample.value
            elif sample.kind == "gauge":
                self.gauges[key] = (self.gauges.get(key, 0.0) + sample.value) if sample.delta else sample.value
            else:
                total, count = self.timers.get(key, (0.0, 0))
                self.timers[key] = (total + sample.value / 1000.0, count + 1)

    def feed(self, packet: str) -> None:
        for line in packet.splitlines():
            if not line.strip():
                continue
            try:
                self.add(parse(line))
            except ValueError as exc:
                with self._lock:
                    self.malformed += 1
                log.debug("statsd bridge: dropped %s", exc)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counters, gauges, timers = dict(self.counters), dict(self.gauges), dict(self.timers)
            malformed = self.malformed
        yield from _families(counters, "counter", "_total", "StatsD counter")
        yield from _families(gauges, "gauge", "", "StatsD gauge")
        by_name: dict[str, Metric] = {}
        for (name, labels), (total, count) in sorted(timers.items()):
            metric = by_name.setdefault(name, Metric(f"{name}_seconds", "StatsD timer", "summary"))
            metric.add_sample(f"{name}_seconds_sum", dict(labels), total)
            metric.add_sample(f"{name}_seconds_count", dict(labels), float(count))
        yield from by_name.values()
        errors = Metric("modelops_statsd_bridge_malformed", "StatsD lines the bridge could not parse", "counter")
        errors.add_sample("modelops_statsd_bridge_malformed_total", {}, float(malformed))
        yield errors


def _families(values: dict[tuple[str, Labels], float], kind: str, suffix: str, doc: str) -> Iterable[Metric]:
    by_name: dict[str, Metric] = {}
    for (name, labels), value in sorted(values.items()):
        base = name.removesuffix("_total") if kind == "counter" else name
        metric = by_name.setdefault(base, Metric(base, doc, kind))
        metric.add_sample(f"{base}{suffix}", dict(labels), value)
    return by_name.values()


def serve(host: str, udp_port: int, http_port: int) -> None:
    """Receive StatsD on ``host:udp_port`` and serve ``/metrics`` on ``host:http_port`` until killed."""
    from prometheus_client import start_http_server

    store = Store()
    registry = CollectorRegistry()
    registry.register(store)
    start_http_server(http_port, addr=host, registry=registry)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, udp_port))
    log.info("statsd bridge: udp %s:%d -> http://%s:%d/metrics", host, udp_port, host, http_port)
    while True:
        data, _ = sock.recvfrom(65535)
        store.feed(data.decode("utf-8", errors="replace"))


if __name__ == "__main__":  # python -m modelops.observability.statsd_bridge HOST UDP_PORT HTTP_PORT
    import sys

    logging.basicConfig(level=logging.INFO)
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
