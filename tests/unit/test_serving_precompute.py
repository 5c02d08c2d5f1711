"""Precomputed predictions, the pure parts: layout, manifest rules, which snapshot may serve, the lookup table."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from modelops.errors import ContractError
from modelops.gateway.lookup.precomputed import LoadedScores
from modelops.jobs.precompute_tasks import scores_parquet
from modelops.serving.precompute import (
    Manifest,
    load_manifest,
    manifest_key,
    newest_by_version,
    parse_manifest,
    parse_manifest_key,
    population,
    prunable,
    row_ranges,
    scores_key,
    serialize_manifest,
    servable,
    snapshot_name,
)

SHA = "a" * 64
NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC).timestamp()


def manifest(version: int = 3, snapshot: str = "20261201T060000Z", created_at: str = "2026-12-01T06:00:41Z",
             sha256: str = SHA, feature_snapshot: str = "f1") -> Manifest:
    return Manifest(model="recommender", version=version, sha256=sha256, snapshot=snapshot, created_at=created_at,
                    rows=6, n_users=2, n_items=3, feature_snapshot=feature_snapshot,
                    scores_key=scores_key("recommender", version, snapshot), scores_sha256="b" * 64,
                    routes_revision=7)


def test_layout_names_the_version_and_the_interval() -> None:
    name = snapshot_name(datetime(2026, 12, 1, 6, 0, tzinfo=UTC))
    assert name == "20261201T060000Z"
    assert scores_key("recommender", 3, name) == "precomputed/recommender/v=3/20261201T060000Z/scores.parquet"
    key = manifest_key("recommender", 3, name)
    assert key == "precomputed/recommender/v=3/20261201T060000Z/_manifest.json"
    assert parse_manifest_key(key) == ("recommender", 3, name)
    for other in ("precomputed/recommender/v=3/20261201T060000Z/scores.parquet",
                  "precomputed/recommender/v=0/20261201T060000Z/_manifest.json",
                  "precomputed/recommender/v=3/latest/_manifest.json", "routes/recommender.json"):
        assert parse_manifest_key(other) is None, other
    with pytest.raises(ContractError, match="timezone-aware"):
        snapshot_name(datetime(2026, 12, 1, 6, 0))
    with pytest.raises(ContractError, match=r"snapshot='x'.*example: 20261201T060000Z"):
        scores_key("recommender", 3, "x")
    with pytest.raises(ContractError, match="version=0: must be an integer >= 1"):
        scores_key("recommender", 0, name)


def test_manifest_round_trips_and_bad_fields_are_named_with_rule_and_example() -> None:
    m = manifest()
    assert load_manifest(serialize_manifest(m), manifest_key("recommender", 3, m.snapshot)) == m
    assert parse_manifest(json.loads(serialize_manifest(m))) == m
    good = json.loads(serialize_manifest(m))
    for field, value, message in (
            ("version", "3", r"manifest.version='3': must be an integer >= 1 \(example: 3\)"),
            ("sha256", "ABC", r"manifest.sha256='ABC': must match"),
            ("created_at", "yesterday", r"manifest.created_at='yesterday': must be an ISO 8601 time"),
            ("rows", -1, r"manifest.rows=-1: must be an integer >= 0"),
            ("schema_version", 2, r"manifest.schema_version=2: must be 1"),
            ("scores_key", "precomputed/recommender/v=4/20261201T060000Z/scores.parquet",
             "the version and snapshot of the manifest's own path")):
        with pytest.raises(ContractError, match=message):
            parse_manifest({**good, field: value})
    with pytest.raises(ContractError, match="not the snapshot of its key"):
        load_manifest(serialize_manifest(m), manifest_key("recommender", 4, m.snapshot))
    with pytest.raises(ContractError, match="not valid JSON"):
        load_manifest(b"{", manifest_key("recommender", 3, m.snapshot))


def test_newest_snapshot_per_version_and_build() -> None:
    old = manifest(snapshot="20261201T050000Z", created_at="2026-12-01T05:00:30Z")
    new = manifest(snapshot="20261201T060000Z", created_at="2026-12-01T06:00:30Z")
    other_version = manifest(version=4, snapshot="20261201T060000Z", created_at="2026-12-01T06:10:00Z")
    other_build = manifest(sha256="c" * 64, snapshot="20261201T070000Z", created_at="2026-12-01T07:00:00Z")
    newest = newest_by_version([new, old, other_version, other_build])
    assert newest == {("recommender", 3, SHA): new, ("recommender", 4, SHA): other_version,
                      ("recommender", 3, "c" * 64): other_build}


def test_retention_never_prunes_the_snapshot_the_gateway_serves() -> None:
    """One ordering (the interval's name): a late re-run of an older interval neither serves nor survives."""
    newer = manifest(snapshot="20261201T060000Z", created_at="2026-12-01T06:00:30Z")
    rerun = manifest(snapshot="20261130T060000Z", created_at="2026-12-01T07:30:00Z")  # completed last
    older = [manifest(snapshot=f"2026112{d}T060000Z", created_at=f"2026-11-2{d}T06:00:30Z") for d in range(5, 9)]
    everything = [newer, rerun, *older]
    served = newest_by_version(everything)[("recommender", 3, SHA)]
    assert served == newer
    pruned = prunable([manifest_key(m.model, m.version, m.snapshot) for m in everything], 1)
    assert (served.model, served.version, served.snapshot) not in pruned
    assert len(pruned) == len(everything) - 1


def test_only_the_routed_version_on_the_served_features_and_fresh_may_serve() -> None:
    m = manifest()  # complete at 06:00:41, NOW is 07:00
    assert servable(m, version=3, sha256=SHA, feature_snapshot="f1", now=NOW, max_age_s=7200) == ""
    assert servable(None, version=3, sha256=SHA, feature_snapshot="f1", now=NOW, max_age_s=7200) == "none"
    assert servable(m, version=4, sha256=SHA, feature_snapshot="f1", now=NOW, max_age_s=7200) == "version"
    assert servable(m, version=3, sha256="c" * 64, feature_snapshot="f1", now=NOW, max_age_s=7200) == "version"
    assert servable(m, version=3, sha256=SHA, feature_snapshot="f2", now=NOW, max_age_s=7200) == "features"
    assert servable(m, version=3, sha256=SHA, feature_snapshot=None, now=NOW, max_age_s=7200) == "features"
    assert servable(m, version=3, sha256=SHA, feature_snapshot="f1", now=NOW, max_age_s=3000) == "stale"
    assert servable(m, version=3, sha256=SHA, feature_snapshot="f1", now=NOW, max_age_s=3600) == ""
    future = replace(m, created_at=(datetime.fromtimestamp(NOW, UTC) + timedelta(minutes=5)).isoformat())
    assert future.age_s(NOW) == 0.0


def test_population_and_batches() -> None:
    pop = population(["u2", "u1", "u2", "u3"], ["i2", "i1"], max_users=2)
    assert pop.user_ids == ("u1", "u2") and pop.item_ids == ("i1", "i2") and pop.rows == 4
    with pytest.raises(ContractError, match="max_items=-1: must be >= 0"):
        population(["u1"], ["i1"], max_items=-1)
    # the gateway's memory bound: 4 bytes per pair per routed version
    assert population(["u1", "u2"], ["i1", "i2", "i3"], max_pairs=6).rows == 6
    assert population(["u1", "u2"], ["i1", "i2", "i3"], max_items=2, max_pairs=4).rows == 4  # caps apply first
    with pytest.raises(ContractError, match=r"max_pairs=5: 2 users x 3 items = 6 pairs exceed it.*example: max_users"):
        population(["u1", "u2"], ["i1", "i2", "i3"], max_pairs=5)
    assert population([f"u{k}" for k in range(6000)], [f"i{k}" for k in range(5000)], max_pairs=0).rows == 30_000_000
    assert row_ranges(10, 4, 0) == [(0, 4), (4, 8), (8, 10)]
    assert row_ranges(10, 4096, 3) == [(0, 3), (3, 6), (6, 9), (9, 10)]  # the model's max_batch_size caps a call
    assert row_ranges(0, 4, 0) == []
    with pytest.raises(ContractError, match="batch_rows=0: must be >= 1"):
        row_ranges(10, 0, 0)


def test_loaded_scores_answer_only_when_every_item_is_present() -> None:
    pop = population(["u1", "u2"], ["i1", "i2", "i3"])
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], dtype=np.float32)  # user-major
    loaded = LoadedScores.from_parquet(manifest(), scores_parquet(pop, scores))
    assert loaded.scores_of("u2", ["i3", "i1"]).tolist() == [np.float32(0.6), np.float32(0.4)]
    assert loaded.scores_of("u1", ["i1", "i9"]) is None  # an item not scored
    assert loaded.scores_of("u9", ["i1"]) is None  # a user not scored
    table = pa.table({"user_id": ["u1", "u1", "u2"], "item_id": ["i1", "i2", "i1"], "score": [0.5, 0.25, 0.75]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    partial = LoadedScores.from_parquet(manifest(), sink.getvalue())
    assert partial.scores_of("u2", ["i1"]).tolist() == [0.75]
    assert partial.scores_of("u2", ["i1", "i2"]) is None  # the pair (u2, i2) is missing
    duplicated = pa.table({"user_id": ["u1", "u1"], "item_id": ["i1", "i1"], "score": [0.5, 0.6]})
    sink = io.BytesIO()
    pq.write_table(duplicated, sink)
    with pytest.raises(ContractError, match=r"appears more than once .*user_id='u1', item_id='i1' appears 2 times"):
        LoadedScores.from_parquet(manifest(), sink.getvalue())


def test_pruning_keeps_the_newest_snapshots_of_each_version() -> None:
    keys = [manifest_key("recommender", v, f"2026120{d}T060000Z") for v in (3, 4) for d in range(1, 6)]
    keys += [scores_key("recommender", 3, "20261101T060000Z")]  # scores without a manifest: not a snapshot
    assert prunable(keys, 3) == [("recommender", 3, "20261202T060000Z"), ("recommender", 3, "20261201T060000Z"),
                                 ("recommender", 4, "20261202T060000Z"), ("recommender", 4, "20261201T060000Z")]
    assert prunable(keys[:2], 3) == []
    with pytest.raises(ContractError, match="keep=0: must be >= 1"):
        prunable(keys, 0)
