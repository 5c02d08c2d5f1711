"""Prometheus, Pushgateway, Alertmanager and the alert relay: their configuration and binaries.

The binaries are Debian 12's packages unpacked under ``.cache/prometheus/root`` by
``make prometheus`` (never installed: their maintainer scripts would start services on
every interface); ``MODELOPS_PROMETHEUS_BIN`` names another prometheus, and the others
are looked up beside it. Everything binds loopback (Alertmanager's cluster listener is
switched off: it would bind 0.0.0.0:9094).

:func:`prometheus_config` and :func:`alertmanager_config` render the configuration (JSON is
YAML); the rules are the repository's ``prometheus/rules/*.yml``, the same files compose
mounts. :mod:`modelops.stack.observability` turns them into services the embedded stack's
launcher starts and stops like the rest of the stack.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelops.config import PROJECT_ROOT, Settings, settings
from modelops.errors import StackError

RULES_DIR = PROJECT_ROOT / "prometheus" / "rules"
BIN_DIR = PROJECT_ROOT / ".cache" / "prometheus" / "root" / "usr" / "bin"
BINARIES = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
            "alertmanager": "prometheus-alertmanager", "promtool": "promtool", "amtool": "amtool"}
GATEWAY_JOB = "modelops-gateway"
TRITON_JOB = "triton"
PUSHGATEWAY_JOB = "pushgateway"


def binary(name: str) -> Path:
    """The unpacked Debian binary ``name`` (a key of :data:`BINARIES`).

    Raises:
        StackError: not unpacked yet (the message says how to get it).
    """
    explicit = settings().prometheus_bin
    base = Path(explicit).parent if explicit else BIN_DIR
    path = base / BINARIES[name]
    if not os.access(path, os.X_OK):
        raise StackError(f"{name}: no executable {path} (run `make prometheus`: it unpacks Debian's prometheus, "
                         "prometheus-pushgateway and prometheus-alertmanager there)")
    return path


#: Debian builds Alertmanager with its default notification templates at this fixed path (not a flag).
DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager")


def install_alertmanager_templates(target: Path = DEBIAN_TEMPLATES) -> None:
    """Copy the unpacked package's notification templates to where Debian's Alertmanager reads them.

    Without ``default.tmpl`` there, Debian's build loads no configuration and never gets ready.
    Only the two template files are copied (the package is still not installed).

    Raises:
        StackError: the templates are missing from the cache or the directory is not writable.
    """
    source = binary("alertmanager").parents[1] / "share" / "prometheus" / "alertmanager"
    for name in ("default.tmpl", "email.tmpl"):
        wanted = source / name
        installed = target / name
        if installed.exists() and installed.read_bytes() == wanted.read_bytes():
            continue
        try:
            installed.parent.mkdir(parents=True, exist_ok=True)
            installed.write_bytes(wanted.read_bytes())
        except OSError as exc:
            raise StackError(f"alertmanager: cannot put {name} into {target} ({exc}); Debian's build reads its "
                             f"templates only there: copy {source}/*.tmpl there as root") from exc


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the observability services (``statsd``: UDP; 0: no StatsD bridge)."""

    prometheus: int
    pushgateway: int
    alertmanager: int
    relay: int
    statsd: int = 0
    statsd_bridge: int = 0


def _targets(urls: Sequence[str]) -> tuple[str, list[str]]:
    paths = {urllib.parse.urlsplit(u).path or "/metrics" for u in urls}
    if len(paths) != 1:
        raise ValueError(f"one metrics path per job, got {sorted(paths)} for {list(urls)}")
    return paths.pop(), [urllib.parse.urlsplit(u).netloc for u in urls]


#: Anyone who reaches the Pushgateway can push: the series the canary decides on (the gateways' and
#: Triton's own) are never taken from it.
PUSHED_LIVE_SERIES_DROP = {"source_labels": ["__name__"], "regex": "modelops_gateway_.*|nv_.*|ml_prediction_.*",
                           "action": "drop"}


def _job(name: str, urls: Sequence[str], **extra: Any) -> dict[str, Any]:
    path, hosts = _targets(urls)
    return {"job_name": name, "metrics_path": path, "static_configs": [{"targets": hosts}], **extra}


def prometheus_config(*, gateway_metrics_urls: Sequence[str], triton_metrics_urls: Sequence[str],
                      pushgateway_url: str, alertmanager_url: str, interval_s: float,
                      rule_files: Sequence[Path] | None = None,
                      extra_jobs: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """A prometheus.yml: gateways, Tritons, the Pushgateway (labels as pushed), Alertmanager, itself.

    ``interval_s`` is both the scrape and the rule evaluation interval: size it for the
    canary's analysis windows (at least ~5 samples per window; the tests use 1 s for 5 s windows).
    """
    interval = f"{round(interval_s * 1000)}ms"
    files = [str(p) for p in (rule_files if rule_files is not None else sorted(RULES_DIR.glob("*.yml")))]
    jobs = [_job(GATEWAY_JOB, gateway_metrics_urls), _job(TRITON_JOB, triton_metrics_urls),
            _job(PUSHGATEWAY_JOB, [f"{pushgateway_url}/metrics"], honor_labels=True,
                 metric_relabel_configs=[PUSHED_LIVE_SERIES_DROP]),
            _job("alertmanager", [f"{alertmanager_url}/metrics"])]
    jobs += [_job(name, urls) for name, urls in (extra_jobs or {}).items()]
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval,
                       "external_labels": {"platform": "modelops"}},
            "rule_files": files,
            "alerting": {"alertmanagers": [{"static_configs": [
                {"targets": [urllib.parse.urlsplit(alertmanager_url).netloc]}]}]},
            "scrape_configs": jobs}


def alertmanager_config(relay_url: str, *, group_wait_s: float = 10.0, repeat_interval: str = "4h") -> dict[str, Any]:
    """Every alert to the relay (``POST <relay_url>/alerts``), resolved ones too, grouped per subject."""
    return {"route": {"receiver": "modelops-notify", "group_by": ["alertname", "model", "version", "instance"],
                      "group_wait": f"{round(group_wait_s * 1000)}ms", "group_interval": "1m",
                      "repeat_interval": repeat_interval},
            "receivers": [{"name": "modelops-notify",
                           "webhook_configs": [{"url": f"{relay_url}/alerts", "send_resolved": True}]}]}


def active(cfg: Settings) -> bool:
    """Whether the embedded stack runs the observability services (MODELOPS_OBSERVABILITY).

    ``auto``: when Debian's binaries are unpacked and Alertmanager's templates are (or can be put)
    where Debian's build reads them (:func:`install_alertmanager_templates`).
    """
    if cfg.observability != "auto":
        return cfg.observability == "on"
    try:
        for name in ("prometheus", "pushgateway", "alertmanager"):
            binary(name)
    except StackError:
        return False
    return _templates_installable()


def _templates_installable(target: Path = DEBIAN_TEMPLATES) -> bool:
    """Debian's Alertmanager templates are in place, or this user may put them there (auto needs one)."""
    if (target / "default.tmpl").exists():
        return True
    existing = next(p for p in (target, *target.parents) if p.exists())
    return os.access(existing, os.W_OK)


def stack_ports(cfg: Settings) -> Ports:
    return Ports(cfg.prometheus_port, cfg.pushgateway_port, cfg.alertmanager_port, cfg.alert_relay_port,
                 cfg.statsd_port, cfg.statsd_bridge_port)


def airflow_statsd_env(cfg: Settings) -> dict[str, str]:
    """Airflow's ``[metrics]`` settings that send its StatsD (InfluxDB tags) to the bridge; {} when not running."""
    if not active(cfg):
        return {}
    return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": cfg.bind_host,
            "AIRFLOW__METRICS__STATSD_PORT": str(cfg.statsd_port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}


def pushgateway_endpoint(cfg: Settings) -> str:
    """MODELOPS_PUSHGATEWAY_URL, else the embedded Pushgateway when it runs, else '' (nothing pushed)."""
    if cfg.pushgateway_url:
        return cfg.pushgateway_url
    return f"http://{cfg.bind_host}:{cfg.pushgateway_port}" if active(cfg) else ""


def running_prometheus_url(cfg: Settings) -> str:
    """The embedded Prometheus's URL while the stack's process runs, else ''."""
    from modelops import process

    pid_file = cfg.home / "run" / "prometheus.pid"
    return f"http://{cfg.bind_host}:{cfg.prometheus_port}" if process.live_pid(pid_file) is not None else ""

