"""The GX suites generated from the request JSON Schema and the feature metadata (pandas engine)."""

from __future__ import annotations

import json
from typing import Any

import great_expectations as gx
import numpy as np
import pandas as pd
import pytest

from modelops.contracts import suites
from modelops.contracts.custom_expectations import (
    CUSTOM_EXPECTATION_TYPES,
    arrow_element_lengths_ok,
    arrow_list_lengths_ok,
    element_lengths_ok,
    list_length_ok,
)
from modelops.contracts.ecma import portable_pattern
from modelops.contracts.validation import ValidationReport, validate
from modelops.errors import ContractError
from modelops.modelspec.recommender import recommender_contract, recommender_features

SCHEMA = recommender_contract()
PROPS = SCHEMA["properties"]


def _by_type(suite: gx.ExpectationSuite) -> dict[tuple[str, str | None], Any]:
    return {(e.expectation_type, getattr(e, "column", None)): e for e in suite.expectations}


def test_request_suite_has_one_expectation_per_schema_rule() -> None:
    found = _by_type(suites.request_suite())
    columns = found[("expect_table_columns_to_match_set", None)]
    assert sorted(columns.column_set) == sorted(PROPS) and columns.exact_match is True
    for column in SCHEMA["required"]:
        assert ("expect_column_to_exist", column) in found
        assert ("expect_column_values_to_not_be_null", column) in found
    user = PROPS["user_id"]
    lengths = found[("expect_column_value_lengths_to_be_between", "user_id")]
    assert (lengths.min_value, lengths.max_value) == (user["minLength"], user["maxLength"])
    assert found[("expect_column_values_to_match_regex", "user_id")].regex == portable_pattern(user["pattern"])
    items = found[("expect_column_list_lengths_to_be_between", "item_ids")]
    assert (items.min_value, items.max_value) == (PROPS["item_ids"]["minItems"], PROPS["item_ids"]["maxItems"])
    elements = found[("expect_column_list_element_lengths_to_be_between", "item_ids")]
    item_spec = PROPS["item_ids"]["items"]
    assert (elements.min_value, elements.max_value) == (item_spec["minLength"], item_spec["maxLength"])
    stamp = found[("expect_column_values_to_be_between", "timestamp")]
    assert (stamp.min_value, stamp.max_value) == (PROPS["timestamp"]["minimum"], PROPS["timestamp"]["maximum"])
    assert "int64" in found[("expect_column_values_to_be_in_type_list", "timestamp")].type_list
    assert all(e.meta.get("rule", "").startswith("#") for e in suites.request_suite().expectations)


def test_generator_follows_the_schema_not_constants() -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["item_ids"]["maxItems"] = 7
    schema["properties"]["user_id"]["pattern"] = "^u_[0-9]+$"
    found = _by_type(suites.request_suite_from_schema(schema))
    assert found[("expect_column_list_lengths_to_be_between", "item_ids")].max_value == 7
    assert found[("expect_column_values_to_match_regex", "user_id")].regex == "^u_[0-9]+(?![\\s\\S])"


@pytest.mark.parametrize(
    ("where", "keyword", "value"),
    [("user_id", "format", "email"), ("timestamp", "multipleOf", 60), ("item_ids", "uniqueItems", True)],
)
def test_an_untranslatable_rule_is_an_error_not_a_silent_skip(where: str, keyword: str, value: Any) -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"][where][keyword] = value
    with pytest.raises(ContractError, match=keyword):
        suites.request_suite_from_schema(schema)


@pytest.mark.parametrize("name", ["requests", "features"])
def test_suites_round_trip_as_json_keeping_custom_expectations(name: str) -> None:
    suite = suites.load_suite(name)
    document = json.loads(json.dumps(suite.to_json_dict(), default=str))
    again = suites.suite_from_json(document)
    assert [e.expectation_type for e in again.expectations] == [e.expectation_type for e in suite.expectations]
    if name == "requests":
        assert set(CUSTOM_EXPECTATION_TYPES) <= {e.expectation_type for e in again.expectations}


def test_loading_a_suite_with_an_unknown_type_fails_loudly() -> None:
    document = suites.request_suite().to_json_dict()
    document["expectations"].append({"type": "expect_column_values_to_be_purple", "kwargs": {"column": "x"}})
    with pytest.raises(ContractError):
        suites.suite_from_json(document)


def test_list_predicates() -> None:
    assert list_length_ok(["a"], 1, 50) and list_length_ok(np.array(["a", "b"]), 1, 2)
    assert not list_length_ok([], 1, 50) and not list_length_ok(["a"] * 51, 1, 50)
    assert not list_length_ok("abc", 1, 50)
    assert element_lengths_ok(["a", "b" * 32], 1, 32)
    assert not element_lengths_ok(["", "a"], 1, 32) and not element_lengths_ok(["a" * 33], 1, 32)
    assert not element_lengths_ok([None], 1, 32) and not element_lengths_ok([3], 1, 32)


LIST_CASES = [["a"], [], ["a"] * 51, ["a", "b" * 32], ["", "a"], ["a" * 33], [None], ["x", None], None]


def test_vectorised_arrow_predicates_agree_with_the_python_ones() -> None:
    import pyarrow as pa

    array = pa.array(LIST_CASES, pa.list_(pa.string()))
    expected_lengths = [v is not None and list_length_ok(v, 1, 50) for v in LIST_CASES]
    expected_elements = [v is not None and element_lengths_ok(v, 1, 32) for v in LIST_CASES]
    assert arrow_list_lengths_ok(array, 1, 50).tolist() == expected_lengths
    assert arrow_element_lengths_ok(array, 1, 32).tolist() == expected_elements
    numbers = pa.array([[1], [], None], pa.list_(pa.int64()))
    assert arrow_element_lengths_ok(numbers, 1, 32).tolist() == [False, True, False]


def test_list_columns_are_validated_through_arrow_and_untypable_ones_as_objects() -> None:
    from modelops.contracts.validation import arrow_backed_lists

    frame = pd.DataFrame({"user_id": ["u"] * len(LIST_CASES), "item_ids": LIST_CASES, "timestamp": 1764460800})
    converted = arrow_backed_lists(frame)
    assert isinstance(converted["item_ids"].dtype, pd.ArrowDtype) and frame["item_ids"].dtype == object
    failed = {o.expectation: o.unexpected_count for o in validate(frame, suites.request_suite()).failed}
    assert failed["expect_column_list_lengths_to_be_between"] == 2
    assert failed["expect_column_list_element_lengths_to_be_between"] == 4

    mixed = pd.DataFrame({"user_id": ["u", "v"], "item_ids": [["a", 1], ["b"]], "timestamp": 1764460800})
    assert arrow_backed_lists(mixed)["item_ids"].dtype == object
    failed = {o.expectation: o.unexpected_count for o in validate(mixed, suites.request_suite()).failed}
    assert failed == {"expect_column_list_element_lengths_to_be_between": 1}


GOOD = pd.DataFrame(
    {
        "user_id": ["u_000001", "u-2", "U_" + "x" * 62],
        "item_ids": [["i_1"], ["i_2", "i_3"], [f"i_{k}" for k in range(50)]],
        "timestamp": [1764460800, 1609459200, 2524608000],
    }
)

# One broken rule per case: (column, bad value in row 0, the expectation that must fail).
BROKEN = [
    ("user_id", None, "expect_column_values_to_not_be_null"),
    ("user_id", "u" * 65, "expect_column_value_lengths_to_be_between"),
    ("user_id", "u 1", "expect_column_values_to_match_regex"),
    ("user_id", "u1\n", "expect_column_values_to_match_regex"),  # ECMA-262: $ is the end, not before a newline
    ("user_id", "u\u0661", "expect_column_values_to_match_regex"),  # an Arabic-Indic digit: not in [0-9]
    ("item_ids", None, "expect_column_values_to_not_be_null"),
    ("item_ids", [], "expect_column_list_lengths_to_be_between"),
    ("item_ids", [f"i_{k}" for k in range(51)], "expect_column_list_lengths_to_be_between"),
    ("item_ids", ["i_1", ""], "expect_column_list_element_lengths_to_be_between"),
    ("item_ids", ["i" * 33], "expect_column_list_element_lengths_to_be_between"),
    ("timestamp", 1609459199, "expect_column_values_to_be_between"),
    ("timestamp", 2524608001, "expect_column_values_to_be_between"),
]


def test_good_request_batch_passes() -> None:
    report = validate(GOOD, suites.request_suite())
    assert report.success, report.summary()
    assert len(report.outcomes) == len(suites.request_suite().expectations)


@pytest.fixture(scope="module")
def broken_reports() -> list[ValidationReport]:
    suite = suites.request_suite()
    reports = []
    for column, value, _ in BROKEN:
        frame = GOOD.copy()
        frame[column] = frame[column].astype(object)
        frame.at[0, column] = value
        reports.append(validate(frame, suite))
    return reports


@pytest.mark.parametrize("case", range(len(BROKEN)), ids=[f"{c}-{e}" for c, _, e in BROKEN])
def test_each_broken_rule_fails_exactly_its_expectation(case: int, broken_reports: list[ValidationReport]) -> None:
    column, _, expectation = BROKEN[case]
    report = broken_reports[case]
    assert not report.success
    assert [(o.expectation, o.column) for o in report.failed] == [(expectation, column)]
    failed = report.failed[0]
    assert failed.unexpected_count == 1
    assert failed.unexpected_percent == pytest.approx(100 / 3, rel=1e-3)


def test_extra_column_and_wrong_type_fail() -> None:
    frame = GOOD.assign(extra=1, timestamp=GOOD["timestamp"].astype(str))
    failed = {(o.expectation, o.column) for o in validate(frame, suites.request_suite()).failed}
    assert ("expect_table_columns_to_match_set", None) in failed
    assert ("expect_column_values_to_be_in_type_list", "timestamp") in failed


def test_missing_column_fails_exist_and_reports_it() -> None:
    report = validate(GOOD.drop(columns=["timestamp"]), suites.request_suite())
    failed = {(o.expectation, o.column) for o in report.failed}
    assert ("expect_column_to_exist", "timestamp") in failed
    assert ("expect_table_columns_to_match_set", None) in failed


FEATURES = recommender_features()


def test_feature_suite_covers_every_feature_and_merges_hand_written() -> None:
    suite = suites.feature_suite()
    found = _by_type(suite)
    for f in FEATURES:
        between = found[("expect_column_values_to_be_between", f.name)]
        assert (between.min_value, between.max_value) == (f.min, f.max)
        assert found[("expect_column_values_to_not_be_null", f.name)].mostly == suites.FEATURE_NOT_NULL_MOSTLY
        assert ("expect_column_to_exist", f.name) in found
        assert ("expect_column_values_to_be_in_type_list", f.name) in found
    custom = [e for e in suite.expectations if e.meta.get("source") == "features.custom.json"]
    assert [(e.expectation_type, e.column) for e in custom] == [("expect_column_mean_to_be_between", "user_ctr_30d")]


def test_bad_hand_written_expectation_is_rejected(tmp_path: Any) -> None:
    path = tmp_path / "custom.json"
    path.write_text(json.dumps({"expectations": [{"type": "expect_nothing_at_all", "kwargs": {}}]}))
    with pytest.raises(ContractError, match="expect_nothing_at_all"):
        suites.feature_suite(custom_file=path)
