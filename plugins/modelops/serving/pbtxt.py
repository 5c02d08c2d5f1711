"""Triton model configurations of the served pipeline (pure): specs, config.pbtxt, JSON, comparison.

For a model NAME there are three Triton models: ``NAME_preprocess`` (``features`` →
``scaled``), ``NAME_model`` (``scaled`` → ``score``) and the pipeline ``NAME``
(``features`` → ``score``) whose version N calls version N of both steps. The same
:class:`ModelConfigSpec` renders the ``config.pbtxt`` file (from
``model_repository/templates/<role>.pbtxt.tmpl``) and the JSON config passed as the
``config`` override of Triton's load API; :func:`config_mismatches` compares the
config Triton reports after loading with the fields set here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Literal

from modelops.config import PROJECT_ROOT
from modelops.errors import ServingError
from modelops.modelspec.render import tensor_block, tensors_text, version_policy
from modelops.names import check_model_name

TEMPLATES_DIR = PROJECT_ROOT / "model_repository" / "templates"
Role = Literal["ensemble", "preprocess", "model"]
ROLES: tuple[Role, ...] = ("preprocess", "model", "ensemble")
"""Load order: both steps before the pipeline that calls them."""

EXPLAIN_BASELINE, EXPLAIN_RANKS, PATH_SCORE = "explain_baseline", "explain_ranks", "path_score"
"""The pipeline's optional inputs of an explanation and its output (see ``templates/ensemble_model.py``)."""
_DTYPES = {"float32": "TYPE_FP32", "float64": "TYPE_FP64", "int64": "TYPE_INT64", "int32": "TYPE_INT32"}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output tensor; ``dims`` exclude the batch dimension."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False  # a request may leave it out (Triton's ``optional: true``)

    def __post_init__(self) -> None:
        if self.data_type not in _DTYPES.values():
            raise ServingError(f"tensor {self.name}: data_type {self.data_type!r} must be one of "
                               f"{sorted(_DTYPES.values())} (example: TYPE_FP32)")
        if not self.dims or any(d == 0 or d < -1 for d in self.dims):
            raise ServingError(
                f"tensor {self.name}: dims {self.dims} must be positive or -1 (example: (128,))"
            )


@dataclass(frozen=True)
class Tuning:
    """Batching and instance settings shared by the three models."""

    max_batch_size: int = 64
    max_queue_delay_us: int = 100
    preferred_batch_sizes: tuple[int, ...] = (8, 16)
    instance_count: int = 1
    instance_kind: str = "KIND_CPU"

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ServingError(f"max_batch_size={self.max_batch_size}: must be >= 1 (the contract batches)")
        if self.max_queue_delay_us < 0:
            raise ServingError(f"max_queue_delay_us={self.max_queue_delay_us}: must be >= 0 (example: 100)")
        bad = [b for b in self.preferred_batch_sizes if not 1 <= b <= self.max_batch_size]
        if bad:
            raise ServingError(
                f"preferred_batch_sizes {bad}: must lie in [1, max_batch_size={self.max_batch_size}]"
            )
        if self.instance_count < 1:
            raise ServingError(f"instance_count={self.instance_count}: must be >= 1 (example: 1)")


@dataclass(frozen=True)
class ModelConfigSpec:
    """Everything a rendered config of one Triton model says.

    Attributes:
        name: the Triton model name.
        role: which template renders it.
        backend: ``python`` or ``onnxruntime`` (the pipeline is always ``python``).
        inputs / outputs: tensors of the model signature.
        tuning: batching and instances.
        versions: the versions to serve (``version_policy: specific``); empty means
            ``latest { num_versions: 1 }`` (the file form, independent of the version).
        parameters: string parameters (the pipeline's step names and tensor names).
    """

    name: str
    role: Role
    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tuning: Tuning
    versions: tuple[int, ...] = ()
    parameters: tuple[tuple[str, str], ...] = ()

    def with_versions(self, versions: Sequence[int]) -> ModelConfigSpec:
        """The same spec serving exactly ``versions`` (sorted, de-duplicated)."""
        return ModelConfigSpec(self.name, self.role, self.backend, self.inputs, self.outputs, self.tuning,
                               tuple(sorted(set(versions))), self.parameters)


@dataclass(frozen=True)
class Signature:
    """The tensor contract of the pipeline (defaults: the platform's reference contract)."""

    features: TensorSpec = TensorSpec("features", "TYPE_FP32", (128,))
    scaled: TensorSpec = TensorSpec("scaled", "TYPE_FP32", (128,))
    score: TensorSpec = TensorSpec("score", "TYPE_FP32", (1,))

    def explain_tensors(self) -> tuple[tuple[TensorSpec, ...], TensorSpec]:
        """The pipeline's optional explanation inputs and their output (``ensemble_model.py`` computes them):
        the baseline and the permutations as ranks, repeated per item, and per item its path scores."""
        return ((TensorSpec(EXPLAIN_BASELINE, self.features.data_type, self.features.dims, optional=True),
                 TensorSpec(EXPLAIN_RANKS, "TYPE_INT64", (-1,), optional=True)),
                TensorSpec(PATH_SCORE, self.score.data_type, (-1,)))


def step_names(model: str) -> dict[Role, str]:
    """Triton model names (folders, ``config.pbtxt`` names) of the three roles of ``model`` (the name checked)."""
    check_model_name(model)
    return {"preprocess": f"{model}_preprocess", "model": f"{model}_model", "ensemble": model}


def pipeline_specs(model: str, *, backend: str, tuning: Tuning | None = None,
                   signature: Signature | None = None) -> dict[Role, ModelConfigSpec]:
    """The three config specs of ``model`` (file form: no specific versions).

    Args:
        model: the pipeline name NAME.
        backend: ``python`` or ``onnxruntime`` for the two steps.
        tuning: batching/instances; defaults to :class:`Tuning`.
        signature: tensor contract; defaults to :class:`Signature`.
    """
    if backend not in {"python", "onnxruntime"}:
        raise ServingError(f"backend={backend!r}: must be python or onnxruntime")
    tuning = tuning or Tuning()
    sig = signature or Signature()
    names = step_names(model)
    explain_inputs, path_score = sig.explain_tensors()
    return {
        "preprocess": ModelConfigSpec(
            names["preprocess"], "preprocess", backend, (sig.features,), (sig.scaled,), tuning
        ),
        "model": ModelConfigSpec(names["model"], "model", backend, (sig.scaled,), (sig.score,), tuning),
        "ensemble": ModelConfigSpec(
            names["ensemble"], "ensemble", "python", (sig.features, *explain_inputs), (sig.score, path_score), tuning,
            parameters=(
                ("preprocess_model", names["preprocess"]),
                ("preprocess_input", sig.features.name),
                ("preprocess_output", sig.scaled.name),
                ("model_model", names["model"]),
                ("model_input", sig.scaled.name),
                ("model_output", sig.score.name),
            ),
        ),
    }


def _tensors(kind: str, tensors: Sequence[TensorSpec]) -> str:
    return tensors_text(kind, [tensor_block(t.name, t.data_type, t.dims, t.optional) for t in tensors])


def render_pbtxt(spec: ModelConfigSpec, *, templates_dir: Path = TEMPLATES_DIR) -> str:
    """``config.pbtxt`` text of ``spec`` from its role's template."""
    path = templates_dir / f"{spec.role}.pbtxt.tmpl"
    try:
        template = Template(path.read_text())
    except OSError as exc:
        raise ServingError(f"template {path} unreadable: {exc}") from exc
    t = spec.tuning
    preferred = ", ".join(map(str, t.preferred_batch_sizes))
    batching = (
        "dynamic_batching {\n"
        + (f"  preferred_batch_size: [ {preferred} ]\n" if t.preferred_batch_sizes else "")
        + f"  max_queue_delay_microseconds: {t.max_queue_delay_us}\n}}"
    )
    values = {
        "name": spec.name,
        "backend": spec.backend,
        "max_batch_size": str(t.max_batch_size),
        "inputs": _tensors("input", spec.inputs),
        "outputs": _tensors("output", spec.outputs),
        "dynamic_batching": batching,
        "instance_group": f"instance_group [ {{ kind: {t.instance_kind}, count: {t.instance_count} }} ]",
        "version_policy": version_policy(spec.versions),
        **dict(spec.parameters),
    }
    try:
        return template.substitute(values)
    except (KeyError, ValueError) as exc:
        raise ServingError(f"template {path}: placeholder {exc} has no value") from exc


def config_json(spec: ModelConfigSpec) -> dict[str, Any]:
    """The same configuration as Triton's JSON model config (the ``config`` load override)."""
    t = spec.tuning
    doc: dict[str, Any] = {
        "name": spec.name,
        "backend": spec.backend,
        "max_batch_size": t.max_batch_size,
        "input": [{"name": x.name, "data_type": x.data_type, "dims": list(x.dims),
                   **({"optional": True} if x.optional else {})} for x in spec.inputs],
        "output": [{"name": x.name, "data_type": x.data_type, "dims": list(x.dims)} for x in spec.outputs],
        "dynamic_batching": {
            "preferred_batch_size": list(t.preferred_batch_sizes),
            "max_queue_delay_microseconds": t.max_queue_delay_us,
        },
        "instance_group": [{"kind": t.instance_kind, "count": t.instance_count}],
        "version_policy": (
            {"specific": {"versions": list(spec.versions)}}
            if spec.versions
            else {"latest": {"num_versions": 1}}
        ),
    }
    if spec.parameters:
        doc["parameters"] = {key: {"string_value": value} for key, value in spec.parameters}
    return doc


def _as_int(value: Any) -> Any:
    # Triton's JSON renders int64 fields as strings ("dims": ["128"]); compare as numbers.
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def _norm(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return _as_int(value)


def config_mismatches(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """Fields of ``expected`` (as :func:`config_json` builds) that ``actual`` (Triton's) does not match.

    Only the fields set here are compared; Triton adds defaults of its own. Returns
    one human-readable line per mismatch (empty when they agree).
    """
    problems: list[str] = []
    exp, act = _norm(expected), _norm(actual)

    def same(path: str, want: Any, got: Any) -> None:
        if want != got:
            problems.append(f"{path}: rendered {json.dumps(want)}, Triton reports {json.dumps(got)}")

    for key in ("name", "backend", "max_batch_size"):
        same(key, exp.get(key), act.get(key))
    for kind in ("input", "output"):
        got_by_name = {t.get("name"): t for t in act.get(kind, [])}
        for tensor in exp.get(kind, []):
            have = got_by_name.get(tensor["name"])
            if have is None:
                problems.append(f"{kind} {tensor['name']}: missing in Triton's config")
                continue
            same(f"{kind} {tensor['name']}.data_type", tensor["data_type"], have.get("data_type"))
            same(f"{kind} {tensor['name']}.dims", tensor["dims"], have.get("dims"))
            if tensor.get("optional"):
                same(f"{kind} {tensor['name']}.optional", True, have.get("optional", False))
    if "dynamic_batching" in exp:  # none rendered: the model does not batch, Triton's own default stands
        want_b, got_b = exp["dynamic_batching"], act.get("dynamic_batching") or {}
        same("dynamic_batching.max_queue_delay_microseconds", want_b.get("max_queue_delay_microseconds"),
             got_b.get("max_queue_delay_microseconds", 0))
        same("dynamic_batching.preferred_batch_size", want_b.get("preferred_batch_size"),
             got_b.get("preferred_batch_size", []))
    want_groups = [(g["kind"], g["count"]) for g in exp.get("instance_group", [])]
    got_groups = [(g.get("kind"), g.get("count")) for g in act.get("instance_group", [])]
    same("instance_group", want_groups, got_groups)
    same("version_policy", exp.get("version_policy"), act.get("version_policy"))
    for key, value in (exp.get("parameters") or {}).items():
        got_param = (act.get("parameters") or {}).get(key, {})
        same(f"parameters.{key}", value.get("string_value"), got_param.get("string_value"))
    return problems
