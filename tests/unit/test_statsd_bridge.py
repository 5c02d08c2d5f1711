"""The StatsD bridge: Airflow's InfluxDB-tagged lines become Prometheus series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from modelops.observability.statsd_bridge import Sample, Store, parse


def test_parse_counters_gauges_timers_tags_and_rates() -> None:
    assert parse("airflow.ti_failures,dag_id=nightly_drift,task_id=publish:1|c") == Sample(
        "airflow_ti_failures", (("dag_id", "nightly_drift"), ("task_id", "publish")), "counter", 1.0)
    assert parse("airflow.ti_successes:1|c|@0.25").value == 4.0  # sampled: scaled up
    assert parse("airflow.executor.open_slots:30|g") == Sample("airflow_executor_open_slots", (), "gauge", 30.0)
    assert parse("airflow.pool.queued_slots:-2|g").delta is True
    timer = parse("airflow.dagrun.duration.success,dag_id=d:1500|ms")
    assert (timer.kind, timer.value, timer.labels) == ("timer", 1500.0, (("dag_id", "d"),))


@pytest.mark.parametrize(("line", "why"), [
    ("no value here", "name:value"), ("airflow.x:1|z", "type"), ("airflow.x:1|c|@2", "sample rate"),
    ("airflow.x,broken:1|c", "key=value"), ("airflow.x:abc|c", "could not convert"),
])
def test_parse_refuses_what_is_not_statsd(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse(line)


def test_store_exposes_what_airflow_sent() -> None:
    store = Store()
    store.feed("airflow.ti_failures,dag_id=d,task_id=t:1|c\nairflow.ti_failures,dag_id=d,task_id=t:1|c\n"
               "airflow.executor.open_slots:30|g\nairflow.executor.open_slots:-5|g\n"
               "airflow.dagrun.duration.success,dag_id=d:1500|ms\nairflow.dagrun.duration.success,dag_id=d:500|ms\n"
               "garbage\n")
    registry = CollectorRegistry()
    registry.register(store)
    text = generate_latest(registry).decode()
    assert 'airflow_ti_failures_total{dag_id="d",task_id="t"} 2.0' in text
    assert "airflow_executor_open_slots 25.0" in text
    assert 'airflow_dagrun_duration_success_seconds_sum{dag_id="d"} 2.0' in text
    assert 'airflow_dagrun_duration_success_seconds_count{dag_id="d"} 2.0' in text
    assert "modelops_statsd_bridge_malformed_total 1.0" in text
