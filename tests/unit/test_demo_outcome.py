"""``make demo`` reports a release's outcome from its recorded phase, not from the DAG run's state."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from modelops.canary.record import ReleaseRef, first_release, record_key
from modelops.demo.common import recorded_outcome
from modelops.demo.recommender import DEMO_MODEL


class FakeStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def exists(self, key: str) -> bool:
        return key in self.blobs

    def get_bytes(self, key: str) -> bytes:
        return self.blobs[key]


class FakeClient:
    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        assert (dag_id, task_id) == ("model_release", "publish")
        return {"triton_version": 7}


@pytest.mark.parametrize(("phase", "run_state", "outcome"), [
    ("promoted", "success", "promoted"),
    ("rolled_back", "success", "rolled back"),  # the run succeeded: the release did not
    ("paused", "success", "paused"),
    ("promoted", "failed", "promoted"),  # a task after the promotion failed: the version was promoted
])
def test_outcome_is_the_recorded_phase(monkeypatch: pytest.MonkeyPatch, phase: str, run_state: str,
                                       outcome: str) -> None:
    from modelops.objectstore import ObjectStore

    store = FakeStore()
    ref = ReleaseRef(DEMO_MODEL, 7, "a" * 64, "3", "demo", "model_release", "run-1")
    record = dataclasses.replace(first_release(ref, 1.0, "test"), phase=phase)
    store.blobs[record_key(DEMO_MODEL, 7)] = record.to_json().encode()
    monkeypatch.setattr(ObjectStore, "from_settings", classmethod(lambda cls, *a, **k: store))
    assert recorded_outcome(FakeClient(), DEMO_MODEL, "run-1", run_state) == outcome


def test_without_a_record_the_outcome_is_unknown_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelops.objectstore import ObjectStore

    monkeypatch.setattr(ObjectStore, "from_settings", classmethod(lambda cls, *a, **k: FakeStore()))
    assert recorded_outcome(FakeClient(), DEMO_MODEL, "run-1", "success").startswith("unknown")
