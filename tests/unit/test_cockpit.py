"""The cockpit's pure parts: the release record, the page view models, the SVG charts."""

from __future__ import annotations

import dataclasses
import math
import re
import xml.etree.ElementTree as ET

import pytest

from modelops.canary import description
from modelops.canary.gates import Analysis, GateResult, Verdict
from modelops.canary.measurement import Measurement, VersionWindow
from modelops.canary.record import (
    Control,
    ReleaseRecord,
    ReleaseRef,
    Window,
    first_release,
    index_document,
    index_rows,
    index_with,
    updated,
    window_of,
)
from modelops.canary.status import CanaryStatus, Phase, Transition
from modelops.cockpit import views
from modelops.cockpit.svg import Series, line_chart
from modelops.documents.routes import Routes, VersionRef
from modelops.errors import ContractError

SHA_A, SHA_B = "a" * 64, "b" * 64
REF = ReleaseRef(model="rec", canary_version=4, canary_sha256=SHA_B, mlflow_version="7", started_by="alice",
                 dag_id="model_release", run_id="manual__1", steps=(0.25, 0.5, 1.0), stable_version=3,
                 stable_sha256=SHA_A, stable_mlflow_version="6", mlflow_run_id="r1")
LINKS = views.Links(mlflow_ui="http://mlflow:5000", cockpit="/modelops")


def _status(phase: Phase = Phase.PROGRESSING, started: float = 1000.0, **changes: object) -> CanaryStatus:
    base = CanaryStatus(model="rec", stable_version=3, canary_version=4, phase=phase, weight=0.25, step_index=0,
                        started_at=started, updated_at=started + 30)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _window(end: float, errors: float = 1.0) -> tuple[Analysis, Measurement]:
    canary = VersionWindow(requests=100, errors=errors, latency_buckets=((0.05, 90), (0.1, 100), (math.inf, 100)),
                           score_std=0.2)
    stable = VersionWindow(requests=300, errors=3, latency_buckets=((0.05, 300), (math.inf, 300)), score_std=0.25)
    gates = (GateResult("error_rate", errors / 100, 0.02, Verdict.PASSED if errors < 2 else Verdict.FAILED),
             GateResult("p99_ms", 99.5, 250.0, Verdict.PASSED),
             GateResult("score_std", 0.2, 0.01, Verdict.PASSED),
             GateResult("ctr", math.nan, math.nan, Verdict.INCONCLUSIVE, "thin", required=False))
    analysis = Analysis(end - 5, end, Verdict.PASSED, gates, canary_requests=100, stable_requests=300)
    return analysis, Measurement(end - 5, end, canary, stable)


def _win(weight: float, end: float, errors: float = 1.0) -> Window:
    analysis, measurement = _window(end, errors)
    return window_of(analysis, weight, measurement)


def test_a_window_records_the_stable_value_beside_the_canary_value() -> None:
    window = _win(0.25, 1010.0)
    error = window.gate("error_rate")
    assert error is not None and (error.canary, error.stable, error.threshold) == (0.01, 0.01, 0.02)
    p99 = window.gate("p99_ms")
    assert p99 is not None and p99.stable == pytest.approx(49.5)  # the stable histogram's own P99 (ms)
    ctr = window.gate("ctr")
    assert ctr is not None and (ctr.canary, ctr.stable, ctr.threshold, ctr.verdict) == (None, None, None,
                                                                                           "inconclusive")


def test_the_record_accumulates_windows_once_and_round_trips() -> None:
    w1 = _win(0.25, 1010.0)
    w2 = _win(0.5, 1015.0, errors=5)
    record = updated(None, REF, _status(), w1)
    record = updated(record, REF, _status(), w1)  # a replayed window is not added twice
    record = updated(record, REF, _status(Phase.PAUSED), w2, Control("pause", "bob", 1012.0, 1015.0))
    assert [w.end for w in record.windows] == [1010.0, 1015.0]
    assert record.controls == (Control("pause", "bob", 1012.0, 1015.0),)
    assert record.ended_at is None and record.duration_s is None
    assert ReleaseRecord.from_dict(record.to_dict()) == record
    # A later release of the same version starts a new record.
    again = updated(record, REF, _status(started=2000.0))
    assert (again.windows, again.controls, again.started_at) == ((), (), 2000.0)


def test_a_terminal_status_ends_the_record() -> None:
    done = updated(None, REF, _status(Phase.ROLLED_BACK, reason="failed gates: error_rate", mttr_s=7.5))
    assert (done.ended_at, done.duration_s, done.mttr_s) == (1030.0, 30.0, 7.5)


def test_an_unknown_record_version_is_refused_with_its_field() -> None:
    raw = updated(None, REF, _status()).to_dict()
    with pytest.raises(ContractError, match="schema_version=9"):
        ReleaseRecord.from_dict({**raw, "schema_version": 9})
    with pytest.raises(ContractError, match="unreadable"):
        ReleaseRecord.from_dict({k: v for k, v in raw.items() if k != "model"})


def test_the_index_keeps_one_row_per_release_newest_first() -> None:
    first = updated(None, REF, _status(started=1000.0))
    second = updated(None, dataclasses.replace(REF, canary_version=5), _status(started=2000.0))
    rows = index_with([], first)
    rows = index_with(rows, second)
    rows = index_with(rows, updated(first, REF, _status(Phase.PROMOTED, started=1000.0)))
    parsed = index_rows(index_document("rec", rows))
    assert [(r.canary_version, r.phase) for r in parsed] == [(5, "progressing"), (4, "promoted")]
    assert all(r.windows == () for r in parsed)


def test_the_releases_page_shows_what_serves_the_running_release_and_the_history() -> None:
    routes = Routes(model="rec", revision=9, stable=VersionRef(3, SHA_A), canary=VersionRef(4, SHA_B),
                    canary_weight=0.25, updated_at="2026-11-30T10:00:00+00:00", updated_by="modelops")
    promoted = first_release(dataclasses.replace(REF, canary_version=3, mlflow_version="6"), 500.0, "first release")
    running = updated(None, REF, _status())
    rows = views.releases_page({"rec": routes}, {"rec": [running, promoted], "old": []}, LINKS)
    assert [r.model for r in rows] == ["old", "rec"]
    row = rows[1]
    assert (row.stable, row.canary, row.weight, row.revision) == ("v3", "v4", "25%", "9")
    assert row.since == description.when(500.0)  # when v3 was promoted
    assert row.running == "v4: progressing, step 1 of 3 at 25% canary"
    assert row.running_url == "/modelops/releases/rec/4"
    latest = row.history[0]
    assert latest.run_url == "/dags/model_release/runs/manual__1"
    assert latest.mlflow_version_url == "http://mlflow:5000/#/models/rec/versions/7"
    assert latest.lineage_url == "/modelops/lineage/rec/7"


def test_actions_follow_the_phase() -> None:
    assert views.available_actions(updated(None, REF, _status())) == ("pause", "abort")
    assert views.available_actions(updated(None, REF, _status(Phase.PAUSED))) == ("resume", "abort")
    assert views.available_actions(updated(None, REF, _status(Phase.WAITING_APPROVAL))) == \
        ("approve", "reject", "pause", "abort")
    assert views.available_actions(updated(None, REF, _status(Phase.PROMOTED))) == ()


def test_the_detail_page_has_the_timeline_the_gate_table_four_charts_and_the_mttr() -> None:
    status = _status(Phase.ROLLED_BACK, reason="failed gates: error_rate", mttr_s=6.0,
                     first_failing_window_start=1010.0, rollback_applied_at=1016.0,
                     transitions=(Transition(1000.0, Phase.INITIALIZING, Phase.PROGRESSING),
                                  Transition(1015.0, Phase.PROGRESSING, Phase.ROLLING_BACK, "failed gates")))
    record = updated(None, REF, status, _win(0.25, 1015.0, errors=5))
    page = views.detail(record, status, LINKS, {"result": "passed", "url": "http://x/report.html"})
    assert [(t.source, t.target) for t in page.timeline] == [("initializing", "progressing"),
                                                             ("progressing", "rolling_back")]
    assert page.windows[0].gates[0] == views.GateCell("error_rate", "0.05", "0.01", "0.02", "failed", "")
    assert len(page.charts) == 4 and all(c.startswith("<svg") for c in page.charts)
    assert page.mttr == "6.0 s" and "first failing analysis window" in page.mttr_how
    assert page.actions == ()


def test_a_paused_release_says_whether_it_resumes_by_itself_or_waits_for_a_person() -> None:
    def paused(reason: str) -> CanaryStatus:
        return _status(Phase.PAUSED, reason=reason, transitions=(Transition(1010.0, Phase.PROGRESSING, Phase.PAUSED,
                                                                            reason),))

    outage = paused("incident, not the canary's fault: 3 inconclusive analyses in a row (unreachable: http://gw)")
    page = views.detail(updated(None, REF, outage), outage, LINKS, {})
    assert page.summary.endswith("it resumes by itself at the first analysis window without an incident")
    thin = paused("3 inconclusive analyses in a row (thin traffic: canary 2 < 20)")
    page = views.detail(updated(None, REF, thin), thin, LINKS, {})
    assert "thin traffic" in page.summary and page.summary.endswith("it waits for a person: Resume goes on, Abort "
                                                                    "rolls back")
    assert page.actions == ("resume", "abort")


def test_a_chart_is_valid_svg_and_breaks_the_line_at_missing_values() -> None:
    svg = line_chart("error <rate>", [Series("canary", (0.01, None, 0.05), "#000"),
                                      Series("threshold", (0.02, 0.02, 0.02), "#f00", dashed=True)], ["a", "b", "c"])
    root = ET.fromstring(svg)
    paths = [e.get("d", "") for e in root.iter("{http://www.w3.org/2000/svg}path")]
    assert len(paths) == 2
    assert len(re.findall("M", paths[0])) == 2  # two segments: the gap at the missing window
    assert "error &lt;rate&gt;" in svg
    assert "no data yet" in line_chart("empty", [Series("canary", (), "#000")])


def test_ctr_by_day_reads_the_feedback_job_tags() -> None:
    tags = {"modelops.ctr.2026-11-29": "0.120000", "modelops.cvr.2026-11-29": "null",
            "modelops.impressions.2026-11-29": "500", "modelops.ctr.2026-11-28": "0.1"}
    assert description.ctr_days(tags) == [("2026-11-28", 0.1, None, ""), ("2026-11-29", 0.12, None, "500")]


def test_the_mlflow_description_summarizes_the_release_lineage_drift_and_ctr() -> None:
    from modelops.canary.description import MARKER, markdown

    rolled = updated(None, REF, _status(Phase.ROLLED_BACK, reason="failed gates: error_rate", mttr_s=6.5))
    tags = {"modelops.triton_version": "4", "modelops.sha256": SHA_B, "modelops.data_start": "2026-11-01",
            "modelops.data_end": "2026-11-28", "modelops.contract_result": "passed",
            "modelops.ctr.2026-11-29": "0.120000", "modelops.cvr.2026-11-29": "0.050000",
            "modelops.impressions.2026-11-29": "500"}
    text = markdown("rec", "7", tags, [rolled], {"verdict": "no drift on 2026-11-29", "report": "s3://b/r.html"},
                    "http://airflow/modelops/lineage/rec/7")
    assert text.startswith(MARKER)
    assert "**Latest release:** rolled_back — Triton v4 against stable v3" in text
    assert "failed gates: error_rate; MTTR 6.5 s" in text
    assert f"| sha256 | `{SHA_B}` |" in text and "| training data | 2026-11-01 … 2026-11-28 |" in text
    assert "**Nightly drift:** no drift on 2026-11-29 — report `s3://b/r.html`" in text
    assert "| 2026-11-29 | 0.12 | 0.05 | 500 |" in text
    assert "(http://airflow/modelops/lineage/rec/7)" in text
    assert "**Not released yet.**" in markdown("rec", "8", {}, [rolled], {})


def test_model_info_is_read_from_the_published_version_folder() -> None:
    from modelops.cockpit.store import model_info

    objects = {"triton/repository/rec/4/model-info.json": b'{"sha256": "abc", "triton_version": 4}'}

    class Store:
        bucket = "platform"

        def exists(self, key: str) -> bool:
            return key in objects

        def get_bytes(self, key: str) -> bytes:
            return objects[key]

    text = model_info(Store(), "s3://platform/triton/repository/", "rec", "4")  # type: ignore[arg-type]
    assert '"triton_version": 4' in text
    assert model_info(Store(), "s3://other/triton/repository/", "rec", "4") == ""  # type: ignore[arg-type]
    assert model_info(Store(), "s3://platform/triton/repository/", "rec", "5") == ""  # type: ignore[arg-type]


def test_the_detail_page_says_which_gates_judged_the_release() -> None:
    status = _status()
    labelled = dataclasses.replace(REF, gates=("error_rate", "p99_ms", "score_std"))
    record = updated(None, labelled, status)
    assert ReleaseRecord.from_dict(record.to_dict()).gates == ("error_rate", "p99_ms", "score_std")
    page = views.detail(record, status, LINKS, {})
    assert page.gates.startswith("canary gates: error_rate, p99_ms, score_std — operational gates only")
    every = views.detail(updated(None, dataclasses.replace(REF, gates=("error_rate", "p99_ms", "score_std", "ctr")),
                                 status), status, LINKS, {})
    assert every.gates == "canary gates: error_rate, p99_ms, score_std, ctr"
    old = {k: v for k, v in record.to_dict().items() if k != "gates"}  # a record written before gates were chosen
    assert views.detail(ReleaseRecord.from_dict(old), status, LINKS, {}).gates == ""


def test_the_lineage_page_shows_a_labelled_models_realized_performance_by_day() -> None:
    tags = {"modelops.outcome.2026-11-02": "coverage=0.8 auc=0.91 log_loss=0.31",
            "modelops.outcome.2026-11-01": "coverage=0.95 auc=0.9 log_loss=0.33", "modelops.triton_version": "2"}
    page = views.lineage("churn", "2", "Production", ["champion"], "r1", tags, "", [], {}, LINKS)
    assert page.outcome_by_day == (("2026-11-01", "0.95", "auc 0.9, log_loss 0.33"),
                                   ("2026-11-02", "0.8", "auc 0.91, log_loss 0.31"))
    assert page.ctr_by_day == ()
    assert views.lineage("rec", "7", "Production", [], "r1", {}, "", [], {}, LINKS).outcome_by_day == ()
