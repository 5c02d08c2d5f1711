"""The generated suites validated by Spark: same verdicts and counts as pandas (small data)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from modelops.contracts import suites
from modelops.contracts.validation import ValidationReport, validate, validate_path
from modelops.example import synthetic
from modelops.example.tables import feature_matrix
from modelops.modelspec.recommender import recommender_features

pytestmark = pytest.mark.spark

FEATURES = recommender_features()
NAMES = [f.name for f in FEATURES]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from modelops.spark import spark_session

    session = spark_session("test-contracts-spark", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def _request_frame(spark: Any, frame: pd.DataFrame) -> Any:
    rows = [(r.user_id, None if r.item_ids is None else list(r.item_ids), r.timestamp) for r in frame.itertuples()]
    return spark.createDataFrame(rows, "user_id string, item_ids array<string>, timestamp bigint")


BAD = pd.DataFrame(
    {
        # "u_7\n": ECMA-262's $ is the very end; Python's re and Java's regex (Spark's rlike) would
        # match before the newline if the pattern were not made portable.
        "user_id": ["u_1", "u 2", None, "u_4", "u" * 65, "u_6", "u_7\n"],
        "item_ids": [["i_1"], ["i_2"], ["i_3"], [], ["i_5", "i" * 33], None, ["i_7"]],
        "timestamp": [1764460800, 1764460800, 1764460800, 5, 1764460800, 1764460800, 1764460800],
    }
)


def _failures(report: ValidationReport) -> dict[tuple[str, str | None], int | None]:
    return {(o.expectation, o.column): o.unexpected_count for o in report.failed}


def test_good_requests_pass_with_spark(spark: Any) -> None:
    requests = synthetic.generate_requests(synthetic.WorldSpec(seed=2, n_requests=150), unknown_share=0.05)
    report = validate(_request_frame(spark, requests), suites.request_suite())
    assert report.engine == "spark" and report.success, report.summary()


def test_bad_requests_fail_the_same_expectations_as_pandas(spark: Any) -> None:
    suite = suites.request_suite()
    on_spark = validate(_request_frame(spark, BAD), suite)
    on_pandas = validate(BAD, suite)
    assert (
        _failures(on_spark)
        == _failures(on_pandas)
        == {
            ("expect_column_values_to_not_be_null", "user_id"): 1,
            ("expect_column_values_to_not_be_null", "item_ids"): 1,
            ("expect_column_value_lengths_to_be_between", "user_id"): 1,
            ("expect_column_values_to_match_regex", "user_id"): 2,
            ("expect_column_list_lengths_to_be_between", "item_ids"): 1,
            ("expect_column_list_element_lengths_to_be_between", "item_ids"): 1,
            ("expect_column_values_to_be_between", "timestamp"): 1,
        }
    )


def test_csv_with_json_list_cells_is_read_and_validated(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "requests.csv"
    path.write_text('user_id,item_ids,timestamp\nu_1,"[""i_1"",""i_2""]",1764460800\nu_2,"[]",1764460800\n')
    report = validate_path(path, "requests", engine="spark", spark=spark)
    assert report.row_count == 2
    assert _failures(report) == {("expect_column_list_lengths_to_be_between", "item_ids"): 1}


def test_feature_suite_with_spark_names_the_broken_columns(spark: Any) -> None:
    spec = synthetic.WorldSpec(seed=4, n_users=200, n_items=100, n_requests=40)
    users, items = synthetic.generate_tables(FEATURES, spec)
    pairs = synthetic.explode_requests(synthetic.generate_requests(spec))
    frame = pd.DataFrame(
        feature_matrix(users, items, pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy()).astype(np.float64),
        columns=NAMES,
    )
    frame.loc[:2, "item_price"] = 9999.0
    frame.loc[: len(frame) // 5, "user_age_days"] = np.nan
    subset = [f for f in FEATURES if f.name in {"item_price", "user_age_days", "user_ctr_30d", "item_emb_00"}]
    suite = suites.feature_suite_from_metadata(subset, custom=suites.load_custom_expectations())
    report = validate(spark.createDataFrame(frame), suite)
    assert set(_failures(report)) == {
        ("expect_column_values_to_be_between", "item_price"),
        ("expect_column_values_to_not_be_null", "user_age_days"),
    }
    assert _failures(report)[("expect_column_values_to_be_between", "item_price")] == 3
    # Spark reads the verdicts first and the detail of the failures only: the failures carry the
    # same counts, percents and examples as pandas' one pass, the statistics cover every expectation.
    on_pandas = validate(frame, suite)
    detail = [(o.expectation, o.column, o.unexpected_count, o.unexpected_percent, o.examples) for o in report.failed]
    assert detail == [(o.expectation, o.column, o.unexpected_count, o.unexpected_percent, o.examples)
                      for o in on_pandas.failed]
    assert report.statistics == on_pandas.statistics and len(report.outcomes) == len(suite.expectations)
    assert [(o.expectation, o.column, o.success) for o in report.outcomes] == [
        (o.expectation, o.column, o.success) for o in on_pandas.outcomes]
