"""The scaling controller: Triton's queue metrics in, instance counts out (``modelops scale``).

Each tick it scrapes Triton's ``/metrics``, differences the per-version counters against
the previous scrape (:func:`modelops.serving.scaling.window_load`), asks
:func:`~modelops.serving.scaling.decide` for every READY Triton model whose name matches
``MODELOPS_SCALING_MODELS``, and carries a change out with :func:`set_instance_count`: the
model's config as Triton reports it (``GET /v2/models/{model}/config``) with
``instance_group[0].count`` changed, passed as the ``config`` override of the load API
(``MODELOPS_SCALING_MODE``, see :func:`with_count`: ``update`` changes only the count and
Triton updates the instances in place, but waits for the model's queue to empty first;
``replace``, the default, also sets a marker parameter, so Triton loads a new copy and
switches). Checked on the embedded Triton (the nvidia-pytriton 0.7.0 wheel's): in both modes
every version stays loaded and no request fails. Triton keeps one config per model, so the
count applies to every version of the model.

Every change is appended to the audit log (``HOME/logs/scaling.audit.jsonl``: at, who,
model, from, to, why, versions, seconds, ok, error), counted in the Prometheus metrics of
this process (pushed to the Pushgateway when one is configured) and shown in the status
file ``HOME/run/scaler.status.json`` (the stack's health check reads its age).
A change takes the model's lock (the one releases and the reconciler take, keyed by the
pipeline name), so an override never races a load that changes the served versions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families

from modelops.config import Settings
from modelops.errors import ModelopsError, ServingError
from modelops.serving.scaling import Decision, Load, Policy, State, decide, window_load
from modelops.serving.triton import TritonClient

log = logging.getLogger("modelops.scaling")

Counters = dict[tuple[str, int], dict[str, float]]
PUSH_JOB = "modelops_scaling"


def parse_metrics(text: str) -> Counters:
    """Per (model, version): cumulative ``queue_us``, ``requests`` (success + failure) and the ``pending`` gauge."""
    out: Counters = {}
    wanted = {"nv_inference_queue_duration_us": "queue_us", "nv_inference_request_success": "requests",
              "nv_inference_request_failure": "requests", "nv_inference_pending_request_count": "pending"}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ServingError(f"Triton metrics unreadable: {exc}") from exc
    for family in families:
        key = wanted.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            version = sample.labels.get("version", "")
            if not version.isdigit():
                continue
            row = out.setdefault((sample.labels.get("model", ""), int(version)), {})
            row[key] = row.get(key, 0.0) + float(sample.value)
    return out


def scrape(metrics_url: str, timeout_s: float = 5.0) -> Counters:
    try:
        response = requests.get(metrics_url, timeout=timeout_s)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ServingError(f"Triton metrics {metrics_url}: {exc}") from exc
    return parse_metrics(response.text)


def instance_count(config: Mapping[str, Any]) -> int:
    """The instance count of a Triton model config with exactly one instance group."""
    groups = config.get("instance_group") or []
    if len(groups) != 1:
        raise ServingError(f"{config.get('name')}: {len(groups)} instance groups; the controller scales models "
                           "with exactly one (example: instance_group [ { kind: KIND_CPU, count: 1 } ])")
    return int(groups[0].get("count", 1))


MODES = ("replace", "update")
MARKER = "modelops_instance_count"
"""The parameter mode ``replace`` sets beside the count (the model code never reads it)."""


def with_count(config: Mapping[str, Any], count: int, mode: str = "replace") -> dict[str, Any]:
    """``config`` with ``instance_group[0].count`` changed, every other field as Triton reported it.

    ``update``: nothing else changes, so Triton updates the instances in place; it then waits
    until the model's queue is empty (under steady overload: measured 39 s, once ~10 min).
    ``replace``: the parameter :data:`MARKER` also carries the count, which makes Triton load a
    new copy of the model beside the serving one and switch to it (measured ~6 s under the same
    load, no request failed); the model code does not read the parameter.
    """
    if mode not in MODES:
        raise ServingError(f"scaling mode {mode!r}: must be one of {', '.join(MODES)} (example: replace)")
    instance_count(config)
    groups = [dict(g) for g in config["instance_group"]]
    groups[0]["count"] = count
    doc = {**config, "instance_group": groups}
    if mode == "replace":
        doc["parameters"] = {**(config.get("parameters") or {}), MARKER: {"string_value": str(count)}}
    return doc


def set_instance_count(client: TritonClient, model: str, count: int, mode: str = "replace") -> int:
    """Reload ``model`` with its current config and ``count`` instances; returns the count before.

    Raises:
        ServingError: the load failed, or Triton reports another count afterwards.
    """
    config = client.model_config(model)
    before = instance_count(config)
    client.load(model, with_count(config, count, mode))
    after = instance_count(client.model_config(model))
    if after != count:
        raise ServingError(f"{model}: Triton runs {after} instance(s) after a reload with {count}")
    return before


def lock_name(model: str) -> str:
    """The name whose lock guards ``model``: the pipeline of a step (NAME_preprocess, NAME_model → NAME)."""
    for suffix in ("_preprocess", "_model"):
        if model.endswith(suffix) and len(model) > len(suffix):
            return model[: -len(suffix)]
    return model


@dataclass
class Metrics:
    """The controller's Prometheus metrics (one registry per controller)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.instances = Gauge("modelops_scaling_instances", "Instances the scaling controller last saw or set.",
                               ("model",), registry=self.registry)
        self.changes = Counter("modelops_scaling_changes", "Instance count changes by the scaling controller.",
                               ("model", "direction", "outcome"), registry=self.registry)
        self.queue_ms = Gauge("modelops_scaling_queue_ms", "Mean Triton queue time per request in the last window.",
                              ("model", "version"), registry=self.registry)


@dataclass
class Controller:
    """One tick per interval: scrape, decide, reload, record.

    Args:
        client: Triton's HTTP API.
        metrics_url: Triton's Prometheus endpoint.
        policy: bounds, thresholds, cool-down.
        models: regular expression the Triton model names must match (fully).
        audit_path: the JSONL audit log.
        mode: ``replace`` or ``update`` (see :func:`with_count`).
        lock: a context-manager factory ``lock(name, owner)`` (the per-model lock), or None.
        push: called with the metrics registry after each change (the Pushgateway), or None.
        clock: monotonic seconds.
    """

    client: TritonClient
    metrics_url: str
    policy: Policy
    models: str
    audit_path: Path
    mode: str = "replace"
    lock: Callable[[str, str], Any] | None = None
    push: Callable[[CollectorRegistry], None] | None = None
    clock: Callable[[], float] = time.monotonic
    metrics: Metrics = field(default_factory=Metrics)
    previous: Counters = field(default_factory=dict)
    states: dict[str, State] = field(default_factory=dict)
    last: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tick(self) -> list[dict[str, Any]]:
        """One pass; returns the changes made (audit records)."""
        pattern = re.compile(self.models)
        ready = sorted({r.name for r in self.client.repository_index()
                        if r.state == "READY" and r.version is not None and pattern.fullmatch(r.name)})
        counters = scrape(self.metrics_url)
        now = self.clock()
        changes = []
        for model in ready:
            loads: dict[int, Load] = {}
            for (name, version), after in counters.items():
                before = self.previous.get((name, version))
                load = window_load(before, after) if name == model and before is not None else None
                if load is not None:
                    loads[version] = load
                    self.metrics.queue_ms.labels(model, str(version)).set(load.queue_ms)
            try:
                record = self._one(model, loads, now)
            except ModelopsError as exc:
                log.warning("%s: %s", model, exc)
                self.last[model] = {"error": str(exc)[-300:]}
                continue
            if record is not None:
                changes.append(record)
        self.previous = counters
        return changes

    def _one(self, model: str, loads: Mapping[int, Load], now: float) -> dict[str, Any] | None:
        current = instance_count(self.client.model_config(model))
        self.metrics.instances.labels(model).set(current)
        decision = decide(self.policy, current, loads, self.states.get(model, State()), now)
        self.states[model] = decision.state
        self.last[model] = {"instances": current, "reason": decision.reason,
                            "loads": {str(v): vars(x) for v, x in loads.items()}}
        if not decision.changes:
            return None
        return self._change(model, decision, sorted(loads))

    def _change(self, model: str, decision: Decision, versions: list[int]) -> dict[str, Any]:
        started = time.monotonic()
        who = f"modelops scale (pid {os.getpid()} on {socket.gethostname()})"
        error = ""
        try:
            if self.lock is None:
                set_instance_count(self.client, model, decision.target, self.mode)
            else:
                with self.lock(lock_name(model), f"scaling {model} {decision.current}->{decision.target}"):
                    set_instance_count(self.client, model, decision.target, self.mode)
        except ModelopsError as exc:
            error = str(exc)[-500:]
        record = {"at": datetime.now(UTC).isoformat(timespec="milliseconds"), "who": who, "model": model,
                  "from": decision.current, "to": decision.target, "why": decision.reason, "versions": versions,
                  "seconds": round(time.monotonic() - started, 3), "ok": not error, "error": error}
        append_audit(self.audit_path, record)
        direction = "up" if decision.target > decision.current else "down"
        self.metrics.changes.labels(model, direction, "ok" if not error else "error").inc()
        if not error:
            self.metrics.instances.labels(model).set(decision.target)
            self.last[model]["instances"] = decision.target
        # After a change the counters of the reloaded versions may restart: the next window starts fresh.
        self.previous = {k: v for k, v in self.previous.items() if k[0] != model}
        (log.info if not error else log.warning)("%s: instances %d -> %d (%s)%s", model, decision.current,
                                                 decision.target, decision.reason, f": {error}" if error else "")
        if self.push is not None:
            self.push(self.metrics.registry)
        return record


def append_audit(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_audit(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def audit_path_of(cfg: Settings) -> Path:
    return cfg.home / "logs" / "scaling.audit.jsonl"


def status_file_of(cfg: Settings) -> Path:
    return cfg.home / "run" / "scaler.status.json"


def write_status(path: Path, controller: Controller | Sequence[Controller], *, error: str = "") -> None:
    """The last decisions per model (several Triton servers: per server URL, then per model)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    if isinstance(controller, Controller):
        models: dict[str, Any] = controller.last
    elif len(controller) == 1:
        models = controller[0].last
    else:
        models = {c.client.base_url: c.last for c in controller}
    tmp.write_text(json.dumps({"at": time.time(), "error": error, "models": models}, indent=1))
    tmp.replace(path)


def policy_of(cfg: Settings) -> Policy:
    return Policy(min_instances=cfg.scaling_min_instances, max_instances=cfg.scaling_max_instances,
                  up_queue_ms=cfg.scaling_up_queue_ms, down_queue_ms=cfg.scaling_down_queue_ms,
                  up_pending=cfg.scaling_up_pending, cooldown_s=cfg.scaling_cooldown_s)
