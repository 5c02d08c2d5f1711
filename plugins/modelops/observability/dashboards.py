"""The Grafana dashboards as code: four dashboards built from Python data, written as JSON.

``python -m modelops.observability.dashboards [OUT_DIR]`` (default ``grafana/dashboards``)
rewrites ``<uid>.json`` for each; a test regenerates them and compares with the committed
files, and an integration test runs every panel's PromQL (template variables filled) on a
real Prometheus. Plain JSON (Grafana dashboard schema 39, Grafana 10/11) instead of a
builder library: the JSON is what Grafana provisions and reviewers read, and it needs no
pinned SDK whose versions carry a timestamp epoch.

Every query reads a recording rule of ``prometheus/rules`` or a series the gateway,
Triton, the Pushgateway groups (:mod:`modelops.observability.pushed`) or the Airflow
StatsD bridge export. ``$model`` and ``$version`` are the template variables.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
"""The provisioned Prometheus datasource (grafana/provisioning/datasources/prometheus.yml)."""

SCHEMA_VERSION = 39
M = 'model="$model"'
MV = 'model="$model",version=~"$version"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    thresholds: tuple[tuple[float, str], ...] = ()
    width: int = 12


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[str, ...] = ("model", "version")
    annotations: tuple[tuple[str, Query], ...] = field(default_factory=tuple)


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


SERVING_SLO = Dashboard(
    uid="modelops-serving-slo", title="modelops / Serving SLO",
    description="Availability 99.95 % over 30 days and 95 % of predictions under 50 ms, per model version.",
    panels=(
        Panel("Success ratio by version (SLO 99.95 %)",
              (_q(f"model_version:modelops_gateway_success:ratio_rate5m{{{MV}}}", "v{{version}}"),),
              unit="percentunit", thresholds=((0.0, "red"), (0.9995, "green"))),
        Panel("Availability error budget left (30 days)",
              (_q(f"model:modelops_slo_availability_error_budget:remaining30d{{{M}}}", "{{model}}"),),
              unit="percentunit", kind="stat", width=6, thresholds=((0.0, "red"), (0.25, "orange"), (0.5, "green"))),
        Panel("Latency error budget left (30 days)",
              (_q(f"model:modelops_slo_latency_error_budget:remaining30d{{{M}}}", "{{model}}"),),
              unit="percentunit", kind="stat", width=6, thresholds=((0.0, "red"), (0.25, "orange"), (0.5, "green"))),
        Panel("Latency P50 / P95 / P99 by version (SLO: P95 < 50 ms)", (
            _q(f"model_version:modelops_gateway_request_duration_seconds:p50_5m{{{MV}}}", "P50 v{{version}}"),
            _q(f"model_version:modelops_gateway_request_duration_seconds:p95_5m{{{MV}}}", "P95 v{{version}}"),
            _q(f"model_version:modelops_gateway_request_duration_seconds:p99_5m{{{MV}}}", "P99 v{{version}}"),
        ), unit="s", thresholds=((0.0, "green"), (0.05, "red"))),
        Panel("Error budget burn rate (1 h window; 14.4 pages)", (
            _q(f"model:modelops_slo_availability_errors:ratio_rate1h{{{M}}} / 0.0005", "availability"),
            _q(f"model:modelops_slo_latency_slow:ratio_rate1h{{{M}}} / 0.05", "latency"),
        ), thresholds=((0.0, "green"), (6.0, "orange"), (14.4, "red"))),
        Panel("Predictions per second by version",
              (_q(f"model_version:modelops_gateway_answered:rate5m{{{MV}}}", "answered v{{version}}"),),
              unit="reqps"),
        Panel("Failed predictions by class (contract: the client's, not in the SLO)",
              (_q(f"sum by (version, class) (rate(modelops_gateway_errors_total{{{M}}}[5m]))",
                  "{{class}} v{{version}}"),),
              unit="reqps"),
    ),
)

RELEASES = Dashboard(
    uid="modelops-releases", title="modelops / Releases",
    description="Canary releases: traffic share, canary vs stable health, release phase and decisions.",
    panels=(
        Panel("Traffic share by version (served)", (
            _q(f"sum by (version) (rate(modelops_gateway_requests_total{{{M}}}[1m])) / ignoring (version) "
               f"group_left sum(rate(modelops_gateway_requests_total{{{M}}}[1m]))", "v{{version}}"),
        ), unit="percentunit"),
        Panel("Routed weight by version (routes document)",
              (_q(f"max by (version, variant) (modelops_gateway_route_weight{{{M}}})", "{{variant}} v{{version}}"),),
              unit="percentunit"),
        Panel("Error rate by version (canary vs stable)",
              (_q(f"1 - model_version:modelops_gateway_success:ratio_rate5m{{{MV}}}", "v{{version}}"),),
              unit="percentunit"),
        Panel("P99 latency by version",
              (_q(f"model_version:modelops_gateway_request_duration_seconds:p99_5m{{{MV}}}", "v{{version}}"),),
              unit="s", thresholds=((0.0, "green"), (0.05, "red"))),
        Panel("Score std by version (collapse below 0.005)",
              (_q(f"model_version:ml_prediction_std:min{{{MV}}}", "v{{version}}"),),
              thresholds=((0.0, "red"), (0.005, "green"))),
        Panel("CTR by version (feedback_join, daily)",
              (_q(f"modelops_feedback_ctr{{{MV}}}", "CTR v{{version}}"),
               _q(f"modelops_feedback_cvr{{{MV}}}", "CVR v{{version}}")),
              unit="percentunit"),
        Panel("Realized performance by version and day (outcome job: a labelled model's AUC, log loss, RMSE...)",
              (_q(f"max by (version, day, metric) (modelops_outcome_performance{{{MV}}})",
                  "{{metric}} v{{version}} {{day}}"),),
              kind="table", description="Computed on the predictions whose label has arrived; late labels move "
                                        "earlier days on the next run."),
        Panel("Label coverage by version and day (outcome job: labels arrived / predictions)",
              (_q(f"max by (version, day) (modelops_outcome_label_coverage{{{MV}}})", "v{{version}} {{day}}"),),
              unit="percentunit", kind="table"),
        Panel("Outcome action rates by version and day (outcome job: each declared action / predictions)",
              (_q(f"max by (version, day, action) (modelops_outcome_action_rate{{{MV}}})",
                  "{{action}} v{{version}} {{day}}"),),
              unit="percentunit", kind="table"),
        Panel("Release phase (latest release of the model)",
              (_q(f"max by (version, phase) (modelops_release_phase{{{M}}})", "v{{version}} {{phase}}"),),
              kind="table", width=24),
    ),
    annotations=(
        ("Routes changes (release steps, promotion, rollback)",
         _q(f"sum by (model) (changes(modelops_gateway_routes_revision{{{M}}}[2m])) > 0", "{{model}}")),
    ),
)

DRIFT_RADAR = Dashboard(
    uid="modelops-drift-radar", title="modelops / Drift radar",
    description="Nightly drift per model version, the features that moved, live score statistics and feature age.",
    panels=(
        Panel("Drift score per night (largest weighted feature score)",
              (_q(f"modelops_drift_score{{{MV}}}", "v{{version}}"),
               _q(f"modelops_drift_prediction_ks{{{MV}}}", "prediction KS v{{version}}")),
              thresholds=((0.0, "green"), (0.1, "red"))),
        Panel("Drift detected", (_q(f"modelops_drift_detected{{{MV}}}", "v{{version}}"),), kind="stat", width=6,
              thresholds=((0.0, "green"), (1.0, "red"))),
        Panel("Rows compared", (_q(f"modelops_drift_rows{{{MV}}}", "{{side}} v{{version}}"),), kind="stat", width=6),
        Panel("Top weighted features",
              (_q(f"topk(10, modelops_drift_feature_weighted_score{{{MV}}})", "{{feature}} v{{version}}"),),
              kind="bargauge"),
        Panel("Score std / max by version (live, rolling window)", (
            _q(f"model_version:ml_prediction_std:min{{{MV}}}", "std v{{version}}"),
            _q(f"model_version:ml_prediction_max:max{{{MV}}}", "max v{{version}}"),
        )),
        Panel("Feature snapshot age by gateway (alert above 26 h)",
              (_q("max by (instance) (modelops_gateway_feature_snapshot_age_seconds)", "{{instance}}"),),
              unit="s", thresholds=((0.0, "green"), (93600.0, "red"))),
    ),
)

PLATFORM = Dashboard(
    uid="modelops-platform", title="modelops / Platform",
    description="Gateway spools, Triton queues, instance counts and Airflow task failures.",
    variables=(),
    panels=(
        Panel("Event-log spool backlog by gateway",
              (_q("modelops_gateway_spool_backlog_bytes", "{{instance}}"),), unit="bytes"),
        Panel("Spool segments waiting / failed upload passes", (
            _q("modelops_gateway_spool_backlog_segments", "segments {{instance}}"),
            _q("modelops_gateway_spool_upload_failures", "failed passes {{instance}}"),
        )),
        Panel("Triton queue time per request", (
            _q("sum by (model, version) (rate(nv_inference_queue_duration_us[5m])) / 1e6 / "
               "sum by (model, version) (rate(nv_inference_count[5m]))", "{{model}} v{{version}}"),
        ), unit="s"),
        Panel("Triton pending requests",
              (_q("sum by (model, version) (nv_inference_pending_request_count)", "{{model}} v{{version}}"),)),
        Panel("Instances up by job", (_q("count by (job) (up == 1)", "{{job}}"),), kind="stat"),
        Panel("Airflow task failures (last hour, by DAG)",
              (_q("sum by (dag_id) (increase(airflow_ti_failures_total[1h]))", "{{dag_id}}"),
               _q("sum by (dag_id) (increase(airflow_ti_successes_total[1h]))", "{{dag_id}} successes")),
              description="Airflow emits StatsD (InfluxDB tags); the StatsD bridge exports it to Prometheus."),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (SERVING_SLO, RELEASES, DRIFT_RADAR, PLATFORM)


def _variable(name: str) -> dict[str, Any]:
    query = ("label_values(modelops_gateway_requests_total, model)" if name == "model"
             else 'label_values(modelops_gateway_requests_total{model="$model"}, version)')
    return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"var-{name}"}, "refresh": 2, "sort": 3,
            "multi": name == "version", "includeAll": name == "version",
            **({"allValue": ".*"} if name == "version" else {})}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"color": color, "value": None if i == 0 else value} for i, (value, color) in enumerate(panel.thresholds)]}
    out: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [{"datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend or "__auto",
                     "refId": chr(ord("A") + i), **({"instant": True, "format": "table"} if panel.kind == "table"
                                                    else {})}
                    for i, q in enumerate(panel.queries)],
    }
    if panel.description:
        out["description"] = panel.description
    return out


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana dashboard JSON model of ``dashboard`` (panels laid out left to right, 24 wide)."""
    panels, x, y = [], 0, 0
    for panel_id, panel in enumerate(dashboard.panels, start=1):
        if x + panel.width > 24:
            x, y = 0, y + 8
        panels.append(_panel(panel, panel_id, x, y))
        x += panel.width
    annotations = [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                    "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                    "type": "dashboard"}]
    annotations += [{"name": name, "datasource": DATASOURCE, "enable": True, "iconColor": "orange",
                     "expr": q.expr, "titleFormat": q.legend, "step": "15s"} for name, q in dashboard.annotations]
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": ["modelops"], "timezone": "utc", "editable": False, "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [_variable(v) for v in dashboard.variables]},
        "annotations": {"list": annotations},
        "panels": panels,
    }


def to_text(dashboard: Dashboard) -> str:
    return json.dumps(render(dashboard), indent=2, sort_keys=True) + "\n"


def queries(dashboard: Dashboard) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and annotation, template variables unfilled."""
    out = [(f"{dashboard.uid}: {p.title}", q.expr) for p in dashboard.panels for q in p.queries]
    out += [(f"{dashboard.uid}: annotation {name}", q.expr) for name, q in dashboard.annotations]
    return out


def fill(expr: str, model: str, version: str = ".*") -> str:
    """``expr`` with ``$model`` and ``$version`` replaced as Grafana would (version: a regex)."""
    return expr.replace("$model", model).replace("$version", version)


def write_all(out_dir: Path, dashboards: Sequence[Dashboard] = DASHBOARDS) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dashboard in dashboards:
        path = out_dir / f"{dashboard.uid}.json"
        path.write_text(to_text(dashboard))
        written.append(path)
    return written


if __name__ == "__main__":  # python -m modelops.observability.dashboards [OUT_DIR]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3] / "grafana" / "dashboards"
    for written_path in write_all(target):
        print(written_path)
