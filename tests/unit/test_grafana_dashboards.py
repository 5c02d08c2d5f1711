"""Dashboards as code: the committed JSON is what the generator writes, and every query parses.

Regenerate after a change: ``.venv/bin/python -m modelops.observability.dashboards``.
PromQL syntax is checked by promtool (each filled query as a recording rule); the
integration test ``tests/integration/test_observability.py`` runs them on a real Prometheus.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from modelops.observability.dashboards import DASHBOARDS, fill, queries, render, to_text
from tests.support.prometheus import PrometheusUnavailable, prometheus_binary

COMMITTED = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"


def test_committed_dashboards_are_the_generated_ones() -> None:
    committed = {p.name for p in COMMITTED.glob("*.json")}
    assert committed == {f"{d.uid}.json" for d in DASHBOARDS}, "stale or missing dashboard files"
    for dashboard in DASHBOARDS:
        assert (COMMITTED / f"{dashboard.uid}.json").read_text() == to_text(dashboard), (
            f"{dashboard.uid}.json differs from the generator: run python -m modelops.observability.dashboards")


def test_the_four_dashboards_and_their_panels() -> None:
    titles = {d.uid: [p.title for p in d.panels] for d in DASHBOARDS}
    assert set(titles) == {"modelops-serving-slo", "modelops-releases", "modelops-drift-radar", "modelops-platform"}
    for dashboard in DASHBOARDS:
        model = render(dashboard)
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids)) and all(p["targets"] for p in model["panels"])
        for panel in model["panels"]:  # no overlap in a 24-column grid
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
        used = {v for _, q in queries(dashboard) for v in ("$model", "$version") if v in q}
        assert used <= {f"${v['name']}" for v in model["templating"]["list"]}, f"{dashboard.uid}: unknown variable"
    assert json.loads(to_text(DASHBOARDS[0]))["uid"] == "modelops-serving-slo"


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    try:
        promtool = prometheus_binary().parent / "promtool"
    except PrometheusUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"promtool unavailable: {exc}")
    rules = [{"record": f"dashboard:query_{i}", "expr": fill(expr, "ranker")}
             for i, (_, expr) in enumerate(q for d in DASHBOARDS for q in queries(d))]
    assert len(rules) >= 25
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    done = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
