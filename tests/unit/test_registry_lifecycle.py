"""The release lifecycle rules: run URIs, lineage tags, stage transitions, stage ↔ alias."""

from __future__ import annotations

import pytest

from modelops.errors import RegistryError
from modelops.registry.lifecycle import (
    CHALLENGER,
    CHAMPION,
    TAG,
    Lineage,
    alias_for,
    check_transition,
    lineage_tags,
    parse_run_uri,
)


def test_run_uri_is_parsed() -> None:
    parsed = parse_run_uri("runs:/0a1b2c3d/onnx/")
    assert (parsed.run_id, parsed.path, str(parsed)) == ("0a1b2c3d", "onnx", "runs:/0a1b2c3d/onnx")


@pytest.mark.parametrize("uri", ["models:/ranker/1", "runs:/abc", "runs://onnx", "s3://bucket/x", ""])
def test_bad_run_uri_names_the_expected_form(uri: str) -> None:
    with pytest.raises(RegistryError, match=r"runs:/<run_id>/<artifact path>"):
        parse_run_uri(uri)


def test_lineage_tags_only_for_fields_set() -> None:
    tags = lineage_tags(Lineage(sha256="ab" * 32, triton_version=3, contract_passed=False))
    assert tags == {TAG["sha256"]: "ab" * 32, TAG["triton_version"]: "3", TAG["contract_passed"]: "false"}
    assert lineage_tags(Lineage()) == {}


def test_aliases_follow_stages() -> None:
    assert (alias_for("Staging"), alias_for("Production"), alias_for("None"), alias_for("Archived")) == (
        CHALLENGER, CHAMPION, None, None)


@pytest.mark.parametrize(
    ("current", "target"),
    [("None", "Staging"), ("Staging", "Production"), ("Production", "Archived"), ("Staging", "Archived"),
     ("Archived", "Staging"), ("Production", "Production")],
)
def test_allowed_transitions(current: str, target: str) -> None:
    check_transition(current, target)  # type: ignore[arg-type]


@pytest.mark.parametrize(("current", "target"), [("None", "Production"), ("Archived", "Production"),
                                                 ("Production", "Staging")])
def test_skipping_the_gate_is_refused(current: str, target: str) -> None:
    with pytest.raises(RegistryError, match=f"{current} -> {target} is not allowed"):
        check_transition(current, target)  # type: ignore[arg-type]
