"""GX expectation suites generated from the contract sources, at load time.

* The **request suite** is generated from a request JSON Schema (the recommender's is rendered from
  its spec: the same JSON Schema the gateway compiles), so the batch contract never drifts from the
  edge contract. Every schema keyword that constrains data becomes one expectation
  whose ``meta.rule`` names the JSON pointer of the rule it checks; a constraining
  keyword the generator does not understand raises :class:`ContractError` instead of
  being skipped.
  A ``pattern`` is ECMA-262 (``$`` is the end of the input, ``\\d`` is ASCII); GX runs it
  with Python ``re`` (pandas) or Java (Spark), so it is handed over rewritten by
  :func:`~modelops.contracts.ecma.portable_pattern`, the same rewrite the gateway uses:
  ``"u1\\n"`` fails ``^[A-Za-z0-9_-]+$`` in every engine.
* The **feature suite** is generated from feature metadata (the recommender's ``features.yaml``; column
  exists, float type, values in [min, max], not null ``mostly`` :data:`FEATURE_NOT_NULL_MOSTLY`)
  and merged with the hand-written expectations of ``examples/recommender/features.custom.json``.

Suites are JSON-round-trippable (``suite.to_json_dict()`` / ``gx.ExpectationSuite(**d)``);
``modelops contracts export`` writes them out for inspection only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import great_expectations as gx
from great_expectations.expectations.core.expect_column_to_exist import ExpectColumnToExist
from great_expectations.expectations.core.expect_column_value_lengths_to_be_between import (
    ExpectColumnValueLengthsToBeBetween,
)
from great_expectations.expectations.core.expect_column_values_to_be_between import (
    ExpectColumnValuesToBeBetween,
)
from great_expectations.expectations.core.expect_column_values_to_be_in_type_list import (
    ExpectColumnValuesToBeInTypeList,
)
from great_expectations.expectations.core.expect_column_values_to_match_regex import (
    ExpectColumnValuesToMatchRegex,
)
from great_expectations.expectations.core.expect_column_values_to_not_be_null import (
    ExpectColumnValuesToNotBeNull,
)
from great_expectations.expectations.core.expect_table_columns_to_match_set import (
    ExpectTableColumnsToMatchSet,
)
from great_expectations.expectations.expectation import Expectation

# Imported for its side effect: registers the custom list expectations with GX, so that
# suites naming them keep them when loaded (GX drops unknown types with only a log line).
from modelops.contracts import custom_expectations as cx
from modelops.contracts.ecma import portable_pattern
from modelops.errors import ContractError
from modelops.features import Feature, load_features
from modelops.modelspec.recommender import CUSTOM_EXPECTATIONS_FILE, FEATURES_FILE, recommender_contract
from modelops.modelspec.spec import ModelSpec

SUITE_NAMES: tuple[str, ...] = ("requests", "features")

FEATURE_NOT_NULL_MOSTLY = 0.99
"""Share of rows that must have a value per feature.

Missing values are legitimate (a user or item unknown to the feature store yields
NaN, which the model's preprocess step imputes), but more than 1 % missing in a batch
means a broken join or a dead upstream pipeline rather than cold start."""

STRING_TYPES: tuple[str, ...] = ("str", "string", "StringType")
INTEGER_TYPES: tuple[str, ...] = (
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "Int32",
    "Int64",
    "IntegerType",
    "LongType",
    "ShortType",
)
FLOAT_TYPES: tuple[str, ...] = (
    "float",
    "float32",
    "float64",
    "Float32",
    "Float64",
    "FloatType",
    "DoubleType",
)

# Keywords that only describe (never constrain) a value: safe to ignore.
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "examples", "default"})
_ROOT_KEYS = frozenset({"type", "additionalProperties", "required", "properties"})
_KEYS_BY_TYPE: Mapping[str, frozenset[str]] = {
    "string": frozenset({"type", "minLength", "maxLength", "pattern"}),
    "integer": frozenset({"type", "minimum", "maximum"}),
    "number": frozenset({"type", "minimum", "maximum"}),
    "array": frozenset({"type", "minItems", "maxItems", "items"}),
}
_ITEM_KEYS = frozenset({"type", "minLength", "maxLength"})
_QUERY_KEYS: Mapping[str, frozenset[str]] = {
    "boolean": frozenset({"type"}),
    "integer": frozenset({"type", "minimum", "maximum"}),
}


def load_request_schema(path: Path | str) -> dict[str, Any]:
    """Read the request JSON Schema."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ContractError(f"cannot read request schema {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ContractError(f"request schema {path} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ContractError(f"request schema {path}: must be a JSON object")
    return document


def _unsupported(where: str, keys: set[str]) -> ContractError:
    return ContractError(
        f"request schema {where}: keyword(s) {sorted(keys)} have no GX translation; "
        "extend modelops.contracts.suites or remove them (a rule must never be skipped silently)"
    )


def _meta(pointer: str, rule: str) -> dict[str, Any]:
    return {"source": "request.schema.json", "rule": pointer, "check": rule}


def _checked_kind(pointer: str, spec: Mapping[str, Any], keys_by_type: Mapping[str, frozenset[str]]) -> str:
    """``spec``'s type, checked against ``keys_by_type``; its keywords must all be known for that type."""
    kind = str(spec.get("type"))
    if kind not in keys_by_type:
        raise ContractError(f"request schema {pointer}/type={kind!r}: must be one of {sorted(keys_by_type)}")
    extra = set(spec) - keys_by_type[kind] - _ANNOTATIONS
    if extra:
        raise _unsupported(pointer, extra)
    return kind


def _property_expectations(name: str, spec: Mapping[str, Any]) -> list[Expectation]:
    pointer = f"#/properties/{name}"
    kind = _checked_kind(pointer, spec, _KEYS_BY_TYPE)
    out: list[Expectation] = []
    if kind == "string":
        out.append(
            ExpectColumnValuesToBeInTypeList(
                column=name, type_list=list(STRING_TYPES), meta=_meta(f"{pointer}/type", "type string")
            )
        )
        if "minLength" in spec or "maxLength" in spec:
            out.append(
                ExpectColumnValueLengthsToBeBetween(
                    column=name,
                    min_value=spec.get("minLength"),
                    max_value=spec.get("maxLength"),
                    meta=_meta(
                        f"{pointer}/minLength|maxLength",
                        f"length {spec.get('minLength')}..{spec.get('maxLength')}",
                    ),
                )
            )
        if "pattern" in spec:
            out.append(
                ExpectColumnValuesToMatchRegex(
                    column=name,
                    regex=portable_pattern(str(spec["pattern"])),
                    meta=_meta(f"{pointer}/pattern", f"pattern {spec['pattern']}"),
                )
            )
    elif kind in ("integer", "number"):
        types = INTEGER_TYPES if kind == "integer" else INTEGER_TYPES + FLOAT_TYPES
        out.append(
            ExpectColumnValuesToBeInTypeList(
                column=name, type_list=list(types), meta=_meta(f"{pointer}/type", f"type {kind}")
            )
        )
        if "minimum" in spec or "maximum" in spec:
            out.append(
                ExpectColumnValuesToBeBetween(
                    column=name,
                    min_value=spec.get("minimum"),
                    max_value=spec.get("maximum"),
                    meta=_meta(
                        f"{pointer}/minimum|maximum", f"range {spec.get('minimum')}..{spec.get('maximum')}"
                    ),
                )
            )
    else:  # array
        out.append(
            cx.ExpectColumnListLengthsToBeBetween(
                column=name,
                min_value=spec.get("minItems"),
                max_value=spec.get("maxItems"),
                meta=_meta(
                    f"{pointer}/minItems|maxItems", f"items {spec.get('minItems')}..{spec.get('maxItems')}"
                ),
            )
        )
        items = spec.get("items", {})
        if not isinstance(items, Mapping) or items.get("type", "string") != "string":
            raise ContractError(f"request schema {pointer}/items: only arrays of strings are supported")
        extra = set(items) - _ITEM_KEYS - _ANNOTATIONS
        if extra:
            raise _unsupported(f"{pointer}/items", extra)
        out.append(
            cx.ExpectColumnListElementLengthsToBeBetween(
                column=name,
                min_value=items.get("minLength"),
                max_value=items.get("maxLength"),
                meta=_meta(
                    f"{pointer}/items",
                    f"string elements of length {items.get('minLength')}..{items.get('maxLength')}",
                ),
            )
        )
    return out


def query_options(schema: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The predict query options declared under ``#/$defs/query`` (``explain``, ``top_k``): name -> rules.

    They are no columns of a request batch, so they become no expectations; they are checked
    here so that a rule the gateway would enforce is never one the suite cannot name.

    Raises:
        ContractError: ``$defs`` holds something else, or an option uses a keyword without a translation.
    """
    defs = schema.get("$defs", {})
    if not isinstance(defs, Mapping) or set(defs) - {"query"}:
        raise ContractError("request schema #/$defs: only 'query' (the predict query options) is supported")
    query = defs.get("query", {"type": "object", "properties": {}})
    unknown = set(query) - {"type", "additionalProperties", "properties"} - _ANNOTATIONS
    if query.get("type") != "object" or unknown:
        raise _unsupported("#/$defs/query", unknown)
    out: dict[str, dict[str, Any]] = {}
    for option, spec in query.get("properties", {}).items():
        kind = _checked_kind(f"#/$defs/query/properties/{option}", spec, _QUERY_KEYS)
        out[option] = {k: v for k, v in spec.items() if k in _QUERY_KEYS[kind] or k == "default"}
    return out


def request_suite_from_schema(schema: Mapping[str, Any], *, name: str = "requests") -> gx.ExpectationSuite:
    """Translate the request JSON Schema into a GX suite for request batches.

    A batch is a table with one row per request and one column per property
    (``item_ids`` a list of strings).

    Raises:
        ContractError: the schema uses a constraining keyword without a translation.
    """
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
        raise ContractError("request schema: the root must be an object with properties")
    extra = set(schema) - _ROOT_KEYS - _ANNOTATIONS - {"$defs"}
    if extra:
        raise _unsupported("#", extra)
    options = query_options(schema)
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    required: Sequence[str] = schema.get("required", [])
    expectations: list[Expectation] = []
    if schema.get("additionalProperties", True) is False:
        expectations.append(
            ExpectTableColumnsToMatchSet(
                column_set=list(properties),
                exact_match=True,
                meta=_meta("#/additionalProperties", "no other columns"),
            )
        )
    for column in required:
        expectations.append(ExpectColumnToExist(column=column, meta=_meta("#/required", "column exists")))
        expectations.append(
            ExpectColumnValuesToNotBeNull(column=column, meta=_meta("#/required", "not null"))
        )
    for column, spec in properties.items():
        expectations.extend(_property_expectations(column, spec))
    return gx.ExpectationSuite(
        name=name,
        expectations=expectations,
        meta={"generated_from": "request JSON Schema", "schema_id": schema.get("$id"),
              "query_options": options},
    )


def feature_suite_from_metadata(
    features: Sequence[Feature],
    *,
    name: str = "features",
    not_null_mostly: float = FEATURE_NOT_NULL_MOSTLY,
    custom: Sequence[Mapping[str, Any]] = (),
) -> gx.ExpectationSuite:
    """The feature suite: four expectations per feature plus hand-written ones.

    Args:
        features: the feature metadata in order.
        name: the suite name.
        not_null_mostly: the share of rows that must have a value, per feature.
        custom: hand-written expectation configurations (``{"type", "kwargs", "meta"}``).
    """
    expectations: list[Expectation] = []
    for f in features:
        meta = {"source": "features.yaml", "feature": f.name, "owner": f.owner}
        expectations += [
            ExpectColumnToExist(column=f.name, meta=meta),
            ExpectColumnValuesToBeInTypeList(column=f.name, type_list=list(FLOAT_TYPES), meta=meta),
            ExpectColumnValuesToBeBetween(column=f.name, min_value=f.min, max_value=f.max, meta=meta),
            ExpectColumnValuesToNotBeNull(column=f.name, mostly=not_null_mostly, meta=meta),
        ]
    suite = gx.ExpectationSuite(
        name=name,
        expectations=expectations,
        meta={"generated_from": "feature metadata", "not_null_mostly": not_null_mostly},
    )
    for i, config in enumerate(custom):
        suite.add_expectation_configuration(_custom_configuration(i, config))
    return suite


def _custom_configuration(index: int, config: Mapping[str, Any]) -> Any:
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    if not isinstance(config, Mapping) or "type" not in config:
        raise ContractError(f"custom expectation [{index}]: must be an object with 'type' and 'kwargs'")
    try:
        configuration = ExpectationConfiguration(
            type=str(config["type"]),
            kwargs=dict(config.get("kwargs", {})),
            meta={"source": "features.custom.json", **dict(config.get("meta", {}))},
        )
        configuration.to_domain_obj()  # fails for unknown types instead of being dropped later
    except Exception as exc:
        raise ContractError(f"custom expectation [{index}] {config.get('type')!r}: {exc}") from exc
    return configuration


def load_custom_expectations(path: Path | str = CUSTOM_EXPECTATIONS_FILE) -> list[dict[str, Any]]:
    """Hand-written expectations: ``{"expectations": [{"type", "kwargs", "meta"}, ...]}``; none if absent."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"cannot read hand-written expectations {path}: {exc}") from exc
    items = document.get("expectations") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ContractError(f"{path}: must be an object with an 'expectations' list")
    return items


def request_suite(schema_file: Path | str | None = None) -> gx.ExpectationSuite:
    """The request suite, generated now from a schema file (None: the recommender's, rendered from its spec)."""
    schema = recommender_contract() if schema_file is None else load_request_schema(schema_file)
    return request_suite_from_schema(schema)


def feature_suite(
    features_file: Path | str = FEATURES_FILE, custom_file: Path | str = CUSTOM_EXPECTATIONS_FILE
) -> gx.ExpectationSuite:
    """The feature suite, generated now from the metadata file plus the hand-written file."""
    return feature_suite_from_metadata(
        load_features(features_file), custom=load_custom_expectations(custom_file)
    )


def load_suite(name: str) -> gx.ExpectationSuite:
    """A suite by name (``requests`` or ``features``)."""
    if name == "requests":
        return request_suite()
    if name == "features":
        return feature_suite()
    raise ContractError(f"suite {name!r}: unknown, must be one of {', '.join(SUITE_NAMES)}")


def suite_from_json(document: Mapping[str, Any]) -> gx.ExpectationSuite:
    """Rebuild a suite from ``suite.to_json_dict()`` output (the custom types are registered here)."""
    try:
        suite = gx.ExpectationSuite(**dict(document))
    except Exception as exc:
        raise ContractError(f"not a valid expectation suite: {exc}") from exc
    declared = len(document.get("expectations", []))
    if len(suite.expectations) != declared:
        raise ContractError(
            f"suite {suite.name!r}: {declared - len(suite.expectations)} expectation(s) were "
            "dropped while loading (unknown expectation type?)"
        )
    return suite


def spec_suite(spec: ModelSpec) -> gx.ExpectationSuite:
    """The contract gate's suite of a model published from its spec (rendered by ``gate_expectations``)."""
    from modelops.modelspec.render import gate_expectations

    return suite_from_json({"name": f"{spec.name}_features", "expectations": gate_expectations(spec),
                            "meta": {"generated_from": f"model spec of {spec.name}"}})
