"""Releases started by the alias challenger: one claim id = one run id, whoever sees the version first.

An in-memory registry with MlflowRegistry's claim rule and an in-memory Airflow whose run ids are
unique (as Airflow's are) stand in for the servers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from modelops.registry.lifecycle import TAG
from modelops.registry.mlflow_registry import VersionInfo
from modelops.release.autostart import (
    WATCHER_STARTER,
    WEBHOOK_STARTER,
    alias_run_id,
    challenger_versions_to_release,
    start_alias_release,
)


class Registry:
    def __init__(self) -> None:
        self.versions: dict[tuple[str, str], VersionInfo] = {}
        self.aliases: dict[tuple[str, str], str] = {}
        self.model_tag: dict[str, dict[str, str]] = {}

    def add(self, model: str, version: str, *, created_ms: int = 1000, challenger: bool = True,
            tags: Mapping[str, str] | None = None) -> None:
        self.versions[(model, version)] = VersionInfo(model, version, "None", "run", "src", tags=dict(tags or {}),
                                                      created_ms=created_ms)
        if challenger:
            self.aliases[(model, "challenger")] = version

    def by_alias(self, name: str, alias: str) -> VersionInfo | None:
        version = self.aliases.get((name, alias))
        if version is None:
            return None
        info = self.versions[(name, version)]
        return replace(info, aliases=tuple(a for (m, a), v in self.aliases.items() if m == name and v == version))

    def model_tags(self, name: str) -> dict[str, str]:
        return dict(self.model_tag.get(name, {}))

    def claim_release(self, name: str, version: str | int, *, released_by: str, release_run_id: str) -> bool:
        info = self.versions[(name, str(version))]
        current = info.tags.get(TAG["release_run_id"])
        if current and current != release_run_id:
            return False
        if current is None:
            tags = {**info.tags, TAG["released_by"]: released_by, TAG["release_run_id"]: release_run_id}
            self.versions[(name, str(version))] = replace(info, tags=tags)
        return True


class Airflow:
    def __init__(self, *, failing: bool = False) -> None:
        self.runs: dict[str, Mapping[str, Any]] = {}
        self.failing = failing

    def start(self, run_id: str, conf: Mapping[str, Any]) -> bool:
        if self.failing:
            raise OSError("Airflow unreachable")
        if run_id in self.runs:
            return False
        self.runs[run_id] = dict(conf)
        return True

    def exists(self, run_id: str) -> bool:
        return run_id in self.runs


def test_two_deliveries_of_one_alias_event_start_one_run_with_the_release_params() -> None:
    registry, airflow = Registry(), Airflow()
    registry.add("churn", "3", created_ms=1767225600123)
    registry.model_tag["churn"] = {"modelops.release.analysis_interval_s": "30", "owner": "team"}
    first = start_alias_release(registry, airflow, "churn", "3")
    second = start_alias_release(registry, airflow, "churn", "3")
    run_id = "challenger-churn-v3-1767225600123"
    assert (first.outcome, first.run_id) == ("started", run_id)
    assert (second.outcome, second.run_id) == ("already_started", run_id)
    assert airflow.runs == {run_id: {"analysis_interval_s": 30, "model": "churn", "version": "3",
                                     "started_by": WEBHOOK_STARTER, "claim_id": run_id}}
    assert registry.versions[("churn", "3")].tags[TAG["release_run_id"]] == run_id


def test_the_poll_after_the_webhook_starts_nothing_and_before_it_the_webhook_finds_the_run() -> None:
    registry, airflow = Registry(), Airflow()
    registry.add("churn", "3")
    start_alias_release(registry, airflow, "churn", "3")
    assert challenger_versions_to_release(registry, ["churn"], airflow.exists) == []

    registry.add("fraud", "1")
    planned = challenger_versions_to_release(registry, ["fraud"], airflow.exists)
    assert [p["conf"]["started_by"] for p in planned] == [WATCHER_STARTER]
    airflow.start(planned[0]["trigger_run_id"], planned[0]["conf"])  # what TriggerDagRunOperator does
    assert start_alias_release(registry, airflow, "fraud", "1").outcome == "already_started"
    assert len(airflow.runs) == 2


def test_a_claim_whose_trigger_failed_is_started_by_the_poll_under_the_same_id() -> None:
    registry = Registry()
    registry.add("churn", "3")
    with pytest.raises(OSError, match="unreachable"):  # the receiver answers 503 (MLflow retries)
        start_alias_release(registry, Airflow(failing=True), "churn", "3")
    airflow = Airflow()
    planned = challenger_versions_to_release(registry, ["churn"], airflow.exists)
    assert [p["trigger_run_id"] for p in planned] == [alias_run_id("churn", "3", 1000)]


def test_versions_the_platform_staged_or_another_release_claimed_are_left_alone() -> None:
    registry, airflow = Registry(), Airflow()
    registry.add("staged", "2", tags={TAG["contract_passed"]: "true", TAG["release_run_id"]: "manual__1"})
    registry.add("claimed", "5", tags={TAG["release_run_id"]: "staging-watch:claimed:5"})
    for model, version in (("staged", "2"), ("claimed", "5")):
        result = start_alias_release(registry, airflow, model, version)
        assert result.outcome == "skipped"
    assert "contract gate" in start_alias_release(registry, airflow, "staged", "2").detail
    assert "staging-watch:claimed:5" in start_alias_release(registry, airflow, "claimed", "5").detail
    assert challenger_versions_to_release(registry, ["staged", "claimed", "nothing"], airflow.exists) == []
    assert airflow.runs == {}


def test_a_delivery_for_a_version_the_alias_has_left_starts_nothing() -> None:
    registry, airflow = Registry(), Airflow()
    registry.add("churn", "3")
    registry.add("churn", "4")  # challenger moved on to 4 before the delivery of 3 arrived
    result = start_alias_release(registry, airflow, "churn", "3")
    assert (result.outcome, result.detail) == ("skipped", "alias challenger points at version 4 by now")
    assert airflow.runs == {}


def test_a_re_created_model_gets_a_new_run_id_for_its_version_one() -> None:
    assert alias_run_id("churn", "1", 1000) != alias_run_id("churn", "1", 2000)
    assert alias_run_id("churn", 1, 1000) == "challenger-churn-v1-1000"
