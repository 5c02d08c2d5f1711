"""The synthetic world and the feature matrix: deterministic, in range, realistic, contract-conform."""

from __future__ import annotations

from dataclasses import replace

import jsonschema
import numpy as np
import pandas as pd
import pytest

from modelops.example import synthetic
from modelops.example.tables import FeatureLookup, feature_matrix
from modelops.modelspec.recommender import recommender_contract, recommender_features

FEATURES = recommender_features()
NAMES = [f.name for f in FEATURES]
SPEC = synthetic.WorldSpec(seed=11, n_users=400, n_items=300, n_requests=200)


@pytest.fixture(scope="module")
def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    return synthetic.generate_tables(FEATURES, SPEC)


def test_same_seed_same_world_other_seed_other_world(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    users, items = synthetic.generate_tables(FEATURES, SPEC)
    pd.testing.assert_frame_equal(users, tables[0])
    pd.testing.assert_frame_equal(items, tables[1])
    pd.testing.assert_frame_equal(synthetic.generate_requests(SPEC), synthetic.generate_requests(SPEC))
    other, _ = synthetic.generate_tables(FEATURES, replace(SPEC, seed=12))
    assert not np.allclose(other["user_emb_00"], users["user_emb_00"])


def test_tables_hold_every_feature_in_range_without_gaps(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    users, items = tables
    assert list(users.columns) == ["user_id", *[n for n in NAMES if n.startswith("user_")]]
    assert list(items.columns) == ["item_id", *[n for n in NAMES if n.startswith("item_")]]
    assert users["user_id"].is_unique and items["item_id"].is_unique
    for f in FEATURES:
        column = (users if f.name.startswith("user_") else items)[f.name]
        assert column.dtype == np.float64 and column.notna().all()
        assert f.min <= column.min() and column.max() <= f.max, f.name


def test_feature_shapes_are_realistic(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    users, _ = tables
    emb = users[[n for n in NAMES if n.startswith("user_emb_")]].to_numpy()
    assert abs(emb.mean()) < 0.05 and 0.95 < emb.std() < 1.05
    clicks = users["user_clicks_7d"]
    assert clicks.mean() > 1.5 * clicks.median()  # right-skewed counts
    assert (clicks == np.floor(clicks)).all()
    assert 0.04 < users["user_ctr_30d"].mean() < 0.09


def test_requests_satisfy_the_request_contract() -> None:
    requests = synthetic.generate_requests(SPEC, unknown_share=0.1)
    validator = jsonschema.Draft202012Validator(recommender_contract())
    for row in requests.to_dict(orient="records"):
        row = {**row, "timestamp": int(row["timestamp"]), "item_ids": list(row["item_ids"])}
        validator.validate(row)
    lengths = requests["item_ids"].map(len)
    assert lengths.min() >= 1 and lengths.max() <= synthetic.MAX_ITEMS_PER_REQUEST
    assert requests["item_ids"].map(lambda ids: len(set(ids)) == len(ids)).all()
    start = int(SPEC.start.timestamp())
    assert requests["timestamp"].between(start, start + SPEC.days * 86400).all()
    assert requests["user_id"].str.startswith("u_new_").any()


def test_feature_matrix_follows_metadata_order_and_marks_unknown_as_nan(
    tables: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    users, items = tables
    x = feature_matrix(users, items, ["u_000005", "u_unknown", "u_000005"], ["i_000007", "i_000007", "i_nope"])
    assert x.shape == (3, 128) and x.dtype == np.float32
    user_row = users.set_index("user_id").loc["u_000005"]
    item_row = items.set_index("item_id").loc["i_000007"]
    expected = np.array([user_row[n] if n.startswith("user_") else item_row[n] for n in NAMES], dtype=np.float32)
    np.testing.assert_array_equal(x[0], expected)
    user_cols = [i for i, n in enumerate(NAMES) if n.startswith("user_")]
    item_cols = [i for i, n in enumerate(NAMES) if n.startswith("item_")]
    assert np.isnan(x[1, user_cols]).all() and not np.isnan(x[1, item_cols]).any()
    assert np.isnan(x[2, item_cols]).all() and not np.isnan(x[2, user_cols]).any()


def test_lookup_rejects_tables_without_a_feature(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    from modelops.errors import ContractError

    with pytest.raises(ContractError, match="item_price"):
        FeatureLookup.from_frames(tables[0], tables[1].drop(columns=["item_price"]))


def test_ground_truth_depends_on_embeddings_and_named_features(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    users, items = tables
    pairs = synthetic.explode_requests(synthetic.generate_requests(SPEC))
    x = feature_matrix(users, items, pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy())
    p = synthetic.true_click_probability(x, NAMES)
    assert ((p > 0) & (p < 1)).all() and 0.05 < p.mean() < 0.3
    cheaper = x.copy()
    cheaper[:, NAMES.index("item_price")] = 1.0
    assert (synthetic.true_click_probability(cheaper, NAMES) >= p - 1e-12).all()
    flipped = x.copy()
    flipped[:, [i for i, n in enumerate(NAMES) if n.startswith("item_emb_")]] *= -1
    assert not np.allclose(synthetic.true_click_probability(flipped, NAMES), p)
