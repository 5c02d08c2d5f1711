"""Which metrics source the canary reads: the Prometheus HTTP API, or scraping the gateways and Triton.

Both the operator (at each window's end) and the trigger (looking inside a window, closing it)
ask :func:`metrics_source`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def metrics_source(cfg: Any, gateway_urls: Sequence[str]) -> Any:
    """The configured metrics source: the Prometheus HTTP API, or scraping the gateways and Triton.

    ``auto`` (the default) reads PromQL wherever Prometheus runs: MODELOPS_PROMETHEUS_URL, or
    the embedded stack's own Prometheus while its process is alive; else it scrapes.
    """
    from modelops.canary.sources import PrometheusSource, ScrapeSource
    from modelops.observability.prometheus import running_prometheus_url

    url = cfg.prometheus_url
    if cfg.canary_metrics == "auto" and not url:
        url = running_prometheus_url(cfg)
    if cfg.canary_metrics == "prometheus" or (cfg.canary_metrics == "auto" and url):
        return PrometheusSource(url, up_selector=cfg.prometheus_up_selector)
    return ScrapeSource([f"{u.rstrip('/')}/metrics" for u in gateway_urls], cfg.triton_metrics_url_list)
