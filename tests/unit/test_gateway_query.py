"""The predict query options (explain, top_k): declared once in the contract, read by the gateway and GX."""

from __future__ import annotations

import copy

import pytest

from modelops.contracts.suites import query_options, request_suite_from_schema
from modelops.errors import ContractError
from modelops.gateway.protocol.contract import compile_contract
from modelops.gateway.protocol.openapi import build_openapi
from modelops.modelspec.recommender import recommender_contract


@pytest.mark.parametrize(("query", "expected"), [
    (b"", {"explain": False, "top_k": 5}),
    (b"explain=true", {"explain": True, "top_k": 5}),
    (b"explain=false&top_k=12", {"explain": False, "top_k": 12}),
])
def test_options_are_converted_and_defaulted(query: bytes, expected: dict[str, object]) -> None:
    contract = compile_contract(recommender_contract()).query
    assert contract is not None
    assert contract.parse(query) == (expected, None)


@pytest.mark.parametrize(("query", "field", "rule", "example"), [
    (b"explain=yes", "explain", "type boolean", "true"),
    (b"explain=1", "explain", "type boolean", "true"),
    (b"top_k=0", "top_k", "minimum 1", "5"),
    (b"top_k=129", "top_k", "maximum 128", "5"),
    (b"top_k=five", "top_k", "type integer", "5"),
    (b"explain=true&topk=3", "topk", "additionalProperties false", "explain"),
])
def test_a_bad_option_names_the_field_the_rule_and_an_example(query: bytes, field: str, rule: str,
                                                              example: str) -> None:
    contract = compile_contract(recommender_contract()).query
    assert contract is not None
    _options, violation = contract.parse(query)
    assert violation is not None
    assert (violation.field, violation.rule) == (field, rule)
    assert example in violation.message


def test_gx_suite_and_openapi_follow_the_declaration() -> None:
    schema = recommender_contract()
    assert query_options(schema) == {"explain": {"type": "boolean", "default": False},
                                     "top_k": {"type": "integer", "minimum": 1, "maximum": 128, "default": 5}}
    suite = request_suite_from_schema(schema)
    assert suite.meta["query_options"]["top_k"]["maximum"] == 128
    parameters = build_openapi(schema, max_body_bytes=1024)["paths"]["/v1/models/{model}/predict"]["post"][
        "parameters"]
    declared = {p["name"]: p["schema"] for p in parameters if p["in"] == "query"}
    assert declared == {"explain": {"type": "boolean", "default": False},
                        "top_k": {"type": "integer", "minimum": 1, "maximum": 128, "default": 5}}


def test_gx_refuses_an_option_rule_it_cannot_name() -> None:
    schema = copy.deepcopy(recommender_contract())
    schema["$defs"]["query"]["properties"]["top_k"]["multipleOf"] = 2
    with pytest.raises(ContractError, match="multipleOf"):
        request_suite_from_schema(schema)
    schema["$defs"]["other"] = {}
    with pytest.raises(ContractError, match="only 'query'"):
        query_options(schema)
