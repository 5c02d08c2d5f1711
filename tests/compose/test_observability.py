"""What Prometheus, the Pushgateway and Alertmanager of the running topology saw of the release story.

Runs after ``test_release_story.py`` in the same session, from a container on the compose network
(docker/compose-test.sh): the story's model, its promoted version and both batch DAG runs are the
subject. Prometheus's own request counter is read first, before these checks send any query.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from modelops.canary.sources import promql
from modelops.config import PROJECT_ROOT, Settings
from modelops.objectstore import ObjectStore
from modelops.observability.pushed import DRIFT_JOB, FEEDBACK_JOB
from tests.compose.test_release_story import MODEL, STORY, _checkpoint

pytestmark = pytest.mark.compose

#: The scrape jobs of prometheus/prometheus.yml, each with its compose targets.
JOBS = {"pushgateway": {"pushgateway:9091"}, "airflow": {"statsd-bridge:9102"},
        "prometheus": {"localhost:9090"}, "alertmanager": {"alertmanager:9093"}}
#: The gateway and triton jobs' targets: every replica of the service (dns_sd_configs), three of each in this test.
GATEWAY_REPLICAS = TRITON_REPLICAS = 3


@pytest.fixture(scope="module")
def prometheus(compose_settings: Settings) -> str:
    assert STORY.get("stable_tv"), "the release story did not run (tests/compose/test_release_story.py)"
    assert compose_settings.prometheus_url, "MODELOPS_PROMETHEUS_URL is not set in the checks' env"
    return compose_settings.prometheus_url.rstrip("/")


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    body = requests.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", f"{expr}: {body}"
    return list(body["data"]["result"])


def _query_api_calls(prometheus: str) -> float:
    """``/api/v1/query`` calls Prometheus answered, from its own /metrics (not a query: it does not count)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"{prometheus}/metrics", timeout=10).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name == "prometheus_http_requests" for sample in family.samples
               if sample.name == "prometheus_http_requests_total" and sample.labels.get("handler") == "/api/v1/query")


def test_the_canary_read_its_windows_through_promql(prometheus: str, compose_settings: Settings,
                                                    object_store: ObjectStore) -> None:
    """Nothing else in the topology queries Prometheus (Grafana is not run here): the calls are the canary's."""
    calls = _query_api_calls(prometheus)
    promoted = _checkpoint(object_store, STORY["stable_tv"])
    per_window = len(promql(MODEL, (1, 2), 5.0, compose_settings.prometheus_up_selector))
    # Steps 50,100: one analysed step, which an error-free canary passes in one window at the 0.5 % floor.
    assert promoted["phase"] == "promoted" and promoted["analyses"] >= 1, promoted
    # At least the promoted release's windows (the rolled-back one added its own).
    assert calls >= per_window * promoted["analyses"], (calls, promoted["analyses"])


def test_every_scrape_target_is_up(prometheus: str) -> None:
    deadline = time.monotonic() + 45.0  # a scrape may time out on a loaded host: the next one counts
    from tests.compose.engine import Engine

    # Prometheus finds the replicas on the network it shares with them (serving); this container is on every
    # network, so its own DNS answers may be other addresses of the same containers: ask the engine.
    engine = Engine.from_env()
    replicas = {f"{engine.address(c, 'serving')}:8400" for c in engine.containers("gateway")}
    assert len(replicas) == GATEWAY_REPLICAS, replicas
    tritons = {f"{engine.address(c, 'serving')}:8002" for c in engine.containers("triton")}
    assert len(tritons) == TRITON_REPLICAS, tritons
    down: list[str] = []
    while time.monotonic() < deadline:
        targets = requests.get(f"{prometheus}/api/v1/targets", params={"state": "active"},
                               timeout=10).json()["data"]["activeTargets"]
        seen: dict[str, set[str]] = {}
        for target in targets:
            seen.setdefault(target["labels"]["job"], set()).add(target["labels"]["instance"])
        assert seen == {**JOBS, "gateway": replicas, "triton": tritons}
        down = [f"{t['labels']['job']} {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}"
                for t in targets if t["health"] != "up"]
        if not down:
            return
        time.sleep(2)
    raise AssertionError("scrape targets not up:\n" + "\n".join(down))


def _pushed_groups(pushgateway: str) -> list[dict[str, Any]]:
    body = requests.get(f"{pushgateway}/api/v1/metrics", timeout=10).json()
    assert body["status"] == "success", body
    return list(body["data"])


def _value(group: dict[str, Any], name: str) -> float:
    (metric,) = group[name]["metrics"]
    return float(metric["value"])


def test_the_pushgateway_holds_both_batch_jobs_results(prometheus: str, compose_settings: Settings) -> None:
    version = str(STORY["stable_tv"])
    groups = {(g["labels"]["job"], g["labels"].get("model"), g["labels"].get("version")): g
              for g in _pushed_groups(compose_settings.pushgateway_url.rstrip("/"))}
    feedback = groups.get((FEEDBACK_JOB, MODEL, version))
    drift = groups.get((DRIFT_JOB, MODEL, version))
    assert feedback and drift, sorted(groups)
    assert _value(feedback, "modelops_feedback_impressions") >= 290
    assert 0 < _value(feedback, "modelops_feedback_ctr") < 1
    assert _value(drift, "modelops_drift_detected") == 1.0  # the second run saw the shifted features
    assert _value(drift, "modelops_drift_score") > 0
    # ... and Prometheus scrapes them with the job they were pushed with (honor_labels).
    selector = f'model="{MODEL}",version="{version}"'
    deadline = time.monotonic() + 30.0
    while not (_query(prometheus, f'modelops_drift_detected{{{selector},job="{DRIFT_JOB}"}} == 1')
               and _query(prometheus, f'modelops_feedback_ctr{{{selector},job="{FEEDBACK_JOB}"}}')):
        assert time.monotonic() < deadline, "Prometheus never scraped the pushed batch results"
        time.sleep(2)


def _alert_names() -> set[str]:
    names = set()
    for path in sorted(Path(PROJECT_ROOT, "prometheus", "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {rule["alert"] for rule in group["rules"] if "alert" in rule}
    return names


def test_the_alert_rules_are_loaded_and_alertmanager_is_known(prometheus: str) -> None:
    expected = _alert_names()
    assert "ModelopsPredictionCollapse" in expected  # the repository's rules are mounted into this container
    groups = requests.get(f"{prometheus}/api/v1/rules", params={"type": "alert"},
                          timeout=10).json()["data"]["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(loaded) == expected
    broken = {name: rule.get("lastError") for name, rule in loaded.items() if rule["health"] == "err"}
    assert broken == {}
    managers = requests.get(f"{prometheus}/api/v1/alertmanagers", timeout=10).json()["data"]
    assert [m["url"] for m in managers["activeAlertmanagers"]] == ["http://alertmanager:9093/api/v2/alerts"]
