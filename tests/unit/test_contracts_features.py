"""The feature suite on generated features: passes clean data, names the broken columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from modelops.contracts import suites
from modelops.contracts.validation import ValidationReport, validate
from modelops.example import synthetic
from modelops.example.tables import feature_matrix
from modelops.modelspec.recommender import recommender_features

FEATURES = recommender_features()
NAMES = [f.name for f in FEATURES]


@pytest.fixture(scope="module")
def features_frame() -> pd.DataFrame:
    spec = synthetic.WorldSpec(seed=3, n_users=300, n_items=200, n_requests=60)
    users, items = synthetic.generate_tables(FEATURES, spec)
    pairs = synthetic.explode_requests(synthetic.generate_requests(spec))
    matrix = feature_matrix(users, items, pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy())
    return pd.DataFrame(matrix.astype(np.float64), columns=NAMES)


def test_generated_features_pass_the_full_suite(features_frame: pd.DataFrame) -> None:
    report = validate(features_frame, suites.feature_suite())
    assert report.success, report.summary()
    assert len(report.outcomes) == 4 * len(FEATURES) + 1


@pytest.fixture(scope="module")
def broken(features_frame: pd.DataFrame) -> ValidationReport:
    frame = features_frame.copy()
    frame.loc[:4, "item_price"] = 9999.0  # above max 5000
    frame.loc[: len(frame) // 10, "user_age_days"] = np.nan  # ~10 % missing > 1 % allowed
    frame["user_ctr_30d"] = 0.5  # in range, but the hand-written mean band fails
    frame = frame.drop(columns=["item_emb_47"])
    subset = [
        f for f in FEATURES if f.name in {"item_price", "user_age_days", "user_ctr_30d", "item_emb_47", "user_emb_00"}
    ]
    suite = suites.feature_suite_from_metadata(subset, custom=suites.load_custom_expectations())
    return validate(frame, suite)


def test_broken_features_fail_with_the_right_names(broken: ValidationReport) -> None:
    failed = {(o.expectation, o.column) for o in broken.failed}
    assert failed == {
        ("expect_column_values_to_be_between", "item_price"),
        ("expect_column_values_to_not_be_null", "user_age_days"),
        ("expect_column_mean_to_be_between", "user_ctr_30d"),
        ("expect_column_to_exist", "item_emb_47"),
        ("expect_column_values_to_be_in_type_list", "item_emb_47"),
        ("expect_column_values_to_be_between", "item_emb_47"),
        ("expect_column_values_to_not_be_null", "item_emb_47"),
    }
    price = next(o for o in broken.failed if o.column == "item_price")
    assert price.unexpected_count == 5 and price.examples[0] == "9999.0"
    text = broken.summary()
    assert "item_price" in text and "5 unexpected" in text


def test_report_serialises_and_renders(broken: ValidationReport) -> None:
    import json

    from modelops.contracts.report import render_html

    document = json.loads(json.dumps(broken.to_json_dict()))
    assert document["success"] is False and document["gx_result"]["results"]
    page = render_html(broken)
    assert page.startswith("<!DOCTYPE html>") and "FAILED" in page and "item_price" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page
