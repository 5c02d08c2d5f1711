"""Releases that start by themselves: a version moved to Staging, or given the alias ``challenger``.

Two paths reach the same decision:

- **MLflow's webhook** (``model_version_alias.created``, received by
  :mod:`modelops.release.webhook_app`) starts the release of the version within seconds;
- **the one-minute poll** (``release_on_staging``, :func:`versions_to_release`) starts what the
  webhook missed (a lost delivery, webhooks switched off) and keeps the Staging behaviour.

Both claim the version (an MLflow tag, :meth:`MlflowRegistry.claim_release`) with the same
deterministic claim id, which is also the Airflow run id of the release: two deliveries of
one event, or a delivery and a poll, claim the same id, and Airflow refuses a second run with
that id. One version is released once, whoever sees it first.

The registry and Airflow are ports (:class:`Registry`, :class:`Releases`), so the decisions are
tested without servers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from modelops.names import model_name_problem
from modelops.registry.lifecycle import CHALLENGER, TAG
from modelops.registry.mlflow_registry import VersionInfo

log = logging.getLogger(__name__)

RELEASE_DAG = "model_release"
WEBHOOK_STARTER = "mlflow-webhook"
WATCHER_STARTER = "alias-watcher"
STAGING_STARTER = "staging-watcher"
RELEASE_OPTION_TAG = "modelops.release."


class Registry(Protocol):
    """What the start of a release needs of the MLflow registry (:class:`MlflowRegistry` is one)."""

    def by_alias(self, name: str, alias: str) -> VersionInfo | None: ...

    def model_tags(self, name: str) -> dict[str, str]: ...

    def claim_release(self, name: str, version: str | int, *, released_by: str, release_run_id: str) -> bool: ...


class Releases(Protocol):
    """``model_release`` runs in Airflow."""

    def start(self, run_id: str, conf: Mapping[str, Any]) -> bool:
        """Trigger a run with this id; False when a run with this id exists already."""
        ...


@dataclass(frozen=True)
class AliasStart:
    """What one look at a model's ``challenger`` did."""

    outcome: str  # started | already_started | skipped
    model: str
    version: str
    run_id: str = ""
    detail: str = ""


def alias_run_id(model: str, version: str | int, created_ms: int) -> str:
    """The claim id and Airflow run id of the release of ``model``/``version`` started by its alias.

    The version's creation time keeps a re-created model's version 1 apart from the old one's.
    Model names have no ``-`` (:mod:`modelops.names`), so the id is unambiguous.
    """
    return f"{CHALLENGER}-{model}-v{version}-{created_ms}"


def skip_reason(info: VersionInfo, run_id: str) -> str:
    """Why the alias holder ``info`` is not released under ``run_id`` ("" when it is)."""
    if TAG["contract_passed"] in info.tags:
        # The contract gate ran on it: a release (or a script through MlflowRegistry.to_staging)
        # staged it and set the alias itself, it was not a person's choice.
        return "staged by the platform (it carries the contract gate's result)"
    claim = info.tags.get(TAG["release_run_id"])
    if claim and claim != run_id:
        return f"already claimed by release {claim}"
    return ""


def release_conf(info: VersionInfo, options: Mapping[str, Any], *, started_by: str, run_id: str) -> dict[str, Any]:
    """The ``model_release`` params of an alias-started release (the model's tag options first)."""
    return {**options, "model": info.name, "version": info.version, "started_by": started_by, "claim_id": run_id}


def start_alias_release(registry: Registry, releases: Releases, model: str, version: str,
                        *, started_by: str = WEBHOOK_STARTER) -> AliasStart:
    """Release ``model``/``version`` because ``challenger`` was set on it (a webhook delivery).

    Idempotent: a second call for the same version claims the same id and finds its run.
    Nothing happens when the alias has moved on since (the poll releases the new holder), when
    the platform staged the version itself, or when another release claimed it.
    """
    holder = registry.by_alias(model, CHALLENGER)
    if holder is None or holder.version != str(version):
        now = "is not set" if holder is None else f"points at version {holder.version}"
        return AliasStart("skipped", model, str(version), detail=f"alias {CHALLENGER} {now} by now")
    run_id = alias_run_id(model, holder.version, holder.created_ms)
    reason = skip_reason(holder, run_id)
    if reason:
        return AliasStart("skipped", model, holder.version, run_id, reason)
    options = release_options(registry.model_tags(model))  # read before claiming (see staging_versions_to_release)
    if not registry.claim_release(model, holder.version, released_by=started_by, release_run_id=run_id):
        return AliasStart("skipped", model, holder.version, run_id, "another release claimed it first")
    started = releases.start(run_id, release_conf(holder, options, started_by=started_by, run_id=run_id))
    return AliasStart("started" if started else "already_started", model, holder.version, run_id)


def challenger_versions_to_release(registry: Registry, names: list[str],
                                   run_exists: Callable[[str], bool]) -> list[dict[str, Any]]:
    """``challenger`` holders no release has started, each claimed now: ``{"conf", "trigger_run_id"}``.

    A holder already claimed under its alias run id whose run does not exist (the webhook
    claimed it, then could not reach Airflow) is triggered again under the same id.
    """
    starts = []
    for name in names:
        holder = registry.by_alias(name, CHALLENGER)
        if holder is None:
            continue
        run_id = alias_run_id(name, holder.version, holder.created_ms)
        if skip_reason(holder, run_id) or (holder.tags.get(TAG["release_run_id"]) == run_id and run_exists(run_id)):
            continue
        options = release_options(registry.model_tags(name))
        if registry.claim_release(name, holder.version, released_by=WATCHER_STARTER, release_run_id=run_id):
            conf = release_conf(holder, options, started_by=WATCHER_STARTER, run_id=run_id)
            starts.append({"conf": conf, "trigger_run_id": run_id})
    return starts


def staging_versions_to_release(models: list[str] | None = None) -> list[dict[str, str]]:
    """Staging versions that no release run has claimed yet, each claimed now for one release.

    The claim id is deterministic per version, so two watcher runs racing on the same version
    produce the same claim and ``model_release``'s resolve step accepts exactly one run.
    A version that carries the contract gate's result was staged by the platform itself (the
    gate runs inside a release, or a script staged it through :class:`MlflowRegistry`), not
    moved there by a person: it is left alone.
    """
    from modelops.registry.mlflow_registry import MlflowRegistry

    registry = MlflowRegistry.from_settings()
    names = models or registry.model_names()
    confs = []
    for name in names:
        unclaimed = [info for info in registry.versions(name, stage="Staging")
                     if not info.tags.get(TAG["release_run_id"]) and TAG["contract_passed"] not in info.tags]
        if not unclaimed:
            continue
        # Read before claiming: a registry error after a claim would leave the version claimed by a
        # release that never starts (later watcher runs skip claimed versions).
        options = release_options(registry.model_tags(name))
        for info in unclaimed:
            claim_id = f"staging-watch:{name}:{info.version}"
            if registry.claim_release(name, info.version, released_by=STAGING_STARTER, release_run_id=claim_id):
                confs.append({**options, "model": name, "version": info.version,
                              "started_by": STAGING_STARTER, "claim_id": claim_id})
    return confs


def versions_to_release(run_exists: Callable[[str], bool], models: list[str] | None = None) -> list[dict[str, Any]]:
    """The watcher's minute: ``TriggerDagRunOperator`` kwargs for Staging versions and ``challenger`` holders.

    Staging releases get an Airflow-generated run id (``trigger_run_id`` None), alias releases
    their deterministic one (a run that exists already is skipped by the operator).
    """
    from modelops.registry.mlflow_registry import MlflowRegistry

    registry = MlflowRegistry.from_settings()
    names = []
    for name in models or registry.model_names():
        problem = model_name_problem(name, "registered model")
        if problem:  # model_release would refuse it at every tick: say so once a minute, release nothing
            log.warning("not releasing %s: %s", name, problem)
        else:
            names.append(name)
    staged = [{"conf": conf, "trigger_run_id": None} for conf in staging_versions_to_release(names)] if names else []
    return staged + challenger_versions_to_release(registry, names, run_exists)


def release_options(model_tags: Mapping[str, str]) -> dict[str, Any]:
    """``model_release`` params a registered model carries as tags, for releases that start by themselves.

    A tag ``modelops.release.<param>`` on the registered model (e.g. ``modelops.release.canary_steps``
    = ``25,50,100``, ``modelops.release.analysis_interval_s`` = ``30``) sizes the canary to that
    model's traffic; numbers and true/false become JSON numbers and booleans.
    """
    options: dict[str, Any] = {}
    for key, raw in model_tags.items():
        if not key.startswith(RELEASE_OPTION_TAG) or not key[len(RELEASE_OPTION_TAG):]:
            continue
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        elif re.fullmatch(r"-?[0-9]+", raw):
            value = int(raw)
        elif re.fullmatch(r"-?[0-9]*\.[0-9]+", raw):
            value = float(raw)
        options[key[len(RELEASE_OPTION_TAG):]] = value
    return options
