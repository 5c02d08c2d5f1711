"""Which day a batch run covers and how long it waits for late feedback."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from modelops.jobs.schedule import run_day, wait_until


def test_scheduled_run_covers_its_interval_and_waits_the_window_after_it() -> None:
    start = datetime(2026, 11, 28, tzinfo=UTC)
    context = {"data_interval_start": start, "data_interval_end": datetime(2026, 11, 29, tzinfo=UTC),
               "dag_run": SimpleNamespace(run_after=datetime(2026, 11, 29, tzinfo=UTC))}
    assert run_day(context) == "2026-11-28"
    assert wait_until("2026-11-28", datetime(2026, 11, 29, tzinfo=UTC), 24) == datetime(2026, 11, 30, tzinfo=UTC)


def test_manual_run_covers_the_trigger_day_up_to_the_trigger_time() -> None:
    run_after = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)
    context = {"data_interval_start": None, "dag_run": SimpleNamespace(run_after=run_after)}
    assert run_day(context) == "2026-11-29"
    assert wait_until("2026-11-29", run_after, 0.5) == datetime(2026, 11, 29, 15, 0, tzinfo=UTC)


def test_the_form_can_name_a_past_day() -> None:
    context = {"data_interval_start": None, "dag_run": SimpleNamespace(run_after=datetime(2026, 11, 29, tzinfo=UTC))}
    assert run_day(context, "2026-11-20") == "2026-11-20"
    assert wait_until("2026-11-20", datetime(2026, 11, 29, tzinfo=UTC), 24) == datetime(2026, 11, 22, tzinfo=UTC)


def test_a_cron_trigger_at_midnight_covers_the_day_that_just_ended() -> None:
    midnight = datetime(2026, 11, 29, tzinfo=UTC)
    context = {"data_interval_start": midnight, "data_interval_end": midnight,
               "dag_run": SimpleNamespace(run_after=midnight)}
    assert run_day(context) == "2026-11-28"
    assert wait_until("2026-11-28", midnight, 24) == datetime(2026, 11, 30, tzinfo=UTC)


def test_only_work_copies_older_than_the_kept_days_are_pruned() -> None:
    from modelops.jobs.drift_tasks import stale_work_keys

    keys = ["jobs/drift/dt=2026-11-20/m-v1/current.parquet", "jobs/drift/dt=2026-11-23/m-v1/current.parquet",
            "jobs/drift/dt=2026-11-24/contract_section.json", "jobs/drift/dt=2026-11-30/m-v2/current.parquet",
            "jobs/drift/dt=not-a-day/x", "jobs/drift/readme.txt", "jobs/driftless/dt=2026-01-01/x",
            "reports/drift/m/v1/dt=2026-01-01/drift.json"]
    # a week kept: 2026-11-23 (seven days before) stays, 2026-11-20 goes
    assert stale_work_keys(keys, "2026-11-30", keep_days=7) == ["jobs/drift/dt=2026-11-20/m-v1/current.parquet"]
    assert stale_work_keys(keys, "2026-11-30", keep_days=0) == keys[:3]
