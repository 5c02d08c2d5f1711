"""Derive a :class:`~modelops.modelspec.spec.ModelSpec` from a local MLflow model directory.

What MLflow knows comes first: the ``MLmodel`` file's flavors (precedence :data:`FLAVOR_PRECEDENCE`:
``triton`` > ``onnx`` > ``sklearn`` > ``lightgbm`` > ``xgboost`` > ``python_function``) and its
signature (``mlflow/models/signature.py``, ``mlflow/types/schema.py``):

* a **column-based** input schema (MLflow ``ColSpec``; names may hold spaces) becomes one feature per
  column, in order, and, when every column has the same numeric type, one input tensor ``input`` of
  shape ``[-1, n]`` (the form ``skl2onnx`` converts to); otherwise one ``[-1, 1]`` tensor per column,
  named by the column with every character outside ``[A-Za-z0-9_]`` replaced by ``_``;
* a **tensor-based** input schema (MLflow ``TensorSpec``) keeps its tensors, names, dtypes and shapes
  (a one-dimensional ``[-1]`` becomes ``[-1, 1]``: one value per row); no features are derived;
* outputs likewise; an unnamed output is ``probabilities`` for a float ``[-1, k >= 2]`` tensor of a
  ``sklearn``/``lightgbm``/``xgboost`` model (logged with ``predict_proba``), else ``prediction``.

A tensor whose first dimension is not ``-1`` means Triton does not batch the model
(``max_batch_size: 0``). Then the overrides are merged over the derived values, in order: the
model directory's ``modelops.yaml`` (:data:`SPEC_FILE`), then the ``overrides`` argument (for example
registered-model tags ``modelops.spec.tuning.max_batch_size: "32"``: the prefix :data:`TAG_PREFIX`
is dropped, dots nest, string values are read as YAML scalars). Mappings merge key by key, lists
replace; ``features`` may also be a mapping from feature name to the fields to change. An unknown key
is refused, naming it and the allowed ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from modelops.errors import ContractError
from modelops.modelspec.spec import (
    DynamicBatching,
    Feature,
    InstanceGroup,
    Label,
    ModelSpec,
    Outcomes,
    Request,
    Source,
    Tuning,
)

SPEC_FILE = "modelops.yaml"
TAG_PREFIX = "modelops.spec."
FLAVOR_PRECEDENCE: tuple[tuple[str, str], ...] = (
    ("triton", "triton"), ("onnx", "onnx"), ("sklearn", "sklearn"), ("lightgbm", "lightgbm"),
    ("xgboost", "xgboost"), ("python_function", "pyfunc"),
)
"""(MLflow flavor key, spec flavor), the first one present wins."""
COLUMN_DTYPES: dict[str, str] = {"double": "FP64", "float": "FP32", "long": "INT64", "integer": "INT32",
                                 "boolean": "BOOL", "string": "BYTES", "binary": "BYTES"}
"""MLflow column types (``DataType`` names) the spec can carry."""
NUMPY_DTYPES: dict[str, str] = {"float32": "FP32", "float64": "FP64", "int32": "INT32", "int64": "INT64",
                                "bool": "BOOL", "object": "BYTES", "str": "BYTES", "bytes": "BYTES"}
_CLASSIFIER_FLAVORS = frozenset({"sklearn", "lightgbm", "xgboost"})
_NUMERIC = frozenset({"FP32", "FP64", "INT32", "INT64"})
_SIGNATURE_HINT = ("log the model with a signature, for example mlflow.sklearn.log_model(model, name='model', "
                   "signature=infer_signature(X, model.predict_proba(X)), input_example=X[:5]), or declare "
                   f"inputs and outputs in {SPEC_FILE}")
_NESTED: dict[str, type[msgspec.Struct]] = {
    "": ModelSpec, "request": Request, "tuning": Tuning, "tuning.dynamic_batching": DynamicBatching,
    "tuning.instance_group": InstanceGroup, "outcomes": Outcomes, "outcomes.label": Label, "source": Source,
}
_NOT_OVERRIDDEN = frozenset({"name", "schema_version"})


def derive_spec(model_dir: Path, name: str, overrides: Mapping[str, Any] | None = None, *,
                derived: Mapping[str, Any] | None = None) -> ModelSpec:
    """The spec of the MLflow model in ``model_dir``, served as ``name``.

    Args:
        model_dir: a local MLflow model directory (holding ``MLmodel``).
        name: the model name the platform serves it as.
        overrides: fields merged over the derived values and ``modelops.yaml`` (nested, or dotted keys,
            optionally prefixed with ``modelops.spec.``).
        derived: spec fields the flavor's own files state (a ``triton`` model's ``config.pbtxt``: inputs,
            outputs, tuning, backend, parameters); they replace the signature's and lie under
            ``modelops.yaml`` and ``overrides``. With them no signature is needed.

    Raises:
        ContractError: a malformed ``MLmodel`` or ``modelops.yaml``, an unsupported flavor, no signature
            and no declared inputs/outputs, an unknown override key, or a spec that breaks a rule.
    """
    model_dir = Path(model_dir)
    model = load_mlmodel(model_dir)
    flavor = _flavor(model_dir, model.flavors)
    changes = _merge(_read_spec_file(model_dir), expand_overrides(overrides or {}))
    _check_keys(changes, "")
    doc: dict[str, Any] = {"name": name, "flavor": flavor,
                           "source": {"model_uri": model_dir.resolve().as_uri(), "run_id": model.run_id or ""}}
    signature = model.signature
    declared = set(changes) | set(derived or {})
    if signature is None:
        if "inputs" not in declared or "outputs" not in declared:
            raise ContractError(f"{model_dir}: the MLmodel has no signature; {_SIGNATURE_HINT}")
    else:
        doc.update(_from_signature(signature, flavor))
    doc.update(derived or {})
    return ModelSpec.from_dict(_apply(doc, changes))


def input_example_path(model_dir: Path) -> Path | None:
    """The model's saved input example (``saved_input_example_info``), None when it has none."""
    model = load_mlmodel(Path(model_dir))
    info = model.saved_input_example_info or {}
    artifact = info.get("artifact_path")
    return Path(model_dir) / str(artifact) if artifact else None


def load_mlmodel(model_dir: Path) -> Any:
    """The directory's ``MLmodel`` (``mlflow.models.Model``); a missing or malformed one is refused, named."""
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model

    if not (model_dir / "MLmodel").is_file():
        raise ContractError(f"{model_dir}: no MLmodel file; expected an MLflow model directory "
                            "(example: the folder mlflow.sklearn.save_model(model, path) wrote)")
    try:
        return Model.load(str(model_dir))
    except (MlflowException, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ContractError(f"{model_dir}/MLmodel: malformed ({type(exc).__name__}: {exc}); "
                            "write it with mlflow.<flavor>.save_model or log_model") from exc


def _flavor(model_dir: Path, flavors: Any) -> str:
    if not isinstance(flavors, Mapping):
        raise ContractError(f"{model_dir}/MLmodel: 'flavors' must be a mapping (example: flavors: {{onnx: ...}})")
    for key, flavor in FLAVOR_PRECEDENCE:
        if key in flavors:
            return flavor
    raise ContractError(f"{model_dir}: flavor(s) {sorted(flavors)} not supported; supported: "
                        f"{[key for key, _ in FLAVOR_PRECEDENCE]} (a model with a python_function flavor is "
                        "served by Triton's python backend)")


def _read_spec_file(model_dir: Path) -> dict[str, Any]:
    path = model_dir / SPEC_FILE
    if not path.exists():
        return {}
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ContractError(f"{path}: unreadable or not YAML: {exc}") from exc
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ContractError(f"{path}: must be a mapping of spec fields (example: tuning: {{max_batch_size: 32}})")
    return expand_overrides(document)


def expand_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Nested overrides from nested or dotted keys (``modelops.spec.`` prefix dropped, its strings read as YAML)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        key = str(key)
        tagged = key.startswith(TAG_PREFIX)
        if tagged:
            key = key[len(TAG_PREFIX):]
            if isinstance(value, str):
                try:
                    value = yaml.safe_load(value)
                except yaml.YAMLError as exc:
                    raise ContractError(f"override {TAG_PREFIX}{key}={value!r}: not a YAML value: {exc}") from exc
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ContractError(f"override {key}: {part} is set both as a value and as a mapping")
            node = child
        leaf = parts[-1]
        if isinstance(value, Mapping) and leaf != "features":
            value = expand_overrides(value)
        node[leaf] = _merge(node[leaf], value) if isinstance(node.get(leaf), dict) else value
    return out


def _merge(base: Any, change: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(change, Mapping):
        merged = dict(base)
        for key, value in change.items():
            merged[key] = _merge(merged[key], value) if key in merged else value
        return merged
    return change


def _check_keys(changes: Mapping[str, Any], path: str) -> None:
    struct = _NESTED[path]
    allowed = [f for f in struct.__struct_fields__ if not (path == "" and f in _NOT_OVERRIDDEN)]
    for key, value in changes.items():
        where = f"{path}.{key}" if path else key
        if key not in allowed:
            raise ContractError(f"override {where}: unknown key {key!r}; allowed here: {', '.join(allowed)}")
        if where in _NESTED and isinstance(value, Mapping):
            _check_keys(value, where)
        if where == "features" and isinstance(value, Mapping):
            fields = [f for f in Feature.__struct_fields__ if f != "name"]
            for feature, change in value.items():
                if not isinstance(change, Mapping):
                    raise ContractError(f"override features.{feature}: must be a mapping of feature fields "
                                        "(example: {min: 0, max: 50})")
                for field in change:
                    if field not in fields:
                        raise ContractError(f"override features.{feature}.{field}: unknown key {field!r}; "
                                            f"allowed here: {', '.join(fields)}")


def _apply(doc: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    features = changes.get("features")
    if isinstance(features, Mapping):
        current = {f["name"]: f for f in doc.get("features", [])}
        unknown = sorted(set(features) - set(current))
        if unknown:
            raise ContractError(f"override features: {unknown} are no features of the model (known: "
                                f"{sorted(current)[:10]}{' ...' if len(current) > 10 else ''})")
        doc = {**doc, "features": [_merge(f, features.get(f["name"], {})) for f in doc.get("features", [])]}
        changes = {k: v for k, v in changes.items() if k != "features"}
    merged: dict[str, Any] = _merge(doc, changes)
    return merged


def _tensor_name(column: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", column)
    return name if re.match(r"^[A-Za-z_]", name) else f"_{name}"


def _columns(schema: Any, kind: str) -> list[tuple[str | None, str, bool]]:
    out = []
    for i, col in enumerate(schema.inputs):
        type_name = getattr(col.type, "name", str(col.type))
        if type_name not in COLUMN_DTYPES:
            raise ContractError(f"signature {kind}[{i}] ({col.name}): column type {type_name!r} not supported; "
                                f"supported: {sorted(COLUMN_DTYPES)} (example: double)")
        out.append((col.name, COLUMN_DTYPES[type_name], bool(getattr(col, "required", True))))
    return out


def _tensors(schema: Any, kind: str) -> list[tuple[str | None, str, tuple[int, ...]]]:
    out = []
    for i, spec in enumerate(schema.inputs):
        dtype = NUMPY_DTYPES.get(spec.type.name if spec.type.kind not in "OSU" else "object")
        if dtype is None:
            raise ContractError(f"signature {kind}[{i}] ({spec.name}): tensor dtype {spec.type} not supported; "
                                f"supported: {sorted(NUMPY_DTYPES)} (example: float32)")
        shape = tuple(int(d) for d in spec.shape)
        out.append((spec.name, dtype, (-1, 1) if shape == (-1,) else shape))
    return out


def _from_signature(signature: Any, flavor: str) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    inputs = signature.inputs
    if inputs.is_tensor_spec():
        tensors = _tensors(inputs, "inputs")
        if len(tensors) > 1 and any(n is None for n, _, _ in tensors):
            raise ContractError("signature inputs: several unnamed tensors; name them (example: {'ids': ...})")
        doc["inputs"] = [{"name": n or "input", "dtype": d, "shape": list(s)} for n, d, s in tensors]
    else:
        columns = _columns(inputs, "inputs")
        unnamed = [i for i, (n, _, _) in enumerate(columns) if not n]
        if unnamed:
            raise ContractError(f"signature inputs{unnamed}: unnamed columns; infer the signature from a "
                                "DataFrame with column names (example: infer_signature(X_frame, y))")
        doc["features"] = [{"name": n, "dtype": d, "required": r} for n, d, r in columns]
        dtypes = {d for _, d, _ in columns}
        if len(dtypes) == 1 and dtypes <= _NUMERIC:
            doc["inputs"] = [{"name": "input", "dtype": dtypes.pop(), "shape": [-1, len(columns)]}]
        else:
            names = [_tensor_name(str(n)) for n, _, _ in columns]
            if len(set(names)) != len(names):
                raise ContractError(f"signature inputs: columns {[n for n, _, _ in columns]} give clashing tensor "
                                    f"names {names}; rename the columns")
            doc["inputs"] = [{"name": t, "dtype": d, "shape": [-1, 1]} for t, (_, d, _) in zip(names, columns,
                                                                                          strict=True)]
    doc["outputs"] = _outputs(signature.outputs, flavor) if signature.outputs is not None else []
    if any(t["shape"][0] != -1 for t in doc["inputs"] + doc["outputs"]):
        doc["tuning"] = {"max_batch_size": 0, "dynamic_batching": None}
    return doc


def _outputs(schema: Any, flavor: str) -> list[dict[str, Any]]:
    if schema.is_tensor_spec():
        items = _tensors(schema, "outputs")
    else:
        items = [(n, d, (-1, 1)) for n, d, _ in _columns(schema, "outputs")]
    out = []
    for i, (name, dtype, shape) in enumerate(items):
        if name:
            out.append({"name": _tensor_name(name), "dtype": dtype, "shape": list(shape)})
            continue
        probabilities = (flavor in _CLASSIFIER_FLAVORS and dtype in ("FP32", "FP64") and len(shape) == 2
                         and shape[-1] >= 2)
        default = "probabilities" if probabilities else "prediction"
        out.append({"name": default if len(items) == 1 else f"{default}_{i}", "dtype": dtype, "shape": list(shape)})
    return out

