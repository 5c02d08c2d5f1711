"""The edge contract: ``expectations/request.schema.json`` compiled once into fast checks.

The JSON Schema file is the single source. :func:`compile_schema` turns the subset of
JSON Schema 2020-12 keywords the contract uses into a tree of small closures, so a
request is checked with plain Python comparisons instead of a generic validator
(``jsonschema`` costs tens of microseconds per document; these checks a few). A keyword
the compiler does not know is refused at compile time, never silently ignored, and a
unit test proves that the compiled checks agree with ``jsonschema`` on many generated
documents.

The first violation found is reported as a :class:`Violation`: the field (``item_ids[3]``),
the rule (``maxLength 32``), the offending value and a message with an example.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelops.config import PROJECT_ROOT
from modelops.errors import ContractError

DEFAULT_SCHEMA_FILE = PROJECT_ROOT / "expectations" / "request.schema.json"

_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "examples", "default"})
_SUPPORTED = frozenset({
    "type", "properties", "required", "additionalProperties", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "items", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "enum", "const",
}) | _ANNOTATIONS
_SHOWN_VALUE_CHARS = 200


@dataclass(frozen=True)
class Violation:
    """One broken rule of the contract.

    Attributes:
        field: where, as a path: ``user_id``, ``item_ids[3]``; ``$`` for the document itself.
        rule: the JSON Schema rule with its parameter: ``maxLength 32``, ``required``.
        value: the offending value (shortened when long); None for a missing field.
        message: a sentence for people, with an example of a good value when the schema has one.
    """

    field: str
    rule: str
    value: Any
    message: str

    def to_body(self) -> dict[str, Any]:
        """The JSON body of the 400 answer."""
        return {"error": "contract_violation", "field": self.field, "rule": self.rule,
                "value": _shown(self.value), "message": self.message}


Check = Callable[[Any, str], "Violation | None"]
"""A compiled check: ``(value, path) -> first violation or None``."""


def _shown(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _SHOWN_VALUE_CHARS:
        return value[:_SHOWN_VALUE_CHARS] + "…"
    if isinstance(value, (list, dict)):
        text = json.dumps(value, default=str)
        return value if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "…"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    """JSON Schema type test (2020-12: 1.0 is an integer, a boolean is not a number)."""
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return _json_type(value) == name


def _example(schema: Mapping[str, Any]) -> str:
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return f" (example: {json.dumps(examples[0])})"
    return ""


def _child(path: str, key: str) -> str:
    return key if path == "$" else f"{path}.{key}"


def compile_schema(schema: Mapping[str, Any], *, where: str = "#") -> Check:
    """Compile a JSON Schema (the contract's subset of 2020-12) into one check.

    Raises:
        ContractError: the schema uses a keyword this compiler does not implement.
    """
    unknown = sorted(set(schema) - _SUPPORTED)
    if unknown:
        raise ContractError(
            f"request schema {where}: keywords {unknown} are not supported by the gateway's compiler "
            f"(supported: {sorted(_SUPPORTED - _ANNOTATIONS)})"
        )
    checks: list[Check] = []
    example = _example(schema)
    if "type" in schema:
        checks.append(_type_check(schema["type"], example))
    if "enum" in schema or "const" in schema:
        checks.append(_enum_check(schema, example))
    checks.extend(_string_checks(schema, example))
    checks.extend(_number_checks(schema, example))
    checks.extend(_array_checks(schema, example, where))
    checks.extend(_object_checks(schema, where))
    if len(checks) == 1:
        return checks[0]

    def check_all(value: Any, path: str) -> Violation | None:
        for check in checks:
            found = check(value, path)
            if found is not None:
                return found
        return None

    return check_all


def _type_check(type_: Any, example: str) -> Check:
    names = [type_] if isinstance(type_, str) else list(type_)
    rule = "type " + "|".join(names)

    def check(value: Any, path: str) -> Violation | None:
        for name in names:
            if _is_type(value, name):
                return None
        return Violation(path, rule, value, f"{path} must be of type {'|'.join(names)}, "
                                            f"got {_json_type(value)}{example}")

    return check


def _enum_check(schema: Mapping[str, Any], example: str) -> Check:
    allowed = [schema["const"]] if "const" in schema else list(schema["enum"])
    rule = f"const {json.dumps(allowed[0])}" if "const" in schema else f"enum {json.dumps(allowed)}"

    def same(a: Any, b: Any) -> bool:
        return (_json_type(a) == _json_type(b) and a == b) or (
            _is_type(a, "number") and _is_type(b, "number") and a == b)

    def check(value: Any, path: str) -> Violation | None:
        if any(same(value, option) for option in allowed):
            return None
        return Violation(path, rule, value, f"{path} must be one of {json.dumps(allowed)}")

    return check


def _string_checks(schema: Mapping[str, Any], example: str) -> list[Check]:
    checks: list[Check] = []
    if "minLength" in schema:
        lo = int(schema["minLength"])

        def min_length(value: Any, path: str) -> Violation | None:
            if isinstance(value, str) and len(value) < lo:
                return Violation(path, f"minLength {lo}", value,
                                 f"{path} must have at least {lo} characters{example}")
            return None

        checks.append(min_length)
    if "maxLength" in schema:
        hi = int(schema["maxLength"])

        def max_length(value: Any, path: str) -> Violation | None:
            if isinstance(value, str) and len(value) > hi:
                return Violation(path, f"maxLength {hi}", value,
                                 f"{path} must have at most {hi} characters, got {len(value)}{example}")
            return None

        checks.append(max_length)
    if "pattern" in schema:
        pattern = str(schema["pattern"])
        search = re.compile(pattern).search  # JSON Schema patterns are unanchored searches

        def match(value: Any, path: str) -> Violation | None:
            if isinstance(value, str) and search(value) is None:
                return Violation(path, f"pattern {pattern}", value,
                                 f"{path} must match {pattern}{example}")
            return None

        checks.append(match)
    return checks


def _number_checks(schema: Mapping[str, Any], example: str) -> list[Check]:
    checks: list[Check] = []
    bounds: list[tuple[str, Callable[[float, float], bool], str]] = [
        ("minimum", lambda v, b: v >= b, ">="), ("maximum", lambda v, b: v <= b, "<="),
        ("exclusiveMinimum", lambda v, b: v > b, ">"), ("exclusiveMaximum", lambda v, b: v < b, "<"),
    ]
    for keyword, ok, sign in bounds:
        if keyword not in schema:
            continue
        checks.append(_bound(keyword, schema[keyword], ok, sign, example))
    return checks


def _bound(keyword: str, bound: Any, ok: Callable[[Any, Any], bool], sign: str, example: str) -> Check:
    rule = f"{keyword} {bound}"

    def check(value: Any, path: str) -> Violation | None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not ok(value, bound):
            return Violation(path, rule, value, f"{path} must be {sign} {bound}{example}")
        return None

    return check


def _array_checks(schema: Mapping[str, Any], example: str, where: str) -> list[Check]:
    checks: list[Check] = []
    if "minItems" in schema:
        lo = int(schema["minItems"])

        def min_items(value: Any, path: str) -> Violation | None:
            if isinstance(value, list) and len(value) < lo:
                return Violation(path, f"minItems {lo}", value, f"{path} must have at least {lo} items{example}")
            return None

        checks.append(min_items)
    if "maxItems" in schema:
        hi = int(schema["maxItems"])

        def max_items(value: Any, path: str) -> Violation | None:
            if isinstance(value, list) and len(value) > hi:
                return Violation(path, f"maxItems {hi}", f"<{len(value)} items>",
                                 f"{path} must have at most {hi} items, got {len(value)}")
            return None

        checks.append(max_items)
    if "items" in schema:
        item_check = compile_schema(schema["items"], where=f"{where}/items")

        def items(value: Any, path: str) -> Violation | None:
            if isinstance(value, list):
                for index, item in enumerate(value):
                    found = item_check(item, f"{path}[{index}]")
                    if found is not None:
                        return found
            return None

        checks.append(items)
    return checks


def _object_checks(schema: Mapping[str, Any], where: str) -> list[Check]:
    checks: list[Check] = []
    properties: dict[str, Check] = {
        name: compile_schema(sub, where=f"{where}/properties/{name}")
        for name, sub in dict(schema.get("properties", {})).items()
    }
    prop_examples = {name: _example(sub) for name, sub in dict(schema.get("properties", {})).items()}
    if "required" in schema:
        required = [str(r) for r in schema["required"]]

        def check_required(value: Any, path: str) -> Violation | None:
            if isinstance(value, dict):
                for name in required:
                    if name not in value:
                        return Violation(_child(path, name), "required", None,
                                         f"{_child(path, name)} is required{prop_examples.get(name, '')}")
            return None

        checks.append(check_required)
    additional = schema.get("additionalProperties", True)
    if additional is not True:
        if additional is not False:
            raise ContractError(f"request schema {where}: additionalProperties must be true or false")
        allowed = frozenset(properties)

        def no_extra(value: Any, path: str) -> Violation | None:
            if isinstance(value, dict):
                for name in value:
                    if name not in allowed:
                        return Violation(_child(path, name), "additionalProperties false", value[name],
                                         f"{_child(path, name)} is not allowed; allowed fields: "
                                         f"{sorted(allowed)}")
            return None

        checks.append(no_extra)
    if properties:
        pairs = tuple(properties.items())

        def check_properties(value: Any, path: str) -> Violation | None:
            if isinstance(value, dict):
                for name, check in pairs:
                    if name in value:
                        found = check(value[name], _child(path, name))
                        if found is not None:
                            return found
            return None

        checks.append(check_properties)
    return checks


@dataclass(frozen=True)
class RequestContract:
    """The compiled contract plus the schema it came from (served in the OpenAPI document)."""

    schema: Mapping[str, Any]
    check: Check

    def validate(self, document: Any) -> Violation | None:
        """The first violation of ``document``, or None when it keeps the contract."""
        return self.check(document, "$")


def load_contract(path: Path | str = DEFAULT_SCHEMA_FILE) -> RequestContract:
    """Read and compile the request contract once.

    Raises:
        ContractError: the file is unreadable, not JSON, or uses an unsupported keyword.
    """
    try:
        schema = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ContractError(f"cannot read request schema {path}: {exc}") from exc
    except ValueError as exc:
        raise ContractError(f"request schema {path} is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ContractError(f"request schema {path}: must be a JSON object")
    return RequestContract(schema, compile_schema(schema))
