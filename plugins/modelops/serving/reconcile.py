"""Triton state declared, not remembered: make every Triton serve exactly the routed versions.

The routes documents (``routes/<model>.json``) are the declared state. Each tick the
reconciler reads them and, for every Triton server (with ``MODELOPS_TRITON_URL=dns+http://name:port``
every address the name resolves to at this tick, :func:`targets_of`: a server added with ``--scale``
or restarted at a new address is found at the next tick) and every routed model, each server on
its own (one :func:`plan` per server: a restarted, empty server gets its routed versions while the
others are left as they are):

- loads the routed stable and canary versions that are not served (after a Triton
  restart: all of them), with the pinned config override (``version_policy: specific``
  plus the rendered config), mirroring them from the object store first;
- unloads versions the routes do not name, unless a hold keeps them (a release loads its
  candidate before routing it, see :mod:`modelops.serving.holds`) or they were routed less
  than ``grace_s`` ago (an instant rollback target);
- reloads a model whose served config differs from the rendered one (a plain load would
  serve the newest integer version, which may be a rolled-back canary);
- never loads a version the routes do not name.

Why a small service of its own (``modelops reconcile``) and not the gateway: gateways are N
replicas on the hot path; N reconcilers would race each other's reloads, and a reload
(python stubs starting) costs CPU the hot path needs. One reconciler per deployment takes
the per-model lock the release's loads take, so the two never interleave. Models without a
routes document are left alone.

:func:`plan` is pure; :class:`Reconciler` carries the plan out.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelops.config import Settings
from modelops.errors import ContractError, ModelopsError, ServingError
from modelops.modelspec.spec import ModelSpec
from modelops.objectstore import ObjectStore
from modelops.serving.pbtxt import ROLES, ModelConfigSpec, Role, config_json, config_mismatches
from modelops.serving.spec_reconcile import read_spec, spec_plan, spec_step
from modelops.serving.triton import TritonClient

log = logging.getLogger("modelops.reconcile")


@dataclass(frozen=True)
class TritonTarget:
    """One Triton server the reconciler keeps in line, and the local repository it reads (if any)."""

    url: str
    repository: Path | None = None


def targets_of(urls: Sequence[str], repository: Path | None = None,
               resolve: Callable[[str, int], list[str]] | None = None) -> list[TritonTarget]:
    """One target per Triton server behind ``urls`` (``dns+`` names resolved now, :mod:`modelops.discovery`).

    Raises:
        ConfigError: a ``dns+`` name resolves to no server (the tick is skipped, Triton left as it is).
    """
    from modelops.discovery import expand, resolve_ipv4

    return [TritonTarget(url, repository) for url in expand(urls, resolve or resolve_ipv4)]


@dataclass(frozen=True)
class Plan:
    """What one Triton must change for one model (empty sets and ``reload`` False: in sync)."""

    model: str
    target: tuple[int, ...]
    load: frozenset[int]
    unload: frozenset[int]
    reload: bool

    @property
    def in_sync(self) -> bool:
        return not (self.load or self.unload or self.reload)


def plan(model: str, routed: frozenset[int], kept: frozenset[int], served: Mapping[Role, Sequence[int]],
         config_ok: bool) -> Plan:
    """The change that makes Triton serve ``routed`` (plus the served versions in ``kept``).

    Args:
        model: the pipeline name.
        routed: versions the routes name (stable and canary).
        kept: unrouted versions that may stay loaded (held, or routed within the grace period);
            never loaded by the plan.
        served: READY versions per role (preprocess, model, ensemble).
        config_ok: whether Triton's configs match the rendered ones for the served versions.
    """
    everywhere = set.intersection(*(set(served.get(role, ())) for role in ROLES))
    anywhere = set().union(*(set(served.get(role, ())) for role in ROLES))
    target = tuple(sorted(routed | (everywhere & kept)))
    load = frozenset(routed - everywhere)
    unload = frozenset(anywhere - set(target))
    mismatch = any(tuple(sorted(served.get(role, ()))) != target for role in ROLES)
    reload = bool(target) and not (load or unload) and (mismatch or not config_ok)
    return Plan(model, target, load, unload, reload)


@dataclass(frozen=True)
class Outcome:
    """The result of one model on one Triton in one tick."""

    triton: str
    model: str
    action: str  # in_sync | changed | skipped | error
    target: tuple[int, ...] = ()
    loaded: tuple[int, ...] = ()
    unloaded: tuple[int, ...] = ()
    seconds: float = 0.0
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"triton": self.triton, "model": self.model, "action": self.action, "target": list(self.target),
                "loaded": list(self.loaded), "unloaded": list(self.unloaded), "seconds": round(self.seconds, 3),
                "detail": self.detail}


def in_release_first(item: tuple[str, frozenset[int]]) -> tuple[bool, str]:
    """The order of a tick's work: models in a release (a canary or shadow routed beside the stable) first,
    then by name. After a Triton restart with many routed models the loads take a while (CI: ~25 models,
    90 s on 2 cores); a release's analysis windows and its automatic decision run meanwhile, so its
    versions come back first."""
    model, versions = item
    return len(versions) < 2, model


def read_model_routed(store: ObjectStore, model: str) -> frozenset[int] | None:
    """Routed versions of one model (None when it has no valid routes document)."""
    from modelops.documents.routes import load_routes, routed_versions, routes_key

    if not store.exists(routes_key(model)):
        return None
    try:
        routes = load_routes(store.get_bytes(routes_key(model)))
    except ContractError:
        return None
    return frozenset(routed_versions(routes))  # stable, canary and shadow


def read_routed(store: ObjectStore) -> dict[str, frozenset[int]]:
    """Routed versions per model from every valid routes document (an invalid one is skipped, logged)."""
    from modelops.documents.routes import ROUTES_PREFIX, load_routes, model_from_key, routed_versions

    routed = {}
    for key in store.list_keys(ROUTES_PREFIX):
        model = model_from_key(key)
        if model is None:
            continue
        try:
            routes = load_routes(store.get_bytes(key))
        except (ContractError, ModelopsError) as exc:
            log.warning("routes %s unusable, %s left as it is: %s", key, model, exc)
            continue
        routed[model] = frozenset(routed_versions(routes))  # stable, canary and shadow
    return routed


@dataclass
class Reconciler:
    """Carries out :func:`plan` on every Triton for every routed model.

    Args:
        store: the platform bucket (routes, holds, repositories, the per-model lock).
        tritons: the Triton servers to keep in line (when ``discover`` is not given).
        specs_of: the rendered config specs of a model (the pinned config override).
        grace_s: how long a version stays loaded after the routes stopped naming it.
        lock_wait_s: how long to wait for the per-model lock before skipping this tick.
        parallel: models reconciled at the same time.
        discover: the servers at each tick (e.g. :func:`targets_of` of a ``dns+`` URL); overrides ``tritons``.
    """

    store: ObjectStore
    tritons: Sequence[TritonTarget]
    specs_of: Any  # Callable[[str], Mapping[Role, ModelConfigSpec]]
    grace_s: float = 600.0
    lock_wait_s: float = 5.0
    parallel: int = 4
    last_routed: dict[tuple[str, int], float] = field(default_factory=dict)
    discover: Callable[[], Sequence[TritonTarget]] | None = None
    server_backend: str = "onnxruntime"  # how spec-published ONNX runs on these servers (serving.spec_files)
    server_gpus: int = 0  # GPUs of each server: where a spec's kind auto is placed (serving.spec_files)
    specs_read: dict[tuple[str, int], ModelSpec | None] = field(default_factory=dict)
    """Each routed version's stored spec (None: the recommender's pipeline), read once: a version never changes."""

    def tick(self) -> list[Outcome]:
        """One pass over every Triton and model. Object-store (or discovery) failures skip the whole tick."""
        from modelops.serving.holds import active_holds

        tritons = self.discover() if self.discover is not None else self.tritons
        routed = read_routed(self.store)
        now = time.monotonic()
        self._hold_dropped(routed)
        for model, versions in routed.items():
            for version in versions:
                self.last_routed[(model, version)] = now
        work = []
        for model, versions in sorted(routed.items(), key=in_release_first):
            kept = self._kept(model, now) | active_holds(self.store, model)
            work += [(triton, model, versions, kept) for triton in tritons]
        # Models are independent (each has its own lock): after a Triton restart with many routed models,
        # loading a few at once bounds the recovery by the slowest model instead of the sum of them all.
        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(work)))) as pool:
            return list(pool.map(lambda item: self._one(*item), work))

    def _hold_dropped(self, routed: Mapping[str, frozenset[int]]) -> None:
        """Persist the grace of versions the routes named at the last tick and no longer do.

        The grace (an instant rollback to the previous stable) must survive a restart of this
        reconciler, so it is written as a hold, not only kept in memory.
        """
        from modelops.serving.holds import write_hold

        latest = max(self.last_routed.values(), default=None)
        for (model, version), seen in list(self.last_routed.items()):
            if seen == latest and version not in routed.get(model, frozenset()):
                write_hold(self.store, model, version, why=f"no longer routed: kept loaded for {self.grace_s:.0f} s",
                           ttl_s=self.grace_s)

    def _kept(self, model: str, now: float) -> frozenset[int]:
        return frozenset(v for (m, v), seen in self.last_routed.items() if m == model and now - seen < self.grace_s)

    def _observe(self, client: TritonClient,
                 specs: Mapping[Role, ModelConfigSpec]) -> tuple[dict[Role, list[int]], bool]:
        served: dict[Role, list[int]] = {}
        index = client.repository_index()
        for role in ROLES:
            served[role] = sorted(r.version for r in index
                                  if r.name == specs[role].name and r.state == "READY" and r.version is not None)
        config_ok = True
        for role in ROLES:
            if not served[role]:
                continue
            expected = config_json(specs[role].with_versions(served[role]))
            reported = client.model_config(specs[role].name, max(served[role]))
            # A version kept across a reload keeps its old config object (see loader._apply_one): which
            # versions serve is checked by the READY set, every other field against the rendered config.
            # The instance count belongs to the scaling controller (modelops.serving.scaler): only the kind counts.
            if config_mismatches(expected, {**reported, "version_policy": expected["version_policy"],
                                            "instance_group": _counts_as(expected, reported)}):
                config_ok = False
        return served, config_ok

    def _one(self, triton: TritonTarget, model: str, routed: frozenset[int], kept: frozenset[int]) -> Outcome:
        from modelops.serving.index_store import model_lock

        client = TritonClient(triton.url)
        started = time.monotonic()
        try:
            spec = self._spec(model, max(routed))
            if spec is not None:  # one Triton model of its own (serving.spec_reconcile), not the pipeline
                return self._one_spec(client, triton, spec, routed, kept, started)
            specs = self.specs_of(model)
            served, config_ok = self._observe(client, specs)
            if plan(model, routed, kept, served, config_ok).in_sync:
                return Outcome(triton.url, model, "in_sync", tuple(sorted(routed)))
            with model_lock(self.store, model, owner=f"reconcile {model} on {triton.url}",
                            wait_s=self.lock_wait_s, ttl_s=300.0):
                # Again under the lock: a release may have changed the routes, the holds or Triton meanwhile.
                from modelops.serving.holds import active_holds

                fresh = read_model_routed(self.store, model)
                if fresh is None:
                    return Outcome(triton.url, model, "skipped", detail="routes document gone")
                routed = fresh
                kept = self._kept(model, time.monotonic()) | active_holds(self.store, model)
                served, config_ok = self._observe(client, specs)
                todo = plan(model, routed, kept, served, config_ok)
                if todo.in_sync:
                    return Outcome(triton.url, model, "in_sync", todo.target)
                self._apply(client, triton, specs, todo, served)
        except ServingError as exc:
            held = "held by" in str(exc)
            log.warning("%s on %s: %s", model, triton.url, exc)
            return Outcome(triton.url, model, "skipped" if held else "error", seconds=time.monotonic() - started,
                           detail=str(exc)[-500:])
        except ModelopsError as exc:
            log.warning("%s on %s: %s", model, triton.url, exc)
            return Outcome(triton.url, model, "error", seconds=time.monotonic() - started, detail=str(exc)[-500:])
        except Exception as exc:  # a bug (an untranslated library error) stops this model only
            log.exception("%s on %s: unexpected error, the other models go on", model, triton.url)
            return Outcome(triton.url, model, "error", seconds=time.monotonic() - started,
                           detail=_unexpected(exc))
        seconds = time.monotonic() - started
        log.info("%s on %s: now serving %s (loaded %s, unloaded %s%s) in %.1f s", model, triton.url,
                 list(todo.target), sorted(todo.load), sorted(todo.unload),
                 ", config reloaded" if todo.reload else "", seconds)
        return Outcome(triton.url, model, "changed", todo.target, tuple(sorted(todo.load)),
                       tuple(sorted(todo.unload)), seconds)

    def _spec(self, model: str, version: int) -> ModelSpec | None:
        key = (model, version)
        if key not in self.specs_read:  # several servers in one tick share the parallel pool: a race reads twice
            self.specs_read[key] = read_spec(self.store, model, version)
        return self.specs_read[key]

    def _one_spec(self, client: TritonClient, triton: TritonTarget, spec: ModelSpec, routed: frozenset[int],
                  kept: frozenset[int], started: float) -> Outcome:
        """As the pipeline's path: look without the lock; only a change takes it and looks again under it."""
        from modelops.serving.holds import active_holds
        from modelops.serving.index_store import model_lock

        model = spec.name
        todo = spec_plan(client, spec, self.server_backend, routed, kept, self.server_gpus)
        if todo.in_sync:
            return Outcome(triton.url, model, "in_sync", todo.target)
        with model_lock(self.store, model, owner=f"reconcile {model} on {triton.url}", wait_s=self.lock_wait_s,
                        ttl_s=300.0):
            fresh = read_model_routed(self.store, model)
            if fresh is None:
                return Outcome(triton.url, model, "skipped", detail="routes document gone")
            kept = self._kept(model, time.monotonic()) | active_holds(self.store, model)
            todo = spec_plan(client, spec, self.server_backend, fresh, kept, self.server_gpus)
            step = spec_step(client, self.store, triton.repository, spec, todo)
        if not step.changed:
            return Outcome(triton.url, model, "in_sync", step.target)
        log.info("%s on %s: now serving %s (loaded %s, unloaded %s) from its spec", model, triton.url,
                 list(step.target), list(step.loaded), list(step.unloaded))
        return Outcome(triton.url, model, "changed", step.target, step.loaded, step.unloaded,
                       time.monotonic() - started)

    def _apply(self, client: TritonClient, triton: TritonTarget, specs: Mapping[Role, ModelConfigSpec],
               todo: Plan, served: Mapping[Role, Sequence[int]]) -> None:
        from modelops.serving import loader
        from modelops.serving.repository import mirror_release

        if triton.repository is not None:
            for version in sorted(todo.load):
                mirror_release(self.store, todo.model, version, triton.repository)
        if todo.load or todo.reload:
            # First serve the routed versions beside what fully serves now (no routed version stops) ...
            everywhere = set.intersection(*(set(served.get(role, ())) for role in ROLES))
            loader.serve_exactly(client, specs, sorted(set(todo.target) | everywhere))
        if todo.unload or not todo.target:
            # ... then drop the versions nobody routes (pipeline first).
            loader.serve_exactly(client, specs, list(todo.target))


def _counts_as(expected: Mapping[str, Any], reported: Mapping[str, Any]) -> list[Any]:
    """Triton's instance groups with the rendered counts (same number of groups; else as reported)."""
    groups = list(reported.get("instance_group") or [])
    want = list(expected.get("instance_group") or [])
    if len(groups) != len(want):
        return groups
    return [{**got, "count": w.get("count")} for got, w in zip(groups, want, strict=True)]


def _unexpected(exc: Exception) -> str:
    """How an error nothing translated is reported: its type, then the end of its message."""
    return f"unexpected {type(exc).__name__}: {str(exc)[-450:]}"


def status_file_of(cfg: Settings) -> Path:
    """Where the reconciler writes its last tick: ``HOME/run/reconciler.status.json``."""
    return cfg.home / "run" / "reconciler.status.json"


def write_status(path: Path, outcomes: Sequence[Outcome], *, error: str = "") -> None:
    """The reconciler's last tick (its health check reads the time; tests read the outcomes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"at": time.time(), "error": error,
                               "outcomes": [o.to_dict() for o in outcomes]}, indent=1))
    tmp.replace(path)


def tick_and_record(reconciler: Reconciler, status_file: Path, *, strict: bool = False) -> list[Outcome]:
    """One tick of the daemon, its status written whatever happened.

    A :class:`ModelopsError` (the object store unreachable, no server resolves) skips the tick and
    leaves Triton as it is. Any other exception outside the per-model passes (which isolate their own)
    is a bug: logged with its traceback, recorded as the status's error, and the next tick tries
    again, unless ``strict`` (``--once``), where it is raised.
    """
    try:
        outcomes = reconciler.tick()
    except ModelopsError as exc:
        log.warning("tick skipped: %s", exc)
        write_status(status_file, [], error=str(exc)[-500:])
        return []
    except Exception as exc:
        if strict:
            raise
        log.exception("tick failed: unexpected error, the next tick tries again")
        write_status(status_file, [], error=_unexpected(exc))
        return []
    write_status(status_file, outcomes)
    return outcomes


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
