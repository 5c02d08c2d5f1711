"""Metrics sources of the canary analysis, behind one port.

:class:`MetricsSource` opens a window (returning a small JSON-ready marker the runner
persists, e.g. in a trigger's kwargs) and later measures canary vs stable over it.

* :class:`ScrapeSource` (embedded stack): scrapes every gateway's ``/metrics`` and
  every Triton server's metrics endpoint at both ends of the window and differences the
  counters (the Triton deltas of several servers are summed).
  A counter that went down restarted (a gateway restart; Triton resets a model's
  counters when another version is loaded beside it): its value after the reset is
  what accrued since, so the delta is the later value.
* :class:`PrometheusSource` (production): PromQL ``increase(...[window])`` over the same
  series through the HTTP API (``/api/v1/query``).

Series read (labels ``model`` and ``version``, plus ``class`` / ``code`` / ``action`` /
``le`` / ``reason``):

=========================================================  ============================
``modelops_gateway_requests_total``                        answered requests (by code)
``modelops_gateway_errors_total{class=upstream|timeout}``  gateway-side failures
``modelops_gateway_request_duration_seconds_bucket``       latency histogram (online answers)
``modelops_gateway_feedback_events_total``                 feedback by action
``ml_prediction_std``                                      rolling score std (gauge)
``nv_inference_request_failure``                           Triton failures (by reason)
=========================================================  ============================

A version's errors are ``max(gateway upstream + timeout errors, Triton failures)``: a
failure Triton reports is also an upstream error at the gateway, so adding them would
count it twice, while the larger of the two still catches failures only one side sees
(a gateway timeout; or Triton failures when the gateway's error series carry no
``version`` label). Requests are answered requests plus errors.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.promtext import Labels, SeriesKey, parse
from modelops.errors import ContractError

REQUESTS = "modelops_gateway_requests_total"
ERRORS = "modelops_gateway_errors_total"
LATENCY = "modelops_gateway_request_duration_seconds"
LATENCY_SOURCE = "online"
"""The latency gate reads only answers scored online: only the stable version has precomputed
snapshots, and its precomputed answers (no Triton call) would pull its p99 below a canary's that
scores everything online. A series without a ``source`` label (an older gateway) counts as online."""
FEEDBACK = "modelops_gateway_feedback_events_total"
STD = "ml_prediction_std"
TRITON_FAILURES = "nv_inference_request_failure"
TRITON_SUCCESS = "nv_inference_request_success"
ERROR_CLASSES = ("upstream", "timeout")

_NAMES = frozenset({REQUESTS, ERRORS, f"{LATENCY}_bucket", f"{LATENCY}_count", FEEDBACK, STD, TRITON_FAILURES,
                    TRITON_SUCCESS})
_GAUGES = frozenset({STD})
SHADOW_PREFIX = "modelops_gateway_shadow_"  # the shadow phase's series (modelops.canary.shadow_source)

Fetch = Callable[[str], str]


class MetricsSource(Protocol):
    """The canary's metrics port."""

    def open_window(self, model: str, now: float) -> dict[str, Any]:
        """Start a window; the returned marker is JSON-ready and is passed back to :meth:`measure`."""

    def measure(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                now: float) -> Measurement:
        """Canary vs stable from the window's opening to ``now``; unreadable targets are listed, not raised."""

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                        closed: Mapping[str, Any]) -> Measurement:
        """Canary vs stable between two markers (``closed`` taken later by :meth:`open_window`)."""


def http_fetch(timeout_s: float = 5.0) -> Fetch:
    """A fetcher of text over HTTP; any failure is a :class:`ConnectionError`."""

    def fetch(url: str) -> str:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                body: bytes = response.read()
                return body.decode("utf-8")
        except (OSError, urllib.error.URLError, ValueError) as exc:
            raise ConnectionError(f"{url}: {exc}") from exc

    return fetch


# ------------------------------------------------------------------ snapshots and deltas
Series = dict[SeriesKey, float]


@dataclass(frozen=True)
class Snapshot:
    """One scrape of every target: ``None`` for a target that could not be read."""

    at: float
    targets: Mapping[str, Series | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "targets": {
            url: None if series is None else [[name, dict(labels), _json_float(v)]
                                              for (name, labels), v in sorted(series.items())]
            for url, series in self.targets.items()}}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Snapshot:
        targets: dict[str, Series | None] = {}
        for url, rows in raw["targets"].items():
            targets[url] = None if rows is None else {
                (str(name), tuple(sorted((str(k), str(v)) for k, v in labels.items()))):
                    math.nan if value is None else float(value)
                for name, labels, value in rows}
        return cls(float(raw["at"]), targets)


def _json_float(value: float) -> float | None:
    return None if math.isnan(value) else value


def keep(series: Iterable[tuple[SeriesKey, float]], model: str) -> Series:
    """Only the series the canary reads, and only the model's."""
    return {key: value for key, value in series
            if (key[0] in _NAMES or key[0].startswith(SHADOW_PREFIX)) and dict(key[1]).get("model") == model}


def counter_delta(before: float | None, after: float) -> float:
    """Increase of a counter between two scrapes, treating a decrease as a restart."""
    if before is None or math.isnan(before):
        return after
    return after if after < before else after - before


def deltas(before: Series, after: Series) -> Series:
    """Counter increases of every series in ``after``; gauges keep their latest value.

    A histogram whose ``_count`` went down restarted as a whole: all its buckets take
    their later values (per-bucket reset detection could mix epochs).
    """
    reset_histograms = {labels for (name, labels), v in after.items()
                        if name.endswith("_count") and v < before.get((name, labels), -math.inf)}
    out: Series = {}
    for key, value in after.items():
        name, labels = key
        if name in _GAUGES:
            out[key] = value
        elif name.endswith("_bucket"):
            plain = tuple(p for p in labels if p[0] != "le")
            out[key] = value if plain in reset_histograms else counter_delta(before.get(key), value)
        else:
            out[key] = counter_delta(before.get(key), value)
    return out


def _matches(labels: Labels, want: Mapping[str, str]) -> bool:
    got = dict(labels)
    return all(got.get(k) == v for k, v in want.items())


def _sum(series: Series, name: str, **want: str) -> float:
    return sum(v for (n, labels), v in series.items() if n == name and _matches(labels, want))


def version_window(gateway: Sequence[Series], triton: Series | None, model: str, version: int) -> VersionWindow:
    """One version's window from per-gateway deltas and Triton's deltas (None: Triton unreadable)."""
    v = str(version)
    answered = sum(_sum(s, REQUESTS, model=model, version=v) for s in gateway)
    labelled_errors = [value for s in gateway for (n, labels), value in s.items()
                       if n == ERRORS and _matches(labels, {"model": model, "version": v})
                       and dict(labels).get("class") in ERROR_CLASSES]
    gateway_errors = sum(labelled_errors)
    triton_errors = math.nan if triton is None else _sum(triton, TRITON_FAILURES, model=model, version=v)
    if math.isnan(triton_errors):
        errors = gateway_errors if labelled_errors else math.nan
    else:
        errors = max(gateway_errors, triton_errors)
    buckets: dict[float, float] = {}
    for s in gateway:
        for (n, labels), value in s.items():
            if n == f"{LATENCY}_bucket" and _matches(labels, {"model": model, "version": v}) \
                    and dict(labels).get("source", LATENCY_SOURCE) == LATENCY_SOURCE:
                le = dict(labels).get("le", "+Inf")
                bound = math.inf if le in {"+Inf", "Inf"} else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + value
    stds = [value for s in gateway for (n, labels), value in s.items()
            if n == STD and _matches(labels, {"model": model, "version": v}) and not math.isnan(value)]
    feedback: dict[str, float] = {}
    for s in gateway:
        for (n, labels), value in s.items():
            if n == FEEDBACK and _matches(labels, {"model": model, "version": v}):
                action = dict(labels).get("action", "")
                feedback[action] = feedback.get(action, 0.0) + value
    return VersionWindow(
        requests=answered + errors if not math.isnan(errors) else math.nan,
        errors=errors,
        latency_buckets=tuple(sorted(buckets.items())),
        # the largest std over gateways: a version only counts as collapsed when every gateway sees it
        score_std=max(stds) if stds else math.nan,
        feedback=feedback,
    )


def measure_snapshots(before: Snapshot, after: Snapshot, model: str, stable_version: int, canary_version: int,
                      triton_url: str | Iterable[str]) -> Measurement:
    """Canary vs stable between two snapshots of the same targets.

    ``triton_url``: the Triton metrics URL, or those of every server; their deltas are summed
    (a server unreadable at either end is listed as unreachable and adds nothing).
    """
    tritons = {triton_url} if isinstance(triton_url, str) else set(triton_url)
    unreachable = tuple(sorted(url for url in set(before.targets) | set(after.targets)
                               if before.targets.get(url) is None or after.targets.get(url) is None))
    gateway: list[Series] = []
    triton: Series | None = None
    for url, later in after.targets.items():
        earlier = before.targets.get(url)
        if later is None or earlier is None:
            continue
        delta = deltas(earlier, later)
        if url in tritons:
            triton = delta if triton is None else _added(triton, delta)
        else:
            gateway.append(delta)
    return Measurement(before.at, after.at, version_window(gateway, triton, model, canary_version),
                       version_window(gateway, triton, model, stable_version), unreachable)


def _added(a: Series, b: Series) -> Series:
    """Two servers' deltas as one."""
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0.0) + value
    return out


class ScrapeSource:
    """Scrapes gateways and Triton (embedded stack); the window marker is the opening snapshot.

    ``triton_metrics_url``: one metrics URL, or every Triton server's (their counters are summed).
    """

    def __init__(self, gateway_metrics_urls: Sequence[str], triton_metrics_url: str | Sequence[str],
                 fetch: Fetch | None = None) -> None:
        self.gateway_urls = tuple(gateway_metrics_urls)
        urls = (triton_metrics_url,) if isinstance(triton_metrics_url, str) else tuple(triton_metrics_url)
        self.triton_urls = urls
        self.triton_url = urls[0] if urls else ""
        self.fetch = fetch or http_fetch()

    def snapshot(self, model: str, now: float) -> Snapshot:
        targets: dict[str, Series | None] = {}
        for url in (*self.gateway_urls, *self.triton_urls):
            try:
                targets[url] = keep(((s.key, s.value) for s in parse(self.fetch(url))), model)
            except (ConnectionError, ContractError):
                targets[url] = None
        return Snapshot(now, targets)

    def open_window(self, model: str, now: float) -> dict[str, Any]:
        return self.snapshot(model, now).to_dict()

    def measure(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                now: float) -> Measurement:
        before = Snapshot.from_dict(opened)
        return measure_snapshots(before, self.snapshot(model, now), model, stable_version, canary_version,
                                 self.triton_urls)

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                        closed: Mapping[str, Any]) -> Measurement:
        return measure_snapshots(Snapshot.from_dict(opened), Snapshot.from_dict(closed), model, stable_version,
                                 canary_version, self.triton_urls)


# ------------------------------------------------------------------ Prometheus HTTP API
GetJson = Callable[[str, Mapping[str, str]], Any]


def http_get_json(timeout_s: float = 10.0) -> GetJson:
    def get(url: str, params: Mapping[str, str]) -> Any:
        full = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=timeout_s) as response:
                return json.loads(response.read().decode("utf-8"))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            raise ConnectionError(f"{url}: {exc}") from exc

    return get


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _duration(seconds: float) -> str:
    """A PromQL range: whole seconds as ``30s``, anything else to the millisecond (``25400ms``)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


EXPORTERS_LOOKBACK_S = 3600
"""How long ago a target may have last exported the model's series and still count as one of its targets."""


def promql(model: str, versions: Sequence[int], range_s: float, up_selector: str = "") -> dict[str, str]:
    """The PromQL of one window, by purpose (also printed in the docs and tests).

    ``down`` lists the scrape targets that failed a scrape in the window: those matching
    ``up_selector``, or, without one, those that exported the model's gateway or Triton
    series within the last :data:`EXPORTERS_LOOKBACK_S` (a production Prometheus scrapes
    many unrelated targets, and one of them being down says nothing about the canary).
    """
    sel = f'model="{_escape(model)}",version=~"{"|".join(str(v) for v in versions)}"'
    r = f"[{_duration(range_s)}]"
    down = f"min_over_time(up{{{up_selector}}}{r}) == 0"
    if not up_selector:
        exporters = f'{{__name__=~"{REQUESTS}|{TRITON_SUCCESS}",model="{_escape(model)}"}}'
        lookback = _duration(max(range_s, EXPORTERS_LOOKBACK_S))
        down = f"{down} and on (job, instance) group by (job, instance) (present_over_time({exporters}[{lookback}]))"
    return {
        "requests": f"sum by (version) (increase({REQUESTS}{{{sel}}}{r}))",
        "errors": f'sum by (version) (increase({ERRORS}{{{sel},class=~"{"|".join(ERROR_CLASSES)}"}}{r}))',
        "triton_failures": f"sum by (version) (increase({TRITON_FAILURES}{{{sel}}}{r}))",
        "buckets": f'sum by (version, le) (increase({LATENCY}_bucket{{{sel},source!="precomputed"}}{r}))',
        "std": f"max by (version) ({STD}{{{sel}}})",
        "feedback": f"sum by (version, action) (increase({FEEDBACK}{{{sel}}}{r}))",
        "down": down,
    }


class PrometheusSource:
    """Canary vs stable from a Prometheus server that scrapes the gateways and Triton.

    ``increase()`` over the window does the counter-reset handling. The p99 comes from the
    bucket increases through :func:`modelops.canary.gates.bucket_quantile`, which is what
    ``histogram_quantile(0.99, sum by (le) (rate(..._bucket[w])))`` computes.
    """

    def __init__(self, url: str, get_json: GetJson | None = None, up_selector: str = "") -> None:
        """Point the source at a Prometheus server.

        Args:
            url: Prometheus base URL (``http://prometheus:9090``).
            get_json: HTTP GET returning parsed JSON (tests pass a fake).
            up_selector: label matchers of the gateway and Triton scrape targets (example:
                ``job=~"modelops-gateway|triton"``); a target down during the window makes
                the analysis inconclusive. Empty: the targets that exported the model's
                gateway or Triton series in the last hour (see :func:`promql`).
        """
        self.url = url.rstrip("/")
        self.up_selector = up_selector
        self.get_json = get_json or http_get_json()

    def open_window(self, model: str, now: float) -> dict[str, Any]:
        return {"at": now}

    def measure_between(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                        closed: Mapping[str, Any]) -> Measurement:
        return self.measure(model, stable_version, canary_version, opened, float(closed["at"]))

    def _query(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        body = self.get_json(f"{self.url}/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        if not isinstance(body, dict) or body.get("status") != "success":
            raise ConnectionError(f"prometheus query failed: {str(body)[:200]}")
        rows = []
        for item in body["data"]["result"]:
            value = item["value"][1]
            rows.append((dict(item["metric"]), float(value)))
        return rows

    def measure(self, model: str, stable_version: int, canary_version: int, opened: Mapping[str, Any],
                now: float) -> Measurement:
        start = float(opened["at"])
        # the window as opened, to the millisecond (a trigger fires a fraction of a second late)
        range_s = max(0.001, round(now - start, 3))
        queries = promql(model, (stable_version, canary_version), range_s, self.up_selector)
        try:
            results = {name: self._query(q, now) for name, q in queries.items()}
        except (ConnectionError, KeyError, TypeError, ValueError):
            empty = VersionWindow()
            return Measurement(start, now, empty, empty, (f"prometheus {self.url}",))
        down = tuple(sorted(labels.get("instance", "?") for labels, _ in results["down"]))

        def window(version: int) -> VersionWindow:
            v = str(version)
            rows = {name: [(labels, value) for labels, value in results[name] if labels.get("version") == v]
                    for name in queries}
            answered = sum(value for _, value in rows["requests"])
            gateway_errors = sum(value for _, value in rows["errors"])
            errors = max(gateway_errors, sum(value for _, value in rows["triton_failures"]))
            buckets = tuple(sorted((math.inf if labels.get("le") in {"+Inf", "Inf"} else float(labels["le"]), value)
                                   for labels, value in rows["buckets"]))
            stds = [value for _, value in rows["std"] if not math.isnan(value)]
            feedback = {labels.get("action", ""): value for labels, value in rows["feedback"]}
            return VersionWindow(requests=answered + errors if rows["requests"] else math.nan, errors=errors,
                                 latency_buckets=buckets, score_std=max(stds) if stds else math.nan,
                                 feedback=feedback)

        return Measurement(start, now, window(canary_version), window(stable_version), down)
