"""Rules and alerts as code: promtool checks them, unit-tests every alert, and they use real metric names.

``promtool`` comes with Debian's prometheus package, unpacked under ``.cache/prometheus``
(``make prometheus``; :func:`tests.support.prometheus.prometheus_binary` fetches it when
missing). Without it the tests fail when ``CI`` is set and are skipped otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelops.gateway.app import Gateway
from modelops.gateway.metrics import HistogramFamily
from modelops.observability.pushed import PUSHED_METRICS
from tests.support.prometheus import PrometheusUnavailable, prometheus_binary

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
ALERT_TESTS = PROM_DIR / "tests" / "alerts_test.yml"
#: Triton's series the rules read (Triton 2.51's metrics port).
TRITON_METRICS = frozenset({"nv_inference_count", "nv_inference_request_success", "nv_inference_request_failure",
                            "nv_inference_queue_duration_us", "nv_inference_request_duration_us"})


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        binary = prometheus_binary().parent / "promtool"
    except PrometheusUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"promtool unavailable: {exc}")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} missing beside the prometheus binary (Debian's package ships both)")
    return binary


def _run(promtool: Path, *args: str) -> str:
    done = subprocess.run([str(promtool), *args], cwd=PROM_DIR, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _rules() -> list[dict[str, Any]]:
    return [rule for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def test_rule_files_pass_promtool_check_rules(promtool: Path) -> None:
    assert {p.name for p in RULE_FILES} >= {"recording.yml", "slo.yml", "alerts.yml"}
    out = _run(promtool, "check", "rules", *(str(p) for p in RULE_FILES))
    assert out.count("SUCCESS") == len(RULE_FILES)


def test_every_alert_passes_its_promtool_unit_tests(promtool: Path) -> None:
    assert "SUCCESS" in _run(promtool, "test", "rules", str(ALERT_TESTS))


def test_compose_prometheus_config_passes_promtool_check_config(promtool: Path) -> None:
    out = _run(promtool, "check", "config", str(PROM_DIR / "prometheus.yml"))
    assert f"{len(RULE_FILES)} rule files found" in out


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    cases = [case for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
             for case in test.get("alert_rule_test", [])]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert len(alerts) >= 11
    assert alerts - fires == set(), "alerts without a firing unit test"
    assert alerts - quiet == set(), "alerts without a not-firing unit test"
    for rule in _rules():
        if "alert" in rule:
            assert rule["annotations"].get("runbook"), f"{rule['alert']}: no runbook line"
            assert rule["labels"].get("severity") in {"page", "ticket"}, f"{rule['alert']}: severity page|ticket"


def _gateway_metric_names() -> set[str]:
    gateway = Gateway.__new__(Gateway)
    gateway._init_metrics()  # only builds the registry: the families are the exported names
    names: set[str] = set()
    for family in gateway.registry._families:
        suffixes = ("_bucket", "_count", "_sum") if isinstance(family, HistogramFamily) else ("",)
        names.update(family.name + suffix for suffix in suffixes)
    return names


def test_rules_read_only_metrics_that_are_really_exported() -> None:
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    known = _gateway_metric_names() | PUSHED_METRICS | TRITON_METRICS | recorded | {"up"}
    used: set[str] = set()
    for rule in _rules():
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # label values are not names
        expr = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
        used.update(n for n in re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr)
                    if "_" in n and not n.endswith(("_over_time", "_quantile")) and n not in {"group_left"})
    assert used, "no metric names found in the rules"
    assert used - known == set(), "rules read series nobody exports"
    assert {"modelops_gateway_requests_total", "ml_prediction_collapse", "modelops_drift_detected",
            "modelops_release_phase", "nv_inference_count"} <= used
