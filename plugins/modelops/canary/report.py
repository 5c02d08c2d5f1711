"""Human-readable views of a release: the per-analysis table (task log) and the run summary (DAG run note)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from modelops.canary.gates import Analysis
from modelops.canary.machine import resumes_by_itself
from modelops.canary.status import CanaryStatus, Phase
from modelops.notify.message import table


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4g}"


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


def analysis_table(analysis: Analysis, weight: float) -> str:
    """One analysis as a table: a row per gate with value, threshold, verdict and detail."""
    head = (f"analysis {_time(analysis.window_start)}–{_time(analysis.window_end)} UTC at {weight:.0%}: "
            f"{analysis.verdict.value} (requests canary {_fmt(analysis.canary_requests)}, "
            f"stable {_fmt(analysis.stable_requests)})")
    rows = [(g.name, _fmt(g.value), _fmt(g.threshold), g.verdict.value, g.detail) for g in analysis.gates]
    body = table(rows, ("gate", "value", "threshold", "verdict", "detail"))
    incident = f"\nincident: {analysis.incident}" if analysis.incident else ""
    return f"{head}\n{body}{incident}"


def summary(status: CanaryStatus) -> str:
    """The release in a few lines (phase, final weight, reason, MTTR) and its timeline."""
    mttr = "n/a" if status.mttr_s is None else f"{status.mttr_s:.1f} s"
    lines = [f"{status.model} v{status.canary_version} (stable v{status.stable_version}): {status.phase.value}, "
             f"canary weight {status.weight:.0%}, {status.analyses} analyses, {status.failed_checks} failed, "
             f"MTTR {mttr}"]
    if status.reason:
        lines.append(f"reason: {status.reason}")
    lines += [f"{_time(t.at)} {t.source.value} → {t.target.value}" + (f" ({t.reason})" if t.reason else "")
              for t in status.transitions]
    return "\n".join(lines)


def progress_note(status: CanaryStatus) -> str:
    """The run's note while a release goes on: what a paused one waits for, else its summary."""
    return pause_note(status) if status.phase is Phase.PAUSED else summary(status)


#: What each kind of pause waits for, in the run's note and on the cockpit.
RESUMES_BY_ITSELF = "it resumes by itself at the first analysis window without an incident"
WAITS_FOR_PERSON = "it waits for a person"


def pause_note(status: CanaryStatus) -> str:
    """What a paused release waits for, and what a person can do (the run's and the task's note).

    An incident the release resumes from by itself says so; every other pause names the
    commands that end it (the cockpit's Releases page offers the same actions).
    """
    head = f"{status.model} v{status.canary_version} paused at {status.weight:.0%}: {status.reason}"
    if resumes_by_itself(status):
        return (f"{head}\n{RESUMES_BY_ITSELF.capitalize()}; "
                f"abort with `modelops release abort --model {status.model} --version {status.canary_version}`.")
    return (f"{head}\n{WAITS_FOR_PERSON.capitalize()}: `modelops release resume --model {status.model} --version "
            f"{status.canary_version}` goes on, `modelops release abort ...` rolls back (or the Releases page).")
