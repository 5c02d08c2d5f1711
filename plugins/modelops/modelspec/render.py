"""Pure renderers: one :class:`~modelops.modelspec.spec.ModelSpec` in, one platform artefact out.

* :func:`edge_contract`: the request JSON Schema (draft 2020-12) the gateway compiles.
  ``tabular`` form: a body holds exactly one of MLflow's scoring keys
  (``mlflow/pyfunc/scoring_server``): ``dataframe_split`` (``columns`` exactly the features in order,
  ``data`` rows typed column by column), ``dataframe_records`` and ``instances`` (rows as objects),
  ``inputs`` (rows as objects, or an object of columns; the JSON type picks the form, so a refusal names
  the rule of the form sent); a tensor model (no features) takes
  ``inputs`` (an object of tensors, or the one tensor) and ``instances`` (one object, or one tensor
  row, per row). Column types: FP* ``number``, INT* ``integer``, BOOL ``boolean``, BYTES ``string``;
  a declared range becomes ``minimum``/``maximum``, a column not ``required`` may be ``null``; at most
  ``request.max_items`` rows. ``feature-lookup`` form: the reference recommender's contract
  (pinned by ``tests/golden/recommender.request.schema.json``), with the routing key as the entity field, ``max_items``
  items and ``top_k`` up to the number of features.
* :func:`config_pbtxt` / :func:`config_json`: the Triton model configuration as text and as Triton's
  JSON, in the conventions of :mod:`modelops.serving.pbtxt` (same layout, same keys), so
  :func:`modelops.serving.pbtxt.config_mismatches` compares the JSON with what Triton reports.
  Dims exclude the batch dimension when ``max_batch_size`` > 0; the spec's ``parameters`` become the
  config's ``parameters`` (string values).
* :func:`drift_features`: the columns the nightly drift job compares, with their weights.
* :func:`gate_expectations`: the contract gate's per-column expectations as plain GX configurations
  (``{"type", "kwargs", "meta"}``, the format of ``examples/recommender/features.custom.json``): column
  exists, type, values in range (when declared), not null (``mostly`` per feature).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modelops.modelspec.spec import Feature, ModelSpec, Tensor

TRITON_DTYPES: dict[str, str] = {"FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "INT32": "TYPE_INT32",
                                 "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL", "BYTES": "TYPE_STRING"}
JSON_TYPES: dict[str, str] = {"FP32": "number", "FP64": "number", "INT32": "integer", "INT64": "integer",
                              "BOOL": "boolean", "BYTES": "string"}
INSTANCE_KINDS: dict[str, str] = {"cpu": "KIND_CPU", "gpu": "KIND_GPU", "auto": "KIND_AUTO"}
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# The GX type names a column's values may have, per spec dtype (pandas and Spark names); the lists
# equal those of modelops.contracts.suites (a test holds them together) without importing GX here.
STRING_TYPES: tuple[str, ...] = ("str", "string", "StringType")
INTEGER_TYPES: tuple[str, ...] = ("int", "int8", "int16", "int32", "int64", "Int32", "Int64", "IntegerType",
                                  "LongType", "ShortType")
FLOAT_TYPES: tuple[str, ...] = ("float", "float32", "float64", "Float32", "Float64", "FloatType", "DoubleType")
BOOL_TYPES: tuple[str, ...] = ("bool", "boolean", "BooleanType")
GX_TYPES: dict[str, tuple[str, ...]] = {"FP32": FLOAT_TYPES, "FP64": FLOAT_TYPES, "INT32": INTEGER_TYPES,
                                        "INT64": INTEGER_TYPES, "BOOL": BOOL_TYPES, "BYTES": STRING_TYPES}


def contract_id(spec: ModelSpec) -> str:
    """The ``$id`` of the model's request contract."""
    return f"https://modelops.dev/schemas/{spec.name}/predict-request.json"


# ---------------------------------------------------------------- edge contract


def edge_contract(spec: ModelSpec) -> dict[str, Any]:
    """The request JSON Schema of ``POST /v1/models/{model}/predict`` for ``spec``."""
    if spec.request.form == "feature-lookup":
        return _lookup_contract(spec)
    bodies = _column_bodies(spec) if spec.features else _tensor_bodies(spec)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": contract_id(spec),
        "title": "PredictRequest",
        "description": (f"Request contract of POST /v1/models/{spec.name}/predict: exactly one of MLflow's "
                        f"scoring bodies ({', '.join(bodies)}), at most {spec.request.max_items} rows. "
                        "Rendered by modelops.modelspec.render from the model spec."),
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
        "properties": bodies,
    }


def _value(dtype: str, feature: Feature | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": JSON_TYPES[dtype]}
    if feature is not None:
        if feature.min is not None:
            schema["minimum"] = feature.min
        if feature.max is not None:
            schema["maximum"] = feature.max
        if not feature.required:
            schema["type"] = [JSON_TYPES[dtype], "null"]
    return schema


def _rows(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "minItems": 1, "maxItems": max_items, "items": items}


def _array_or_object(array: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    # if/then/else, not anyOf: a refusal then names the rule of the form the client chose
    # (``body.inputs[0].mean radius must be <= 50``), not every branch of an anyOf.
    if array.get("type") != "array":  # a one-dimensional tensor row is a value, not an array
        return {"if": {"type": "object"}, "then": obj, "else": array}
    return {"if": {"type": "array"}, "then": array, "else": obj}


def _column_bodies(spec: ModelSpec) -> dict[str, Any]:
    features, n = spec.features, spec.request.max_items
    values = {f.name: _value(f.dtype, f) for f in features}
    record = {"type": "object", "additionalProperties": False,
              "required": [f.name for f in features if f.required], "properties": values}
    columns = {"type": "object", "additionalProperties": False,
               "required": [f.name for f in features if f.required],
               "properties": {name: _rows(v, n) for name, v in values.items()}}
    split = {
        "type": "object", "additionalProperties": False, "required": ["columns", "data"],
        "properties": {
            "index": {"type": "array", "maxItems": n},
            "columns": {"const": [f.name for f in features]},
            "data": _rows({"type": "array", "minItems": len(features), "maxItems": len(features),
                           "prefixItems": list(values.values()), "items": False}, n),
        },
    }
    return {"dataframe_split": split, "dataframe_records": _rows(record, n), "instances": _rows(record, n),
            "inputs": _array_or_object(_rows(record, n), columns)}


def _tensor_value(tensor: Tensor, dims: Sequence[int], max_items: int | None) -> dict[str, Any]:
    if not dims:
        return {"type": JSON_TYPES[tensor.dtype]}
    inner = _tensor_value(tensor, dims[1:], None)
    schema: dict[str, Any] = {"type": "array", "items": inner}
    if dims[0] == -1:
        schema["minItems"] = 1
        if max_items is not None:
            schema["maxItems"] = max_items
    else:
        schema["minItems"] = schema["maxItems"] = dims[0]
    return schema


def _tensor_bodies(spec: ModelSpec) -> dict[str, Any]:
    n = spec.request.max_items
    named = {"type": "object", "additionalProperties": False, "required": [t.name for t in spec.inputs],
             "properties": {t.name: _tensor_value(t, t.shape, n) for t in spec.inputs}}
    row = {"type": "object", "additionalProperties": False, "required": [t.name for t in spec.inputs],
           "properties": {t.name: _tensor_value(t, t.shape[1:], None) for t in spec.inputs}}
    if len(spec.inputs) == 1:
        only = spec.inputs[0]
        return {"inputs": _array_or_object(_tensor_value(only, only.shape, n), named),
                "instances": _rows(_array_or_object(_tensor_value(only, only.shape[1:], None), row), n)}
    return {"inputs": named, "instances": _rows(row, n)}


# The feature-lookup form's fixed parts: the reference recommender's request contract.
ENTITY_RULES: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$",
                                "examples": ["u_000123"]}
ITEMS_FIELD = "item_ids"
ITEM_RULES: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 32, "examples": ["i_004711"]}
TIMESTAMP_FIELD = "timestamp"
TIMESTAMP_RULES: dict[str, Any] = {"type": "integer", "minimum": 1609459200, "maximum": 2524608000,
                                   "examples": [1764460800]}
TOP_K_DEFAULT = 5


def _lookup_contract(spec: ModelSpec) -> dict[str, Any]:
    entity = str(spec.routing_key)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": contract_id(spec),
        "title": "PredictRequest",
        "description": "Request contract of POST /v1/models/{model}/predict. The single source: the gateway "
                       "compiles it, the GX request suite is generated from it.",
        "type": "object",
        "additionalProperties": False,
        "required": [entity, ITEMS_FIELD, TIMESTAMP_FIELD],
        "properties": {
            entity: dict(ENTITY_RULES),
            ITEMS_FIELD: {"type": "array", "minItems": 1, "maxItems": spec.request.max_items, "items": dict(ITEM_RULES),
                          "examples": [["i_004711", "i_000042"]]},
            TIMESTAMP_FIELD: dict(TIMESTAMP_RULES),
        },
        "$defs": {"query": {
            "description": "Query parameters of POST /v1/models/{model}/predict (not body fields, not columns of a "
                           "request batch): the gateway reads booleans as true/false and integers as digits, then "
                           "checks them against this schema.",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "explain": {"type": "boolean", "default": False,
                            "description": "true: each item also gets its feature contributions (Shapley sampling "
                                           "on the version that scored it) and a top_reason.",
                            "examples": [True]},
                "top_k": {"type": "integer", "minimum": 1, "maximum": len(spec.features), "default": TOP_K_DEFAULT,
                          "description": "How many features (largest |contribution| first) each explanation lists.",
                          "examples": [TOP_K_DEFAULT]},
            },
        }},
    }


# ---------------------------------------------------------------- Triton config


def _dims(tensor: Tensor, batched: bool) -> tuple[int, ...]:
    return tensor.shape[1:] if batched else tensor.shape


def tensor_block(name: str, data_type: str, dims: Sequence[int], optional: bool = False) -> str:
    """One entry of a ``config.pbtxt`` input or output list (also :mod:`modelops.serving.pbtxt`'s)."""
    return (f'  {{\n    name: "{name}"\n    data_type: {data_type}\n    dims: [ {", ".join(map(str, dims))} ]\n'
            + ("    optional: true\n" if optional else "") + "  }")


def tensors_text(kind: str, blocks: Sequence[str]) -> str:
    """A ``config.pbtxt`` ``input [...]`` / ``output [...]`` list of :func:`tensor_block` entries."""
    items = ",\n".join(blocks)
    return f"{kind} [\n{items}\n]"


def version_policy(versions: Sequence[int]) -> str:
    """Triton's version policy: these versions, or the latest one when none is named."""
    if not versions:
        return "version_policy: { latest: { num_versions: 1 } }"
    return f"version_policy: {{ specific: {{ versions: [ {', '.join(map(str, versions))} ] }} }}"


def _tensors_text(kind: str, tensors: Sequence[Tensor], batched: bool) -> str:
    return tensors_text(kind, [tensor_block(t.name, TRITON_DTYPES[t.dtype], _dims(t, batched)) for t in tensors])


def config_pbtxt(spec: ModelSpec, *, name: str | None = None, versions: Sequence[int] = ()) -> str:
    """``config.pbtxt`` text of the model (Triton name ``name``, default the spec's; ``versions`` as
    :func:`modelops.serving.pbtxt.render_pbtxt`: empty means the latest one)."""
    t = spec.tuning
    batched = t.max_batch_size > 0
    lines = [
        f"# Triton model of the {spec.flavor} model {spec.name}. Rendered by modelops.modelspec.render.",
        f'name: "{name or spec.name}"',
        f'backend: "{spec.triton_backend}"',
        f"max_batch_size: {t.max_batch_size}",
        _tensors_text("input", spec.inputs, batched),
        _tensors_text("output", spec.outputs, batched),
    ]
    if t.dynamic_batching is not None:
        b = t.dynamic_batching
        preferred = ", ".join(map(str, b.preferred_batch_size))
        lines.append("dynamic_batching {\n"
                     + (f"  preferred_batch_size: [ {preferred} ]\n" if b.preferred_batch_size else "")
                     + f"  max_queue_delay_microseconds: {b.max_queue_delay_us}\n}}")
    g = t.instance_group
    gpus = f", gpus: [ {', '.join(map(str, g.gpus))} ]" if g.gpus else ""
    lines.append(f"instance_group [ {{ kind: {INSTANCE_KINDS[g.kind]}, count: {g.count}{gpus} }} ]")
    lines += [f"parameters {{ key: {_quoted(key)} value: {{ string_value: {_quoted(value)} }} }}"
              for key, value in sorted(spec.parameters.items())]
    lines.append(version_policy(versions))
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A protobuf text-format string literal (JSON's escapes are a subset of text format's)."""
    return json.dumps(text, ensure_ascii=False)


def config_json(spec: ModelSpec, *, name: str | None = None, versions: Sequence[int] = ()) -> dict[str, Any]:
    """The same configuration as Triton's JSON (the keys of :func:`modelops.serving.pbtxt.config_json`)."""
    t = spec.tuning
    batched = t.max_batch_size > 0
    g = t.instance_group
    doc: dict[str, Any] = {
        "name": name or spec.name,
        "backend": spec.triton_backend,
        "max_batch_size": t.max_batch_size,
        "input": [{"name": x.name, "data_type": TRITON_DTYPES[x.dtype], "dims": list(_dims(x, batched))}
                  for x in spec.inputs],
        "output": [{"name": x.name, "data_type": TRITON_DTYPES[x.dtype], "dims": list(_dims(x, batched))}
                   for x in spec.outputs],
        "instance_group": [{"kind": INSTANCE_KINDS[g.kind], "count": g.count, **({"gpus": list(g.gpus)} if g.gpus
                                                                               else {})}],
        "version_policy": ({"specific": {"versions": list(versions)}} if versions
                           else {"latest": {"num_versions": 1}}),
    }
    if t.dynamic_batching is not None:
        doc["dynamic_batching"] = {"preferred_batch_size": list(t.dynamic_batching.preferred_batch_size),
                                   "max_queue_delay_microseconds": t.dynamic_batching.max_queue_delay_us}
    if spec.parameters:
        doc["parameters"] = {key: {"string_value": value} for key, value in sorted(spec.parameters.items())}
    return doc


# ---------------------------------------------------------------- drift and gate


@dataclass(frozen=True)
class DriftFeature:
    """One column the nightly drift job compares: its weight in the ranking and its own KS threshold."""

    name: str
    dtype: str
    sensitivity: float
    threshold: float | None = None


def drift_features(spec: ModelSpec) -> tuple[DriftFeature, ...]:
    """The spec's features in order, as the drift job weighs them (BYTES columns are not KS-comparable)."""
    return tuple(DriftFeature(f.name, f.dtype, f.drift_sensitivity, f.drift_threshold)
                 for f in spec.features if f.dtype != "BYTES")


def gate_expectations(spec: ModelSpec) -> list[dict[str, Any]]:
    """Per feature, in order: column exists, type, range (when declared), not null (unless ``not_null_mostly``
    is null), as GX expectation configurations ``{"type", "kwargs", "meta"}``."""
    out: list[dict[str, Any]] = []
    for f in spec.features:
        meta = {"source": f"model spec {spec.name}", "feature": f.name, "owner": f.owner}
        out.append({"type": "expect_column_to_exist", "kwargs": {"column": f.name}, "meta": meta})
        out.append({"type": "expect_column_values_to_be_in_type_list",
                    "kwargs": {"column": f.name, "type_list": list(GX_TYPES[f.dtype])}, "meta": meta})
        if f.min is not None or f.max is not None:
            out.append({"type": "expect_column_values_to_be_between",
                        "kwargs": {"column": f.name, "min_value": f.min, "max_value": f.max}, "meta": meta})
        if f.not_null_mostly is not None:
            out.append({"type": "expect_column_values_to_not_be_null",
                        "kwargs": {"column": f.name, "mostly": f.not_null_mostly}, "meta": meta})
    return out
