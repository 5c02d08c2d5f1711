"""Batch results and release phases as Pushgateway groups (pure builders, the push error)."""

from __future__ import annotations

import math
import socket

import pytest
from prometheus_client import generate_latest

from modelops.observability.pushed import (
    DRIFT_JOB,
    FEEDBACK_JOB,
    PUSHED_METRICS,
    RELEASE_JOB,
    MetricsPushError,
    PushGroup,
    drift_group,
    feedback_groups,
    push_groups,
    release_group,
)


def _samples(group: PushGroup) -> dict[str, float]:
    """``name{labels}`` -> value, as the Pushgateway would receive them."""
    out = {}
    for family in group.registry.collect():
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def _feature(name: str, ks: float | None, weighted: float | None, drifted: bool) -> dict[str, object]:
    return {"name": name, "ks": ks, "p_value": 0.01, "drifted": drifted, "sensitivity": 0.5,
            "weighted_score": weighted, "baseline": {}, "current": {}}


DRIFT_DOC = {
    "schema_version": 1, "rows": {"baseline": 1000, "current": 800}, "sampled": False, "threshold": 0.1,
    "drifted": True,
    "features": [_feature("age", 0.3, 0.24, True), _feature("clicks_7d", 0.05, 0.01, False),
                 _feature("empty", None, None, False)],
    "score": {"name": "score", "ks": 0.12, "p_value": 0.0, "drifted": True, "baseline": {}, "current": {}},
    "top_causes": ["age"],
}


def test_drift_group_carries_score_flag_features_and_rows() -> None:
    group = drift_group("ranker", 4, "2026-11-29", DRIFT_DOC)
    assert (group.job, dict(group.grouping)) == (DRIFT_JOB, {"model": "ranker", "version": "4"})
    got = _samples(group)
    assert got["modelops_drift_score{}"] == pytest.approx(0.24)  # the top weighted score
    assert got["modelops_drift_prediction_ks{}"] == pytest.approx(0.12)
    assert got["modelops_drift_detected{}"] == 1.0
    assert got['modelops_drift_feature_ks{feature="age"}'] == pytest.approx(0.3)
    assert got['modelops_drift_feature_weighted_score{feature="clicks_7d"}'] == pytest.approx(0.01)
    assert math.isnan(got['modelops_drift_feature_ks{feature="empty"}'])  # null in drift.json: NaN, not 0
    assert got['modelops_drift_feature_drifted{feature="age"}'] == 1.0
    assert got['modelops_drift_rows{side="current"}'] == 800.0
    assert got["modelops_drift_day_timestamp_seconds{}"] == 1795910400.0  # 2026-11-29T00:00Z
    assert {name.split("{")[0] for name in got} <= PUSHED_METRICS


def test_feedback_groups_one_per_version_plus_rejected_counts() -> None:
    rows = [
        {"model": "ranker", "model_version": 3, "impressions": 200, "clicked": 20, "converted": 5, "ctr": 0.1,
         "cvr": 0.25},
        {"model": "ranker", "model_version": 4, "impressions": 50, "clicked": 0, "converted": 0, "ctr": 0.0,
         "cvr": None},
        {"model": None, "model_version": None, "impressions": 0, "clicked": 3, "converted": 0, "ctr": None,
         "cvr": None},
    ]
    groups = feedback_groups("2026-11-29", rows, {"malformed": 2, "duplicate": 1})
    assert [(g.job, dict(g.grouping)) for g in groups] == [
        (FEEDBACK_JOB, {"model": "ranker", "version": "3"}), (FEEDBACK_JOB, {"model": "ranker", "version": "4"}),
        (FEEDBACK_JOB, {"model": "_all"})]
    v3, v4, everyone = (_samples(g) for g in groups)
    assert v3["modelops_feedback_ctr{}"] == pytest.approx(0.1) and v3["modelops_feedback_cvr{}"] == 0.25
    assert v3["modelops_feedback_impressions{}"] == 200 and v3["modelops_feedback_clicks{}"] == 20
    assert math.isnan(v4["modelops_feedback_cvr{}"])  # no clicks: CVR undefined, not 0
    assert everyone['modelops_feedback_rejected{reason="malformed"}'] == 2
    assert everyone['modelops_feedback_rejected{reason="duplicate"}'] == 1
    assert all({n.split("{")[0] for n in _samples(g)} <= PUSHED_METRICS for g in groups)


def test_release_group_holds_only_the_current_phase() -> None:
    group = release_group("ranker", 5, "waiting_approval")
    assert (group.job, dict(group.grouping)) == (RELEASE_JOB, {"model": "ranker"})
    assert _samples(group) == {'modelops_release_phase{phase="waiting_approval",version="5"}': 1.0}


def test_a_paused_release_says_since_when_whether_it_waits_for_a_person_and_when_it_alerts() -> None:
    group = release_group("ranker", 5, "paused", paused_since=1000.0, waits_for_person=True, pause_alert_s=600)
    assert _samples(group) == {
        'modelops_release_phase{phase="paused",version="5"}': 1.0,
        'modelops_release_paused_since_timestamp_seconds{cause="person",version="5"}': 1000.0,
        "modelops_release_pause_alert_after_seconds{}": 600.0,
    }
    incident = release_group("ranker", 5, "paused", paused_since=1000.0)
    assert 'modelops_release_paused_since_timestamp_seconds{cause="incident",version="5"}' in _samples(incident)
    assert all({n.split("{")[0] for n in _samples(g)} <= PUSHED_METRICS for g in (group, incident))


def test_the_phase_store_pushes_a_pause_and_when_it_comes_to_wait_for_a_person(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from modelops.canary import release_phase
    from modelops.canary.machine import advance, start
    from modelops.canary.measurement import Measurement, VersionWindow
    from modelops.canary.runner import Checkpoint
    from modelops.canary.spec import CanarySpec

    pushed: list[dict[str, float]] = []
    monkeypatch.setattr(release_phase, "push_if_configured",
                        lambda groups, what: pushed.append(_samples(groups[0])) or True)

    class Memory:
        def load(self) -> Checkpoint | None:
            return None

        def save(self, checkpoint: Checkpoint) -> None:
            pass

    spec = CanarySpec(interval_s=10, inconclusive_limit=1)
    store = release_phase.PhasePushingStore(Memory(), pause_alert_s=120)
    status, _ = start(spec, "ranker", 4, 5, 1000.0)
    store.save(Checkpoint(status))
    outage = Measurement(1000.0, 1010.0, VersionWindow(), VersionWindow(), ("http://gw/metrics",))
    status, _ = advance(spec, status, outage, 1010.0)  # unreachable: an incident, resumes by itself
    store.save(Checkpoint(status))
    store.save(Checkpoint(dataclasses.replace(status, updated_at=1011.0)))  # nothing changed: not pushed again
    from modelops.canary.actions import PauseCommand

    status, _ = advance(spec, status, PauseCommand("ann"), 1020.0)  # a person holds it: waits for a person
    store.save(Checkpoint(status))
    assert [next(k for k in p if k.startswith("modelops_release_phase")) for p in pushed] == [
        'modelops_release_phase{phase="progressing",version="5"}', 'modelops_release_phase{phase="paused",version="5"}',
        'modelops_release_phase{phase="paused",version="5"}']
    assert pushed[1]['modelops_release_paused_since_timestamp_seconds{cause="incident",version="5"}'] == 1010.0
    assert pushed[2]['modelops_release_paused_since_timestamp_seconds{cause="person",version="5"}'] == 1020.0
    assert pushed[2]["modelops_release_pause_alert_after_seconds{}"] == 120.0


def test_push_to_an_unreachable_gateway_names_job_and_group() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(MetricsPushError, match=r"job=modelops_release \{'model': 'ranker'\}"):
        push_groups(f"http://127.0.0.1:{port}", [release_group("ranker", 5, "paused")], timeout_s=2)


def test_exposition_of_a_group_is_valid_text() -> None:
    text = generate_latest(drift_group("ranker", 4, "2026-11-29", DRIFT_DOC).registry).decode()
    assert "# TYPE modelops_drift_feature_ks gauge" in text
