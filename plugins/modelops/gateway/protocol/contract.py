"""The edge contract: a request JSON Schema checked exactly as JSON Schema 2020-12 says.

The schema is rendered from the model's spec (the feature-lookup form's from the recommender's spec:
:func:`modelops.modelspec.recommender.recommender_contract`), the single source. The decision is jsonschema-rs's (full
2020-12, ECMA-262 patterns; about a microsecond per request, cheaper than the
hand-written closures it replaced, which used Python ``re`` and so accepted
``"u1\\n"`` for ``^[A-Za-z0-9_-]+$``). Patterns are first rewritten by
:func:`modelops.contracts.ecma.portable_pattern`, the same rewrite the GX request suite
uses, so the gateway, ``modelops contracts validate`` and the nightly Spark check read a
pattern the same way. A keyword outside the 2020-12 vocabulary (a typo such as
``maxlength``) is refused when the contract loads, never silently ignored.

The first violation is reported as a :class:`Violation`: the field (``item_ids[3]``),
the rule (``maxLength 32``), the offending value and a message with an example.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import jsonschema_rs

from modelops.contracts.ecma import portable_pattern
from modelops.errors import ContractError

_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then",
                         "else", "unevaluatedItems", "unevaluatedProperties"})
_VOCABULARY = _SCHEMA_MAPS | _SCHEMA_LISTS | _SCHEMA_ONE | frozenset({
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary", "$comment",
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
    "maxProperties", "minProperties", "required", "dependentRequired", "format", "contentEncoding",
    "contentMediaType", "contentSchema", "title", "description", "default", "deprecated", "readOnly",
    "writeOnly", "examples",
})
"""The JSON Schema 2020-12 keywords (core, applicator, unevaluated, validation, format, content, meta-data)."""
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


def _portable(schema: Any, where: str) -> Any:
    """A copy of ``schema`` with every keyword checked and every pattern made portable."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping):
        raise ContractError(f"request schema {where}: a schema must be an object or a boolean, "
                            f"got {type(schema).__name__}")
    unknown = sorted(set(schema) - _VOCABULARY)
    if unknown:
        raise ContractError(f"request schema {where}: keywords {unknown} are not JSON Schema 2020-12 "
                            "keywords (a misspelt rule would be ignored; example: maxLength, not maxlength)")
    out = dict(schema)
    if isinstance(out.get("pattern"), str):
        out["pattern"] = portable_pattern(out["pattern"])
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _portable(sub, f"{where}/{key}/{name}") for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_portable(sub, f"{where}/{key}/{index}") for index, sub in enumerate(value)]
        elif key in _SCHEMA_ONE:
            out[key] = _portable(value, f"{where}/{key}")
    return out


def _at(schema: Any, pointer: list[str | int]) -> Any:
    node = schema
    for part in pointer:
        node = node[part] if isinstance(node, Mapping) or isinstance(part, int) else node[int(part)]
    return node


def _example(schema: Any) -> str:
    examples = schema.get("examples") if isinstance(schema, Mapping) else None
    if isinstance(examples, list) and examples:
        return f" (example: {json.dumps(examples[0])})"
    return ""


def _field(path: list[str | int]) -> str:
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    return text or "$"


def _child(path: str, key: str) -> str:
    return key if path == "$" else f"{path}.{key}"


def _violation(error: Any, schema: Mapping[str, Any], base: str) -> Violation:
    """The people-facing violation for one jsonschema-rs error (the rule as written in ``schema``)."""
    keyword = str(error.schema_path[-1]) if error.schema_path else "false"
    parent = _at(schema, list(error.schema_path[:-1]))
    parameter = parent.get(keyword) if isinstance(parent, Mapping) else None
    relative = _field(list(error.instance_path))
    if relative == "$":
        field = base
    elif base == "$":
        field = relative
    else:
        field = f"{base}{relative}" if relative.startswith("[") else f"{base}.{relative}"
    value = error.instance
    example = _example(parent)
    name = type(error.kind).__name__
    if name == "Required":
        missing = str(error.kind.property)
        where = _child(field, missing)
        sub = parent.get("properties", {}).get(missing) if isinstance(parent, Mapping) else None
        return Violation(where, "required", None, f"{where} is required{_example(sub)}")
    if name == "AdditionalProperties":
        extra = str(error.kind.unexpected[0])
        where = _child(field, extra)
        allowed = sorted(parent.get("properties", {})) if isinstance(parent, Mapping) else []
        return Violation(where, "additionalProperties false", value[extra],
                         f"{where} is not allowed; allowed fields: {allowed}")
    shown = parameter if isinstance(parameter, str) or type(parameter) in (int, float) else json.dumps(parameter)
    rule = f"{keyword} {shown}"
    if name == "Type":
        names = [str(n) for n in (parameter if isinstance(parameter, list) else [parameter])]
        rule = "type " + "|".join(names)
        message = f"{field} must be of type {'|'.join(names)}, got {_json_type(value)}{example}"
    elif name == "MinLength":
        message = f"{field} must have at least {parameter} characters{example}"
    elif name == "MaxLength":
        message = f"{field} must have at most {parameter} characters, got {len(value)}{example}"
    elif name == "Pattern":
        message = f"{field} must match {parameter}{example}"
    elif name == "MinItems":
        message = f"{field} must have at least {parameter} items{example}"
    elif name == "MaxItems":
        value = f"<{len(value)} items>"
        message = f"{field} must have at most {parameter} items, got {len(error.instance)}"
    elif name in ("Minimum", "Maximum", "ExclusiveMinimum", "ExclusiveMaximum"):
        sign = {"Minimum": ">=", "Maximum": "<=", "ExclusiveMinimum": ">", "ExclusiveMaximum": "<"}[name]
        message = f"{field} must be {sign} {parameter}{example}"
    elif name in ("Enum", "Constant"):
        options: Any = [parameter] if name == "Constant" else parameter
        rule = f"const {json.dumps(parameter)}" if name == "Constant" else f"enum {json.dumps(parameter)}"
        message = f"{field} must be one of {json.dumps(options)}"
    else:
        message = f"{field}: {error.message}{example}"
    return Violation(field, rule, value, message)


def compile_schema(schema: Mapping[str, Any], *, where: str = "#") -> Check:
    """Compile a JSON Schema 2020-12 document into one check (``(value, path) -> Violation | None``).

    Raises:
        ContractError: the schema uses a keyword outside 2020-12, an invalid regex or a pattern
            without a portable spelling.
    """
    original = copy.deepcopy(dict(schema))
    try:
        validator = jsonschema_rs.Draft202012Validator(_portable(original, where))
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        raise ContractError(f"request schema {where}: not a valid JSON Schema 2020-12 document: {exc}") from exc
    is_valid = validator.is_valid

    def check(value: Any, path: str) -> Violation | None:
        try:
            if is_valid(value):
                return None
            error = next(iter(validator.iter_errors(value)))
        except ValueError as exc:  # a Python value JSON cannot carry (never from a parsed body)
            return Violation(path, "type", None, f"{path}: not a JSON value ({exc})")
        return _violation(error, original, path)

    return check


_INTEGER = re.compile(r"^-?[0-9]{1,18}$")


@dataclass(frozen=True)
class QueryContract:
    """The predict query options of ``#/$defs/query`` (``explain``, ``top_k``), read from a query string."""

    properties: Mapping[str, Mapping[str, Any]]
    check: Check
    defaults: Mapping[str, Any]

    def parse(self, query_string: bytes) -> tuple[dict[str, Any], Violation | None]:
        """The options with their defaults, or the first violation (field, rule, value, example).

        ``true``/``false`` become booleans and digits integers where the schema declares those
        types; anything else stays a string, so the schema names the field and the rule.
        """
        given: dict[str, Any] = {}
        for name, raw in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
            kind = self.properties.get(name, {}).get("type")
            if kind == "boolean" and raw in ("true", "false"):
                given[name] = raw == "true"
            elif kind == "integer" and _INTEGER.match(raw):
                given[name] = int(raw)
            else:
                given[name] = raw
        violation = self.check(given, "$") if given else None
        return {**self.defaults, **given}, violation


@dataclass(frozen=True)
class RequestContract:
    """The compiled contract plus the schema it came from (served in the OpenAPI document)."""

    schema: Mapping[str, Any]
    check: Check
    query: QueryContract | None = None

    def validate(self, document: Any) -> Violation | None:
        """The first violation of ``document``, or None when it keeps the contract."""
        return self.check(document, "$")


def load_contract(path: Path | str) -> RequestContract:
    """Read and compile a request contract from a JSON Schema file.

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
    return compile_contract(schema)


def compile_contract(schema: Mapping[str, Any]) -> RequestContract:
    """Compile a request contract (with its ``#/$defs/query``, when declared) once.

    Raises:
        ContractError: the schema uses an unsupported keyword.
    """
    schema = dict(schema)
    query_schema = schema.get("$defs", {}).get("query")
    query = None
    if isinstance(query_schema, dict):
        properties = query_schema.get("properties", {})
        query = QueryContract(properties, compile_schema(query_schema, where="#/$defs/query"),
                              {name: spec["default"] for name, spec in properties.items() if "default" in spec})
    return RequestContract(schema, compile_schema(schema), query)
