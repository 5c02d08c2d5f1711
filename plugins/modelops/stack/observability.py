"""The observability services of the embedded stack: alert relay, Alertmanager, Pushgateway, Prometheus.

Their configuration and binaries are :mod:`modelops.observability.prometheus`'s; here they become
:class:`modelops.stack.services.Service` values the launcher starts and stops like the rest of the stack.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from modelops.config import Settings
from modelops.observability.prometheus import (
    Ports,
    active,
    alertmanager_config,
    binary,
    install_alertmanager_templates,
    prometheus_config,
    stack_ports,
)
from modelops.stack.services import Service, base_env


def services(cfg: Settings, ports: Ports, *, interval_s: float = 1.0,
             alert_group_wait_s: float = 10.0) -> list[Service]:
    """Alert relay, Alertmanager, Pushgateway and Prometheus (in start order) for the stack ``cfg``."""
    host = cfg.bind_host
    root = cfg.home / "observability"
    url = {name: f"http://{host}:{port}" for name, port in
           (("prometheus", ports.prometheus), ("pushgateway", ports.pushgateway),
            ("alertmanager", ports.alertmanager), ("relay", ports.relay))}
    env = base_env(cfg)

    def write(name: str, document: Mapping[str, Any]) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2))

    bridge = f"http://{host}:{ports.statsd_bridge}"

    def prepare_prometheus() -> None:
        write("prometheus.yml", prometheus_config(
            gateway_metrics_urls=[f"{g}/metrics" for g in cfg.gateway_url_list],
            triton_metrics_urls=[cfg.triton_metrics_url], pushgateway_url=url["pushgateway"],
            alertmanager_url=url["alertmanager"], interval_s=interval_s,
            extra_jobs={"airflow": [f"{bridge}/metrics"]} if ports.statsd_bridge else None))

    def prepare_alertmanager() -> None:
        install_alertmanager_templates()
        write("alertmanager.yml", alertmanager_config(url["relay"], group_wait_s=alert_group_wait_s))
        (root / "alertmanager-data").mkdir(parents=True, exist_ok=True)

    statsd = [Service(name="statsd-bridge",
                      argv=(sys.executable, "-m", "modelops.observability.statsd_bridge", host, str(ports.statsd),
                            str(ports.statsd_bridge)),
                      ports=(ports.statsd_bridge,), health_url=f"{bridge}/metrics", env=env, url=bridge)
              ] if ports.statsd_bridge else []
    return [
        *statsd,
        Service(name="alert-relay",
                argv=(sys.executable, "-m", "modelops.observability.alert_relay", host, str(ports.relay)),
                ports=(ports.relay,), health_url=f"{url['relay']}/healthz", env=env, url=url["relay"]),
        Service(name="alertmanager",
                argv=(str(binary("alertmanager")), f"--config.file={root / 'alertmanager.yml'}",
                      f"--storage.path={root / 'alertmanager-data'}",
                      f"--web.listen-address={host}:{ports.alertmanager}",
                      f"--web.ui-path={binary('alertmanager').parents[1] / 'share/prometheus/alertmanager/ui'}/",
                      "--cluster.listen-address=", "--log.level=warn"),
                ports=(ports.alertmanager,), health_url=f"{url['alertmanager']}/-/ready", env=env,
                prepare=prepare_alertmanager, depends_on=("alert-relay",), url=url["alertmanager"]),
        Service(name="pushgateway",
                argv=(str(binary("pushgateway")), f"--web.listen-address={host}:{ports.pushgateway}",
                      f"--persistence.file={root / 'pushgateway.metrics'}", "--log.level=warn"),
                ports=(ports.pushgateway,), health_url=f"{url['pushgateway']}/-/ready", env=env,
                prepare=lambda: root.mkdir(parents=True, exist_ok=True), url=url["pushgateway"]),
        Service(name="prometheus",
                argv=(str(binary("prometheus")), f"--config.file={root / 'prometheus.yml'}",
                      f"--storage.tsdb.path={root / 'prometheus-data'}",
                      f"--web.listen-address={host}:{ports.prometheus}",
                      "--storage.tsdb.retention.time=15d", "--web.enable-lifecycle", "--log.level=warn"),
                ports=(ports.prometheus,), health_url=f"{url['prometheus']}/-/ready", env=env,
                prepare=prepare_prometheus, depends_on=("pushgateway", "alertmanager"), url=url["prometheus"]),
    ]


def stack_services(cfg: Settings) -> list[Service]:
    """The observability services of ``modelops stack up`` (none when :func:`active` is False).

    Scrape and evaluation every second: the canary's shortest analysis windows are 5 s.
    """
    return services(cfg, stack_ports(cfg), interval_s=1.0) if active(cfg) else []
