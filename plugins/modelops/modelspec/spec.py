"""The model spec: what the platform needs to know to serve, guard and watch one model (``schema_version`` 1).

A :class:`ModelSpec` is frozen, JSON round-trips (:meth:`ModelSpec.to_json` / :meth:`ModelSpec.from_json`)
and is checked on construction by :func:`spec_problems`; a bad document is refused with a
:class:`~modelops.errors.ContractError` naming the field, the rule and an example.

Fields (JSON keys; defaults in brackets):

* ``schema_version`` [1]: the version of this format; only 1 is read.
* ``name``: the model name (``^[a-z][a-z0-9_]{0,63}$``, as :mod:`modelops.names`).
* ``flavor``: how the model is stored and served, one of :data:`FLAVORS`: ``onnx``, ``sklearn``,
  ``lightgbm``, ``xgboost`` (served as ONNX by Triton's ``onnxruntime`` backend, the last three after
  conversion), ``triton`` (a Triton model of its own, ``backend`` required) or ``pyfunc`` (MLflow's
  ``python_function``, served by Triton's ``python`` backend).
* ``backend`` [null]: the Triton backend; null means the flavor's (:data:`FLAVOR_BACKENDS`).
* ``parameters`` [{}]: Triton model-config ``parameters`` (name → string value) rendered into the served
  config: a ``triton``-flavor model keeps those of its own ``config.pbtxt``; a ``pyfunc`` model served
  in place of a converted one carries ``predict_fn`` (the method the python backend calls, example
  ``predict_proba``). Left out of the stored ``model-spec.json`` while empty.
* ``inputs`` / ``outputs``: the model's tensors, each ``{name, dtype, shape}``; ``dtype`` one of
  :data:`DTYPES` (``BYTES`` is a string); ``shape`` includes the batch dimension first, ``-1`` for a
  variable dimension (example: ``[-1, 30]``). Names match ``^[A-Za-z_][A-Za-z0-9_.:-]*$`` (Triton tensor names).
* ``request``: the edge request form: ``{form, max_items}``; ``form`` is ``tabular`` (MLflow's scoring
  bodies ``dataframe_split``, ``dataframe_records``, ``instances``, ``inputs``: the client sends the
  features) or ``feature-lookup`` (the client sends an entity, items and a timestamp; the platform
  looks the features up, as for the reference recommender); ``max_items`` [50]: rows (tabular) or items
  (feature-lookup) per request.
* ``features``: the model's input columns in order, each ``{name, dtype, min, max, baseline, description,
  owner, drift_sensitivity, required, not_null_mostly}``: ``dtype`` one of :data:`DTYPES`; ``min``/``max``
  [null] an optional range; ``baseline`` [null] the reference value of ``explain=true`` (set at publish
  to the evaluation sample's mean where not declared); ``drift_sensitivity``
  [:data:`DEFAULT_DRIFT_SENSITIVITY`] in [0, 1], the weight of the feature's drift in the nightly
  ranking; ``drift_threshold`` [null] in (0, 1], the KS D above which this feature drifts (null: the
  job's default); ``required`` [true] a request must give it; ``not_null_mostly`` [1.0] share of rows
  in a batch that must hold a value (null: nulls are fine).
  Names may contain spaces (MLflow column names); they are unique.
* ``tuning``: Triton batching and instances: ``max_batch_size`` [64] (0: no batching by Triton, shapes
  then have no batch dimension of their own); ``dynamic_batching`` [``{max_queue_delay_us: 100,
  preferred_batch_size: [8, 16]}``] or null for none; ``instance_group`` [``{kind: cpu, count: 1,
  gpus: []}``] with ``kind`` one of ``cpu``, ``gpu``, ``auto`` and ``gpus`` the device ids (``gpu`` only).
* ``routing_key`` [null]: the request field (feature-lookup) or input column (tabular) whose value
  keeps a caller on one version during a canary; null: requests are split at random.
* ``outcomes``: what tells whether a prediction was good: ``actions`` [[]] feedback actions
  (example: ``[click, purchase, skip]``) and/or ``label`` [null] ``{kind, delay_s, classes}`` with
  ``kind`` one of ``binary``, ``multiclass``, ``numeric`` and ``delay_s`` the expected delay of the
  ground truth in seconds; ``classes`` [[]]: a ``multiclass`` label's classes (at least 3) in the
  order of the model's probability columns, a ``binary`` label's two classes (optional; the second
  is the positive class, the model's probability column 1). A model that declares neither actions
  nor a label takes the platform's actions (:data:`~modelops.records.ACTIONS`), as before outcomes
  were declared. ``token_ttl_s`` [null] how long after the prediction its ``feedback_token`` is
  accepted by ``POST /v1/feedback`` (> 0). Null means: the gateway's global validity
  (``TOKEN_TTL_S``, 24 h) for a model without a label, and for a labelled model
  ``max(global, 2 x label.delay_s)``, or ``max(global, 30 days)`` when ``delay_s`` is 0
  (:meth:`Outcomes.validity_s`).
* ``source``: where the model came from: ``model_uri`` [""] (example: ``models:/churn/3``), ``run_id`` [""].
* ``canary`` [absent]: canary spec fields for this model's releases (``modelops.canary.spec``), replacing
  the defaults a release param left as they are (example: ``{shadow: true, shadow_max_delta_p95: 0.2}``:
  a retrained model may move its answers this much in shadow); absent, the spec's JSON is unchanged.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from modelops.errors import ContractError
from modelops.names import model_name_problem
from modelops.records import ACTIONS

SPEC_SCHEMA_VERSION = 1
DTYPES: tuple[str, ...] = ("FP32", "FP64", "INT32", "INT64", "BOOL", "BYTES")
FLAVORS: tuple[str, ...] = ("triton", "onnx", "sklearn", "lightgbm", "xgboost", "pyfunc")
FLAVOR_BACKENDS: dict[str, str] = {"onnx": "onnxruntime", "sklearn": "onnxruntime", "lightgbm": "onnxruntime",
                                   "xgboost": "onnxruntime", "pyfunc": "python"}
"""Triton backend per flavor (the names :mod:`modelops.serving.pbtxt` writes); ``triton`` states its own."""
REQUEST_FORMS: tuple[str, ...] = ("tabular", "feature-lookup")
INSTANCE_KINDS: tuple[str, ...] = ("cpu", "gpu", "auto")
LABEL_KINDS: tuple[str, ...] = ("binary", "multiclass", "numeric")
DEFAULT_DRIFT_SENSITIVITY = 0.5
LABEL_FALLBACK_TTL_S = 30 * 86400.0
"""Token validity of a labelled model whose label declares no delay (and no ``token_ttl_s``): 30 days."""
"""Drift weight of a feature nobody rated: the middle of [0, 1], so rated features rank above or below it."""
TENSOR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
_STRUCT = {"frozen": True, "forbid_unknown_fields": True, "kw_only": True}


class Tensor(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """One input or output tensor; ``shape`` includes the batch dimension (``-1``) first."""

    name: str
    dtype: str
    shape: tuple[int, ...]


class Feature(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """One input column (see the module docstring)."""

    name: str
    dtype: str
    min: float | None = None
    max: float | None = None
    baseline: float | None = None
    description: str = ""
    owner: str = ""
    drift_sensitivity: float = DEFAULT_DRIFT_SENSITIVITY
    drift_threshold: float | None = None
    required: bool = True
    not_null_mostly: float | None = 1.0


class Request(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """The edge request form."""

    form: str = "tabular"
    max_items: int = 50


class DynamicBatching(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Triton's dynamic batcher."""

    max_queue_delay_us: int = 100
    preferred_batch_size: tuple[int, ...] = (8, 16)


class InstanceGroup(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Where and how many model instances run."""

    kind: str = "cpu"
    count: int = 1
    gpus: tuple[int, ...] = ()


class Tuning(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Triton batching and instances (the defaults are :class:`modelops.serving.pbtxt.Tuning`'s)."""

    max_batch_size: int = 64
    dynamic_batching: DynamicBatching | None = msgspec.field(default_factory=DynamicBatching)
    instance_group: InstanceGroup = msgspec.field(default_factory=InstanceGroup)


class Label(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Ground truth that arrives later."""

    kind: str
    delay_s: float = 0.0
    classes: tuple[str, ...] = ()


class Outcomes(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Feedback actions and/or a delayed label, and how long a prediction's token takes them."""

    actions: tuple[str, ...] = ()
    label: Label | None = None
    token_ttl_s: float | None = None

    def accepted_actions(self) -> tuple[str, ...]:
        """The actions ``POST /v1/feedback`` takes: the declared ones; the platform's when nothing is declared."""
        return self.actions if self.actions or self.label is not None else ACTIONS

    def validity_s(self, global_ttl_s: float) -> float:
        """Seconds after the prediction its token is accepted (see the module docstring's ``token_ttl_s``)."""
        if self.token_ttl_s is not None:
            return self.token_ttl_s
        if self.label is None:
            return global_ttl_s
        # Ground truth comes late: a token must outlive the expected delay with room for stragglers.
        wanted = 2.0 * self.label.delay_s if self.label.delay_s > 0 else LABEL_FALLBACK_TTL_S
        return max(global_ttl_s, wanted)


class Source(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Where the model came from."""

    model_uri: str = ""
    run_id: str = ""


class ModelSpec(msgspec.Struct, **_STRUCT):  # type: ignore[call-arg]
    """Everything the platform knows about one served model (see the module docstring)."""

    name: str
    flavor: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    request: Request = msgspec.field(default_factory=Request)
    features: tuple[Feature, ...] = ()
    tuning: Tuning = msgspec.field(default_factory=Tuning)
    routing_key: str | None = None
    outcomes: Outcomes = msgspec.field(default_factory=Outcomes)
    source: Source = msgspec.field(default_factory=Source)
    backend: str | None = None
    parameters: dict[str, str] = msgspec.field(default_factory=dict)
    schema_version: int = SPEC_SCHEMA_VERSION
    canary: dict[str, bool | int | float | str | list[float]] | msgspec.UnsetType = msgspec.UNSET
    """Release (canary spec) overrides; UNSET is left out of the JSON, so specs without any keep their bytes."""

    def __post_init__(self) -> None:
        problems = spec_problems(self)
        if problems:
            raise ContractError(f"model spec {self.name!r}: " + "; ".join(problems))

    @property
    def triton_backend(self) -> str:
        """The Triton backend: ``backend`` or the flavor's."""
        return self.backend or FLAVOR_BACKENDS.get(self.flavor, "")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (tuples become lists)."""
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return out

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_dict(cls, raw: Any) -> ModelSpec:
        """Build from a mapping; unknown keys and wrong types are refused naming the field."""
        return _decode(lambda: msgspec.convert(raw, cls))

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelSpec:
        return _decode(lambda: msgspec.json.decode(text, type=cls))


EXAMPLES: dict[str, str] = {
    "name": '"churn"', "flavor": '"sklearn"', "backend": '"onnxruntime"',
    "inputs": '[{"name": "input", "dtype": "FP32", "shape": [-1, 30]}]',
    "outputs": '[{"name": "probabilities", "dtype": "FP32", "shape": [-1, 2]}]',
    "shape": "[-1, 30]", "dtype": '"FP32"', "request": '{"form": "tabular", "max_items": 50}',
    "form": '"tabular"', "max_items": "50", "features": '[{"name": "mean radius", "dtype": "FP64"}]',
    "min": "0", "max": "3650", "drift_sensitivity": "0.5", "drift_threshold": "0.08",
    "required": "true", "not_null_mostly": "0.99",
    "description": '"days since signup"', "owner": '"growth-team"',
    "tuning": '{"max_batch_size": 64}', "max_batch_size": "64", "dynamic_batching": '{"max_queue_delay_us": 100}',
    "max_queue_delay_us": "100", "preferred_batch_size": "[8, 16]",
    "instance_group": '{"kind": "gpu", "count": 1, "gpus": [0]}', "kind": '"cpu"', "count": "1", "gpus": "[0]",
    "routing_key": '"user_id"', "outcomes": '{"actions": ["click"]}', "actions": '["click", "purchase"]',
    "label": '{"kind": "binary", "delay_s": 86400}', "delay_s": "86400", "classes": '["no", "yes"]',
    "token_ttl_s": "604800",
    "source": '{"model_uri": "models:/churn/3"}', "model_uri": '"models:/churn/3"', "run_id": '"4f1c..."',
    "schema_version": "1", "parameters": '{"predict_fn": "predict_proba"}',
}
"""An example value per field name (for error messages)."""
_STRUCT_AT: dict[str, type[msgspec.Struct]] = {
    "inputs": Tensor, "outputs": Tensor, "features": Feature, "request": Request, "tuning": Tuning,
    "dynamic_batching": DynamicBatching, "instance_group": InstanceGroup, "outcomes": Outcomes, "label": Label,
    "source": Source}
_AT = re.compile(r"at `\$((?:\.[A-Za-z_]+|\[\d+\])*)`")


def _decode(build: Any) -> ModelSpec:
    try:
        spec: ModelSpec = build()
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _AT.search(message)
        path = match.group(1).lstrip(".") if match else ""
        leaf = re.sub(r"\[\d+\]", "", path).rsplit(".", 1)[-1] if path else ""
        named = re.search(r"(unknown|missing required) field `([^`]+)`", message)
        allowed = ""
        if named:
            struct = _STRUCT_AT.get(leaf, ModelSpec)
            leaf = named.group(2)
            if named.group(1) == "unknown":
                allowed = f"; allowed: {', '.join(struct.__struct_fields__)}"
        example = f" (example: {leaf}: {EXAMPLES[leaf]})" if leaf in EXAMPLES else ""
        message += allowed
        raise ContractError(f"model spec: {path or '$'}: {message}{example}") from exc
    except msgspec.DecodeError as exc:
        raise ContractError(f"model spec: not valid JSON: {exc}") from exc
    return spec


def _one_of(field: str, value: object, allowed: tuple[str, ...]) -> list[str]:
    if value in allowed:
        return []
    return [f"{field}={value!r}: must be one of {list(allowed)} (example: {allowed[0]})"]


def _tensor_problems(kind: str, tensors: tuple[Tensor, ...], batched: bool) -> list[str]:
    problems: list[str] = []
    if not tensors:
        problems.append(f"{kind}: at least one tensor is needed (example: {kind}: {EXAMPLES[kind]})")
    seen: set[str] = set()
    for i, t in enumerate(tensors):
        where = f"{kind}[{i}] ({t.name})"
        if not TENSOR_NAME.match(t.name):
            problems.append(f"{where}.name: must match {TENSOR_NAME.pattern} (example: input)")
        if t.name in seen:
            problems.append(f"{where}.name: appears twice; tensor names must be unique")
        seen.add(t.name)
        problems += _one_of(f"{where}.dtype", t.dtype, DTYPES)
        if not t.shape or any(d == 0 or d < -1 for d in t.shape):
            problems.append(f"{where}.shape={list(t.shape)}: each dimension must be positive or -1 "
                            "(example: [-1, 30])")
        elif batched and (t.shape[0] != -1 or len(t.shape) < 2):
            problems.append(f"{where}.shape={list(t.shape)}: with max_batch_size > 0 the first dimension is the "
                            "batch (-1) and at least one more follows (example: [-1, 30])")
    return problems


def _feature_problems(features: tuple[Feature, ...]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for i, f in enumerate(features):
        where = f"features[{i}] ({f.name})"
        if not f.name or f.name != f.name.strip():
            problems.append(f"{where}.name: must be non-empty without leading/trailing spaces (example: mean radius)")
        if f.name in seen:
            problems.append(f"{where}.name: appears twice; feature names must be unique")
        seen.add(f.name)
        problems += _one_of(f"{where}.dtype", f.dtype, DTYPES)
        if f.min is not None and f.max is not None and f.min > f.max:
            problems.append(f"{where}: min={f.min} > max={f.max}; min must not exceed max (example: min: 0, max: 1)")
        if (f.min is not None or f.max is not None) and f.dtype in ("BOOL", "BYTES"):
            problems.append(f"{where}: a range needs a numeric dtype, not {f.dtype} (example: dtype: FP64)")
        if not 0.0 <= f.drift_sensitivity <= 1.0:
            problems.append(f"{where}.drift_sensitivity={f.drift_sensitivity}: must be in [0, 1] (example: 0.5)")
        if f.drift_threshold is not None and not 0.0 < f.drift_threshold <= 1.0:
            problems.append(f"{where}.drift_threshold={f.drift_threshold}: must be in (0, 1] or null (example: 0.08)")
        if f.not_null_mostly is not None and not 0.0 < f.not_null_mostly <= 1.0:
            problems.append(f"{where}.not_null_mostly={f.not_null_mostly}: must be in (0, 1] or null (example: 0.99)")
    return problems


def _tuning_problems(t: Tuning) -> list[str]:
    problems: list[str] = []
    if t.max_batch_size < 0:
        problems.append(f"tuning.max_batch_size={t.max_batch_size}: must be >= 0 (0: no batching; example: 64)")
    b = t.dynamic_batching
    if b is not None:
        if t.max_batch_size == 0:
            problems.append("tuning.dynamic_batching: needs max_batch_size > 0 (example: dynamic_batching: null)")
        if b.max_queue_delay_us < 0:
            problems.append(f"tuning.dynamic_batching.max_queue_delay_us={b.max_queue_delay_us}: must be >= 0 "
                            "(example: 100)")
        bad = [s for s in b.preferred_batch_size if not 1 <= s <= max(t.max_batch_size, 1)]
        if bad:
            problems.append(f"tuning.dynamic_batching.preferred_batch_size {bad}: must lie in [1, max_batch_size="
                            f"{t.max_batch_size}] (example: [8, 16])")
    g = t.instance_group
    problems += _one_of("tuning.instance_group.kind", g.kind, INSTANCE_KINDS)
    if g.count < 1:
        problems.append(f"tuning.instance_group.count={g.count}: must be >= 1 (example: 1)")
    if g.gpus and g.kind != "gpu":
        problems.append(f"tuning.instance_group.gpus={list(g.gpus)}: only with kind gpu "
                        "(example: kind: gpu, gpus: [0])")
    if any(d < 0 for d in g.gpus) or len(set(g.gpus)) != len(g.gpus):
        problems.append(f"tuning.instance_group.gpus={list(g.gpus)}: distinct device ids >= 0 (example: [0, 1])")
    return problems


def spec_problems(spec: ModelSpec) -> list[str]:
    """Every rule the spec breaks, each naming the field, the rule and an example."""
    problems: list[str] = []
    if spec.schema_version != SPEC_SCHEMA_VERSION:
        problems.append(f"schema_version={spec.schema_version!r}: this code reads {SPEC_SCHEMA_VERSION} (example: 1)")
    name_problem = model_name_problem(spec.name, "name")
    if name_problem:
        problems.append(name_problem)
    problems += _one_of("flavor", spec.flavor, FLAVORS)
    if any(not key or key != key.strip() for key in spec.parameters):
        problems.append(f"parameters {sorted(spec.parameters)}: names must be non-empty without leading/trailing "
                        "spaces (example: parameters: {predict_fn: predict_proba})")
    if isinstance(spec.canary, dict):
        problems += [f"canary.{key}: not a canary spec field name (example: shadow_max_delta_p95)"
                     for key in spec.canary if not key.isidentifier()]
    if spec.flavor == "triton" and not spec.backend:
        problems.append('backend: a triton-flavor model must name its Triton backend (example: "onnxruntime")')
    batched = spec.tuning.max_batch_size > 0
    problems += _tensor_problems("inputs", spec.inputs, batched)
    problems += _tensor_problems("outputs", spec.outputs, batched)
    problems += _one_of("request.form", spec.request.form, REQUEST_FORMS)
    if spec.request.max_items < 1:
        problems.append(f"request.max_items={spec.request.max_items}: must be >= 1 (example: 50)")
    problems += _feature_problems(spec.features)
    problems += _tuning_problems(spec.tuning)
    columns = {f.name for f in spec.features} | {t.name for t in spec.inputs}
    if spec.request.form == "feature-lookup":
        if not spec.routing_key:
            problems.append('routing_key: the feature-lookup form needs the entity field (example: "user_id")')
        if not spec.features:
            problems.append("features: the feature-lookup form needs the looked-up features "
                            f"(example: features: {EXAMPLES['features']})")
    elif spec.routing_key is not None and spec.routing_key not in columns:
        problems.append(f"routing_key={spec.routing_key!r}: must be an input column or tensor "
                        f"(one of {sorted(columns)[:10]}; example: customer_id)")
    if len(set(spec.outcomes.actions)) != len(spec.outcomes.actions) or any(not a for a in spec.outcomes.actions):
        problems.append(f"outcomes.actions={list(spec.outcomes.actions)}: distinct non-empty names "
                        "(example: [click, purchase, skip])")
    label = spec.outcomes.label
    if label is not None:
        problems += _one_of("outcomes.label.kind", label.kind, LABEL_KINDS)
        if label.delay_s < 0:
            problems.append(f"outcomes.label.delay_s={label.delay_s}: must be >= 0 (example: 86400)")
        if label.kind == "multiclass" and len(label.classes) < 3:
            problems.append("outcomes.label.classes: a multiclass label names at least 3 classes "
                            "(example: [low, mid, high])")
        if label.kind == "binary" and len(label.classes) not in (0, 2):
            problems.append(f"outcomes.label.classes={list(label.classes)}: a binary label names no classes or "
                            "exactly 2, the positive one second (example: [no, yes])")
        if len(set(label.classes)) != len(label.classes) or any(not c for c in label.classes):
            problems.append(f"outcomes.label.classes={list(label.classes)}: distinct non-empty names "
                            "(example: [low, mid, high])")
        if label.kind == "numeric" and label.classes:
            problems.append("outcomes.label.classes: a numeric label has no classes (example: classes: [])")
    ttl = spec.outcomes.token_ttl_s
    if ttl is not None and not (math.isfinite(ttl) and ttl > 0):
        problems.append(f"outcomes.token_ttl_s={ttl}: must be a number of seconds > 0 or null (example: 604800)")
    return problems
