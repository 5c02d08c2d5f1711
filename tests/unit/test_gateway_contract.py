"""The compiled request contract: every rule's error, and agreement with jsonschema."""

from __future__ import annotations

import copy
import random
from typing import Any

import jsonschema
import pytest

from modelops.errors import ContractError
from modelops.gateway.contract import compile_schema, load_contract

CONTRACT = load_contract()
GOOD: dict[str, Any] = {"user_id": "u_000123", "item_ids": ["i_1", "i_2", "i_3", "i_4"], "timestamp": 1764460800}


def _with(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is _DROP:
            del doc[key]
        else:
            doc[key] = value
    return doc


_DROP = object()


def test_good_request_passes() -> None:
    assert CONTRACT.validate(GOOD) is None
    assert CONTRACT.validate(_with(timestamp=1764460800.0)) is None  # 2020-12: 1.0 is an integer


@pytest.mark.parametrize(
    ("doc", "field", "rule", "value"),
    [
        ([1, 2], "$", "type object", [1, 2]),
        (_with(user_id=_DROP), "user_id", "required", None),
        (_with(item_ids=_DROP), "item_ids", "required", None),
        (_with(timestamp=_DROP), "timestamp", "required", None),
        (_with(extra=1), "extra", "additionalProperties false", 1),
        (_with(user_id=7), "user_id", "type string", 7),
        (_with(user_id=""), "user_id", "minLength 1", ""),
        (_with(user_id="u" * 65), "user_id", "maxLength 64", "u" * 65),
        (_with(user_id="u 1"), "user_id", "pattern ^[A-Za-z0-9_-]+$", "u 1"),
        (_with(item_ids="i_1"), "item_ids", "type array", "i_1"),
        (_with(item_ids=[]), "item_ids", "minItems 1", []),
        (_with(item_ids=[f"i{k}" for k in range(51)]), "item_ids", "maxItems 50", "<51 items>"),
        (_with(item_ids=["a", "b", "c", "x" * 33]), "item_ids[3]", "maxLength 32", "x" * 33),
        (_with(item_ids=["a", ""]), "item_ids[1]", "minLength 1", ""),
        (_with(item_ids=["a", None]), "item_ids[1]", "type string", None),
        (_with(timestamp="1764460800"), "timestamp", "type integer", "1764460800"),
        (_with(timestamp=1764460800.5), "timestamp", "type integer", 1764460800.5),
        (_with(timestamp=True), "timestamp", "type integer", True),
        (_with(timestamp=1609459199), "timestamp", "minimum 1609459200", 1609459199),
        (_with(timestamp=2524608001), "timestamp", "maximum 2524608000", 2524608001),
    ],
)
def test_each_rule_names_field_rule_and_value(doc: Any, field: str, rule: str, value: Any) -> None:
    found = CONTRACT.validate(doc)
    assert found is not None
    body = found.to_body()
    assert (body["error"], body["field"], body["rule"], body["value"]) == ("contract_violation", field, rule, value)
    assert field in body["message"] or field == "$"


def test_long_values_are_shortened_in_the_body() -> None:
    found = CONTRACT.validate(_with(user_id="x" * 5000))
    assert found is not None
    assert len(found.to_body()["value"]) < 300


def test_unknown_keyword_is_refused_at_compile_time() -> None:
    with pytest.raises(ContractError, match="uniqueItems"):
        compile_schema({"type": "array", "uniqueItems": True})


_STRINGS = ["", "a", "u_1", "A-b_9", "x" * 32, "x" * 33, "y" * 64, "y" * 65, "é", "a b", "a\n", "1", "ünï",
            "i" * 31]
_SCALARS: list[Any] = [None, True, False, 0, -1, 1.5, 1.0, 1609459200, 1609459199, 2524608000, 2524608001,
                       1764460800.0, 1e300, "s", [], {}]


def _mutate(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        kind = rng.randrange(9)
        key = rng.choice(["user_id", "item_ids", "timestamp"])
        if kind == 0:
            doc.pop(key, None)
        elif kind == 1:
            doc[rng.choice(["extra", "User_id", ""])] = rng.choice(_SCALARS)
        elif kind == 2:
            doc[key] = rng.choice(_SCALARS + _STRINGS)
        elif kind == 3:
            doc["user_id"] = rng.choice(_STRINGS)
        elif kind == 4:
            doc["item_ids"] = [rng.choice(_STRINGS) for _ in range(rng.choice([0, 1, 2, 5, 50, 51]))]
        elif kind == 5 and isinstance(doc.get("item_ids"), list) and doc["item_ids"]:
            doc["item_ids"][rng.randrange(len(doc["item_ids"]))] = rng.choice(_SCALARS + _STRINGS)
        elif kind == 6:
            doc["timestamp"] = rng.choice([*_SCALARS, rng.randint(1_500_000_000, 2_600_000_000)])
        elif kind == 7:
            return rng.choice([[doc], "doc", 1, None, {}])  # type: ignore[return-value]
        else:
            doc["item_ids"] = ["".join(rng.choice("ab_-9 ") for _ in range(rng.randint(0, 40)))
                               for _ in range(rng.randint(1, 4))]
    return doc


def test_agrees_with_jsonschema_on_generated_documents() -> None:
    reference = jsonschema.Draft202012Validator(CONTRACT.schema)
    rng = random.Random(20261129)
    good = bad = 0
    for _ in range(3000):
        doc = _mutate(rng, GOOD)
        errors = list(reference.iter_errors(doc))
        found = CONTRACT.validate(doc)
        assert (found is None) == (not errors), (doc, found, [e.message for e in errors])
        if found is None:
            good += 1
            continue
        bad += 1
        # Our first violation is one of the errors jsonschema finds (same place, same keyword).
        seen = set()
        for error in errors:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
            if error.validator == "required":
                path = (path + "." if path else "") + str(error.message).split("'")[1]
            if error.validator == "additionalProperties":
                extra = [k for k in doc if k not in CONTRACT.schema["properties"]]
                seen.update((k, "additionalProperties") for k in extra)
            seen.add((path or "$", str(error.validator)))
        assert (found.field, found.rule.split()[0]) in seen, (doc, found, seen)
    assert good > 300 and bad > 1500  # the generator really exercises both sides
