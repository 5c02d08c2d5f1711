"""Mirroring's pure parts: the routes document's shadow, the divergence measures, the |Δ| histograms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from modelops.documents.routes import (
    Routes,
    Shadow,
    VersionRef,
    choose_version,
    load_routes,
    routed_versions,
    serialize_routes,
)
from modelops.errors import ContractError
from modelops.gateway.metrics import HistogramFamily
from modelops.gateway.shadow.divergence import (
    DIVERGENCE_BUCKETS,
    answer_kind,
    compare_ranked,
    compare_rows,
    predicted_classes,
    top_k_order,
)

STABLE, CANDIDATE = VersionRef(3, "a" * 64), VersionRef(4, "b" * 64)


def _routes(shadow: Shadow | None = None) -> Routes:
    return Routes("rec", 7, STABLE, None, 0.0, "2026-12-01T00:00:00+00:00", "tests", shadow=shadow)


# ------------------------------------------------------------------ the routes document
def test_a_document_without_shadow_is_unchanged_and_one_with_it_round_trips() -> None:
    plain = serialize_routes(_routes())
    assert b"shadow" not in plain and load_routes(plain) == _routes()
    mirrored = _routes(Shadow(CANDIDATE, 0.5, 3))
    again = load_routes(serialize_routes(mirrored))
    assert again == mirrored and routed_versions(again) == {3, 4}  # loaded by the reconciler
    # never chosen for a user: the shadow answers mirrored requests only
    assert {choose_version(again, f"u{i}") for i in range(200)} == {STABLE}


def test_an_old_reader_ignores_the_shadow_block() -> None:
    document = json.loads(serialize_routes(_routes(Shadow(CANDIDATE, 1.0, 5))))
    assert set(document) - {"shadow"} == set(json.loads(serialize_routes(_routes())))  # only added, nothing moved
    document["shadow"] = None
    assert load_routes(json.dumps(document).encode()).shadow is None


@pytest.mark.parametrize(("shadow", "message"), [
    ({"version": 3, "sha256": "a" * 64}, "must differ from stable.version"),
    ({"version": 4, "sha256": "b" * 64, "share": 0.05}, "routes.shadow.share=0.05"),
    ({"version": 4, "sha256": "b" * 64, "top_k": 0}, "routes.shadow.top_k=0"),
    ({"version": 4}, "routes.shadow.sha256"),
    ("v4", "routes.shadow: must be an object"),
])
def test_a_bad_shadow_block_is_refused_naming_the_field(shadow: object, message: str) -> None:
    document = json.loads(serialize_routes(_routes()))
    document["shadow"] = shadow
    with pytest.raises(ContractError, match=message):
        load_routes(json.dumps(document).encode())


# ------------------------------------------------------------------ divergence measures
def test_ranked_answers_compare_items_and_the_top_k_order() -> None:
    stable = np.array([0.9, 0.1, 0.5, 0.3], dtype=np.float32)
    same = compare_ranked(stable, stable.copy(), 5)
    assert same is not None and (same.measure, same.compared, same.disagreed) == ("topk", 1, 0)
    assert float(same.abs_diffs.max()) == 0.0
    permuted = compare_ranked(stable, stable[::-1].copy(), 5)  # the scores of the items reversed
    assert permuted is not None and permuted.disagreed == 1
    assert sorted(permuted.abs_diffs.round(4).tolist()) == pytest.approx([0.4, 0.4, 0.6, 0.6])
    # only the top k count: a change below them is no disagreement
    assert compare_ranked(stable, np.array([0.9, 0.3, 0.5, 0.1]), 2).disagreed == 0  # type: ignore[union-attr]
    assert compare_ranked(stable, stable[:3], 5) is None  # another shape: not comparable
    assert top_k_order(np.array([0.5, 0.5, 0.9]), 2).tolist() == [2, 0]  # ties keep the items' order


def test_classifier_rows_disagree_when_their_class_changes() -> None:
    stable = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    flipped = np.array([[0.1, 0.9], [0.25, 0.75], [0.6, 0.4]])
    result = compare_rows(stable, flipped, answer_kind(stable))
    assert result is not None and (result.measure, result.compared, result.disagreed) == ("class", 3, 1)
    assert result.abs_diffs.tolist() == pytest.approx([0.8, 0.05, 0.0])  # the positive-class probability
    labels = np.array([1, 0, 2], dtype=np.int64)
    assert answer_kind(labels) == "classes" and predicted_classes(labels).tolist() == [1, 0, 2]
    assert answer_kind(np.array([[0.7], [0.2]]), "binary") == "classes"
    assert predicted_classes(np.array([[0.7], [0.2]])).tolist() == [True, False]


def test_regressor_rows_carry_their_relative_difference() -> None:
    stable = np.array([2.0, -4.0, 0.0, 10.0])
    assert answer_kind(stable) == "values"
    result = compare_rows(stable, np.array([-2.0, -4.0, 0.0, 11.0]), "values")
    assert result is not None and result.measure == "" and result.rel_diffs is not None
    assert result.rel_diffs.tolist() == pytest.approx([2.0, 0.0, 0.0, 1.0 / 11.0])  # a sign flip is 2


def test_many_observations_land_in_the_buckets_one_observation_each_would() -> None:
    values = [0.0, 0.0001, 0.0002, 0.05, 0.07, 1.5, 3.0]
    for repeat in (1, 20):  # a request's few values (one bisect each) and many (numpy)
        one, many = HistogramFamily("x", "", DIVERGENCE_BUCKETS), HistogramFamily("x", "", DIVERGENCE_BUCKETS)
        for v in values * repeat:
            one.observe((), v)
        many.observe_many((), np.array(values * repeat))
        many.observe_many((), np.array([]))
        assert many.counts == one.counts and many.sums[()] == pytest.approx(one.sums[()])
    big = HistogramFamily("x", "", DIVERGENCE_BUCKETS)
    big.observe_many((), np.array([math.nan] * 100))
    assert big.counts[()][-1] == 100  # NaN lands in +Inf, as one observation puts it
