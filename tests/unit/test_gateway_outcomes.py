"""Feedback bodies against a model's declared outcomes, the per-model token validity, and what a prediction logs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from modelops.gateway.feedback.outcomes import BadFeedback, Outcome, parse_outcome, prediction_columns
from modelops.gateway.feedback.tokens import (
    TOKEN_TTL_S,
    TokenClaims,
    TokenExpired,
    check_age,
    issue_token,
    verify_token,
)
from modelops.gateway.protocol.contract import compile_schema
from modelops.gateway.protocol.openapi import ACTION_FEEDBACK_SCHEMA, FEEDBACK_SCHEMA
from modelops.modelspec.spec import LABEL_FALLBACK_TTL_S, Label, ModelSpec, Outcomes

BINARY = Outcomes(label=Label(kind="binary", delay_s=3600))
NAMED = Outcomes(label=Label(kind="binary", classes=("stay", "churn")))
MULTI = Outcomes(label=Label(kind="multiclass", classes=("low", "mid", "high")))
NUMERIC = Outcomes(label=Label(kind="numeric", delay_s=86400))
ACTIONS = Outcomes(actions=("open", "dismiss"))


def body(**outcome: Any) -> dict[str, Any]:
    return {"feedback_token": "t", "timestamp": 1764460800, **outcome}


@pytest.mark.parametrize(("outcomes", "given", "expected"), [
    (BINARY, {"label": 1}, Outcome(label="1")),
    (BINARY, {"label": 0}, Outcome(label="0")),
    (BINARY, {"label": True}, Outcome(label="1")),
    (BINARY, {"label": False}, Outcome(label="0")),
    (NAMED, {"label": "churn"}, Outcome(label="1")),
    (NAMED, {"label": "stay"}, Outcome(label="0")),
    (MULTI, {"label": "mid"}, Outcome(label="mid")),
    (NUMERIC, {"value": 12.5}, Outcome(value=12.5)),
    (NUMERIC, {"value": -3}, Outcome(value=-3.0)),
    (ACTIONS, {"action": "dismiss"}, Outcome(action="dismiss")),
    (Outcomes(), {"action": "purchase"}, Outcome(action="purchase")),  # nothing declared: the platform's actions
])
def test_declared_outcomes_are_accepted(outcomes: Outcomes, given: dict[str, Any], expected: Outcome) -> None:
    assert parse_outcome(body(**given), outcomes, "m") == expected


@pytest.mark.parametrize(("outcomes", "given", "field", "rule", "example"), [
    (BINARY, {"label": 2}, "label", "binary label: 0, 1, true, false", '"label": 1'),
    (BINARY, {"label": "yes"}, "label", "binary label", '"label": 1'),
    (NAMED, {"label": "gone"}, "label", "binary label: 0, 1, true, false, stay, churn", '"label": "churn"'),
    (BINARY, {"value": 1.0}, "value", "binary label", '"label": 1'),
    (MULTI, {"label": "top"}, "label", "enum ['low', 'mid', 'high']", '"label": "low"'),
    (MULTI, {"label": 1}, "label", "enum", '"label": "low"'),
    (NUMERIC, {"value": "12"}, "value", "finite number", '"value": 12.5'),
    (NUMERIC, {"value": float("inf")}, "value", "finite number", '"value": 12.5'),
    (NUMERIC, {"value": True}, "value", "finite number", '"value": 12.5'),
    (NUMERIC, {"label": 3}, "label", "numeric label", '"value": 12.5'),
    (BINARY, {"action": "click"}, "action", "not declared", '"label": 1'),
    (ACTIONS, {"action": "click"}, "action", "enum ['open', 'dismiss']", '"action": "open"'),
    (ACTIONS, {"label": 1}, "label", "not declared", '"action": "open"'),
    (Outcomes(), {"value": 1.0}, "value", "not declared", '"action": "click"'),
    (BINARY, {}, "action", "required", '"action": "click"'),
    (BINARY, {"label": 1, "value": 1.0}, "value", "oneOf", '"label": 1'),
])
def test_bad_outcomes_name_the_field_the_rule_and_an_example(outcomes: Outcomes, given: dict[str, Any], field: str,
                                                             rule: str, example: str) -> None:
    with pytest.raises(BadFeedback) as caught:
        parse_outcome(body(**given), outcomes, "churn")
    violation = caught.value.violation
    assert violation.field == field and violation.rule.startswith(rule)
    assert f"(example: {example}" in violation.message
    assert violation.to_body()["error"] == "contract_violation"


def test_the_envelope_takes_every_form_and_the_recommender_keeps_its_checks() -> None:
    envelope, legacy = compile_schema(FEEDBACK_SCHEMA), compile_schema(ACTION_FEEDBACK_SCHEMA)
    for outcome in ({"action": "click"}, {"label": "mid"}, {"label": 1}, {"label": True}, {"value": 2.5}):
        assert envelope(body(**outcome), "$") is None
    assert envelope(body(value="x"), "$") is not None
    assert envelope(body(label=1, extra=1), "$") is not None
    bad = legacy(body(action="like"), "$")
    assert bad is not None and bad.field == "action" and bad.rule.startswith("enum")


@pytest.mark.parametrize(("outcomes", "validity"), [
    (Outcomes(), TOKEN_TTL_S),
    (ACTIONS, TOKEN_TTL_S),
    (BINARY, TOKEN_TTL_S),  # 2 x 1 h < 24 h
    (NUMERIC, 2 * 86400),
    (MULTI, LABEL_FALLBACK_TTL_S),  # no delay declared: 30 days
    (Outcomes(label=Label(kind="binary", delay_s=86400), token_ttl_s=60.0), 60.0),
    (Outcomes(actions=("click",), token_ttl_s=7 * 86400.0), 7 * 86400.0),
])
def test_token_validity_per_model(outcomes: Outcomes, validity: float) -> None:
    assert outcomes.validity_s(TOKEN_TTL_S) == validity


def test_the_age_is_checked_after_the_signature_with_the_models_validity() -> None:
    claims = TokenClaims("r", "churn", 3, "ab" * 6, 1_764_460_800.0)
    token = issue_token(b"k", claims)
    later = claims.issued_at + 3 * 86400
    assert verify_token(b"k", token, now=later, ttl_s=None) == claims  # the signature only
    with pytest.raises(TokenExpired):
        verify_token(b"k", token, now=later)  # the global 24 h, as before
    check_age(claims, now=later, ttl_s=NUMERIC.validity_s(TOKEN_TTL_S) + 86400)
    with pytest.raises(TokenExpired, match="valid 172800 s"):
        check_age(claims, now=later, ttl_s=NUMERIC.validity_s(TOKEN_TTL_S))


def _spec(outputs: list[int], outcomes: dict[str, Any]) -> ModelSpec:
    return ModelSpec.from_dict({"name": "m", "flavor": "onnx",
                                "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 3]}],
                                "outputs": [{"name": "out", "dtype": "FP32", "shape": outputs}],
                                "outcomes": outcomes})


def test_prediction_columns_of_a_labelled_models_one_row_answer() -> None:
    binary = _spec([-1, 2], {"label": {"kind": "binary"}})
    assert prediction_columns(binary, {"out": np.array([[0.25, 0.75]], np.float32)}, 1) == (0.75, None)
    assert prediction_columns(binary, {"out": np.array([[0.2, 0.8], [0.6, 0.4]])}, 2) == (None, None)
    assert prediction_columns(binary, {"out": np.array([[np.nan, 0.5]])}, 1) == (None, None)
    scored = _spec([-1, 1], {"label": {"kind": "binary"}})
    assert prediction_columns(scored, {"out": np.array([[0.125]])}, 1) == (0.125, None)
    numeric = _spec([-1, 1], {"label": {"kind": "numeric"}})
    assert prediction_columns(numeric, {"out": np.array([[41.5]])}, 1) == (41.5, None)
    multi = _spec([-1, 3], {"label": {"kind": "multiclass", "classes": ["a", "b", "c"]}})
    assert prediction_columns(multi, {"out": np.array([[0.5, 0.25, 0.25]])}, 1) == (None, [0.5, 0.25, 0.25])
    unlabelled = _spec([-1, 2], {"actions": ["click"]})
    assert prediction_columns(unlabelled, {"out": np.array([[0.25, 0.75]])}, 1) == (None, None)


@pytest.mark.parametrize(("outcomes", "message"), [
    ({"token_ttl_s": 0}, r"outcomes.token_ttl_s=0.*> 0"),
    ({"label": {"kind": "binary", "classes": ["yes"]}}, r"binary label names no classes or exactly 2"),
    ({"label": {"kind": "multiclass", "classes": ["a", "a", "b"]}}, r"distinct non-empty names"),
    ({"label": {"kind": "numeric", "classes": ["a"]}}, r"numeric label has no classes"),
])
def test_spec_refuses_bad_outcomes(outcomes: dict[str, Any], message: str) -> None:
    from modelops.errors import ContractError

    with pytest.raises(ContractError, match=message):
        _spec([-1, 2], outcomes)
