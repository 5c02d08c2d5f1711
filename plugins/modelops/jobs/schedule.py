"""Which day a batch run covers, and until when it waits for late feedback (pure).

A scheduled daily run covers its data interval [D, D+1), or, with an empty interval (a
cron trigger at 00:00 of D+1), the day that just ended. A manual run (Airflow 3 runs
triggered without a logical date have no data interval) covers the day given in its
form, else the day it was triggered on, as far as the data reaches at trigger time.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any


def run_day(context: dict[str, Any] | Any, day_param: str = "") -> str:
    """The UTC day (YYYY-MM-DD) a run covers."""
    if day_param:
        return date.fromisoformat(day_param).isoformat()
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is not None:
        if end is not None and end == start:
            # A trigger timetable (Airflow 3's default for cron presets) runs at 00:00 with an
            # empty interval: the nightly run covers the day that just ended.
            return str((start.astimezone(UTC) - timedelta(days=1)).date().isoformat())
        return str(start.astimezone(UTC).date().isoformat())
    run_after = context["dag_run"].run_after
    return str(run_after.astimezone(UTC).date().isoformat())


def wait_until(day: str, run_after: datetime, window_hours: float) -> datetime:
    """When day D's feedback is complete: the end of D (or the trigger time, if earlier) + the window."""
    end_of_day = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
    return min(end_of_day, run_after.astimezone(UTC)) + timedelta(hours=window_hours)
