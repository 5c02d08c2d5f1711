"""Patterns read the ECMA-262 way in Python ``re`` and jsonschema-rs, checked against node's RegExp."""

from __future__ import annotations

import re

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelops.contracts.ecma import portable_pattern
from modelops.errors import ContractError
from tests.unit.ecma_oracle import ecma_search, node_or_skip

PATTERNS = [
    "^[A-Za-z0-9_-]+$",  # the request contract's user_id
    r"^\d+$", r"^\w+$", r"^\s*x\s*$", r"^a.b$", r"\bid\b", r"^[\w.-]{2,8}$", r"x$", r"^$", r"[$]", r"\$",
    r"^\S+$", r"\Bd", r"^[^\d]+$",
]
# The characters where the engines disagree: line ends, Unicode digits/letters/spaces.
EDGES = "aZ09_-.$ \t\n\r\x0b\x0c\xa0\x1c\x85\u0661\u00e9\u2028\u2029\u3000\ufeffid"


@settings(max_examples=15, deadline=None)
@given(st.lists(st.text(alphabet=EDGES, max_size=6), min_size=60, max_size=60))
def test_portable_patterns_match_what_ecma_262_matches(texts: list[str]) -> None:
    texts = [*texts, "u1\n", "u1", "id", "a\rb", "a\u2028b", "axb", "\u0661"]
    cases = [(p, t) for p in PATTERNS for t in texts]
    expected = ecma_search(cases)
    for (pattern, text), want in zip(cases, expected, strict=True):
        portable = portable_pattern(pattern)
        assert (re.search(portable, text) is not None) == want, ("python re", pattern, portable, text)
        rs = jsonschema_rs.validator_for({"type": "string", "pattern": portable})
        assert rs.is_valid(text) == want, ("jsonschema-rs", pattern, portable, text)


def test_the_reported_edge_cases() -> None:
    node_or_skip()
    anchored = portable_pattern("^[A-Za-z0-9_-]+$")
    assert re.search("^[A-Za-z0-9_-]+$", "u1\n") is not None  # why: Python's $ matches before a final newline
    assert re.search(anchored, "u1\n") is None and re.search(anchored, "u1") is not None
    assert ecma_search([("^[A-Za-z0-9_-]+$", "u1\n"), (r"^\d$", "\u0661")]) == [False, False]
    assert re.search(portable_pattern(r"^\d$"), "\u0661") is None


@pytest.mark.parametrize("pattern", [r"[\D]", r"[a\W]", r"[\S]", "[]", "[^]"])
def test_a_construct_without_portable_spelling_is_refused(pattern: str) -> None:
    with pytest.raises(ContractError, match="portable"):
        portable_pattern(pattern)
