"""MLflow 3 model-registry adapter: register, stages + aliases, lineage tags, release claims.

The stage API is deprecated in MLflow (FutureWarning) but still the UI's model of a
release; aliases (``challenger``, ``champion``) are kept in step with it. MLflow's
``search_model_versions`` returns empty ``aliases``, so aliases are read with
``get_model_version``. Every MLflow or connection error becomes
:class:`~modelops.errors.RegistryError` naming the server and the call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from modelops.config import Settings, settings
from modelops.errors import RegistryError
from modelops.names import check_model_name
from modelops.registry.lifecycle import (
    CHALLENGER,
    CHAMPION,
    TAG,
    Lineage,
    Stage,
    alias_for,
    check_transition,
    lineage_tags,
    parse_run_uri,
)

T = TypeVar("T")


@dataclass(frozen=True)
class VersionInfo:
    """What the platform needs of a registered model version."""

    name: str
    version: str
    stage: str
    run_id: str
    source: str
    aliases: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0  # MLflow's creation_timestamp: tells a version from one of a re-created model

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


@dataclass(frozen=True)
class MlflowRegistry:
    """The registry of one MLflow tracking server."""

    tracking_uri: str

    @classmethod
    def from_settings(cls, cfg: Settings | None = None) -> MlflowRegistry:
        return cls((cfg or settings()).mlflow_uri)

    @cached_property
    def client(self) -> Any:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        from mlflow.exceptions import MlflowException

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # the stage API is deprecated, still used
                yield
        except MlflowException as exc:
            raise RegistryError(f"MLflow at {self.tracking_uri}: {action}: {exc.message}") from exc
        except OSError as exc:
            raise RegistryError(f"MLflow at {self.tracking_uri} unreachable during {action}: {exc}") from exc

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        with self._errors(action):
            return fn()

    # -- reading ------------------------------------------------------------------------------
    def get(self, name: str, version: str | int) -> VersionInfo:
        """One version, with its aliases and tags."""
        mv = self._call(f"get version {name}/{version}",
                        lambda: self.client.get_model_version(name, str(version)))
        return _info(mv)

    def by_alias(self, name: str, alias: str) -> VersionInfo | None:
        """The version ``alias`` points at, or None when the alias is not set."""
        from mlflow.exceptions import MlflowException

        try:
            mv = self.client.get_model_version_by_alias(name, alias)
        except MlflowException as exc:
            if "alias" in str(exc.message).lower() and ("not found" in str(exc.message).lower()
                                                        or exc.error_code == "RESOURCE_DOES_NOT_EXIST"):
                return None
            raise RegistryError(
                f"MLflow at {self.tracking_uri}: alias {name}@{alias}: {exc.message}"
            ) from exc
        except OSError as exc:
            raise RegistryError(f"MLflow at {self.tracking_uri} unreachable: {exc}") from exc
        return self.get(name, mv.version)

    def versions(self, name: str, *, stage: str | None = None) -> list[VersionInfo]:
        """Every version of ``name`` (optionally in one stage), ascending; aliases filled in."""
        found = self._call(f"search versions of {name}",
                           lambda: self.client.search_model_versions(f"name='{name}'"))
        rows = sorted(found, key=lambda mv: int(mv.version))
        return [self.get(name, mv.version) for mv in rows if stage is None or mv.current_stage == stage]

    # -- registering ----------------------------------------------------------------------------
    def register(self, run_uri: str, name: str, *, tags: Mapping[str, str] | None = None) -> VersionInfo:
        """Register ``runs:/<run_id>/<path>`` as a new version of ``name`` (created when missing)."""
        from mlflow.exceptions import MlflowException

        check_model_name(name, "name")  # the registered name becomes a Triton folder and object-store keys
        parsed = parse_run_uri(run_uri)
        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise RegistryError(f"MLflow at {self.tracking_uri}: create {name}: {exc.message}") from exc
        except OSError as exc:
            raise RegistryError(f"MLflow at {self.tracking_uri} unreachable: {exc}") from exc
        mv = self._call(
            f"register {run_uri} as {name}",
            lambda: self.client.create_model_version(name, str(parsed), run_id=parsed.run_id,
                                                     tags=dict(tags or {})),
        )
        return _info(mv)

    def download(self, run_id: str, artifact_path: str, dst: Path) -> Path:
        """Download a run's artifact folder/file into ``dst``; returns the local path."""
        import mlflow.artifacts

        local = self._call(
            f"download runs:/{run_id}/{artifact_path}",
            lambda: mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_path,
                                                        dst_path=str(dst), tracking_uri=self.tracking_uri),
        )
        return Path(local)

    def has_artifact(self, run_id: str, artifact_path: str) -> bool:
        """Whether the run logged ``artifact_path`` (a file, or a folder holding anything)."""
        parent, _, leaf = artifact_path.rstrip("/").rpartition("/")
        found = self._call(f"list runs:/{run_id}/{parent}",
                           lambda: self.client.list_artifacts(run_id, parent or None))
        return any(item.path.rstrip("/").rpartition("/")[2] == leaf for item in found)

    def download_model(self, name: str, version: str | int, dst: Path) -> Path:
        """Download the MLflow model ``models:/<name>/<version>`` (its ``MLmodel`` folder) into ``dst``."""
        import mlflow.artifacts
        from mlflow.tracking._tracking_service.utils import _use_tracking_uri

        # MLflow resolves a models:/ URI with a client of the *default* registry, whatever tracking_uri
        # says (ModelsArtifactRepository._get_model_uri_infos): in an Airflow task, where nothing set
        # one, that is a new sqlite mlflow.db in the working directory (three releases at once then
        # raced creating its tables). MLflow's own context manager points the default at this server.
        with _use_tracking_uri(self.tracking_uri):
            local = self._call(
                f"download models:/{name}/{version}",
                lambda: mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}",
                                                            dst_path=str(dst), tracking_uri=self.tracking_uri),
            )
        return Path(local)

    def model_names(self) -> list[str]:
        """Every registered model's name, sorted."""
        found = self._call("list registered models", lambda: self.client.search_registered_models(max_results=1000))
        return sorted(m.name for m in found)

    def model_tags(self, name: str) -> dict[str, str]:
        """The registered model's own tags (not a version's)."""
        found = self._call(f"get registered model {name}", lambda: self.client.get_registered_model(name))
        return dict(found.tags or {})

    def log_artifacts(self, run_id: str, folder: Path, artifact_path: str) -> None:
        """Upload a local folder into ``runs:/<run_id>/<artifact_path>``."""
        self._call(f"store artifacts in runs:/{run_id}/{artifact_path}",
                   lambda: self.client.log_artifacts(run_id, str(folder), artifact_path))

    def log_metric(self, run_id: str, key: str, value: float, *, step: int) -> None:
        self._call(f"log metric {key} on run {run_id}", lambda: self.client.log_metric(run_id, key, value, step=step))

    def run_tags(self, run_id: str) -> dict[str, str]:
        run = self._call(f"get run {run_id}", lambda: self.client.get_run(run_id))
        return dict(run.data.tags)

    # -- tags ------------------------------------------------------------------------------------
    def set_tags(self, name: str, version: str | int, tags: Mapping[str, str]) -> None:
        with self._errors(f"tag {name}/{version}"):
            for key, value in tags.items():
                self.client.set_model_version_tag(name, str(version), key, value)

    def describe(self, name: str, version: str | int, text: str) -> None:
        """Replace the version's description (Markdown, shown on the MLflow registry page)."""
        self._call(f"describe version {name}/{version}",
                   lambda: self.client.update_model_version(name, str(version), description=text))

    def set_lineage(self, name: str, version: str | int, lineage: Lineage) -> None:
        """Write the lineage tags (sha256, Triton version, contract result, data dates)."""
        self.set_tags(name, version, lineage_tags(lineage))

    def claim_release(self, name: str, version: str | int, *, released_by: str, release_run_id: str) -> bool:
        """Mark the version's release as started by ``release_run_id``.

        Returns True when this run holds the claim (new, or already its own), False when
        another run claimed it first — a Staging watcher must not release it again.
        MLflow tags have no compare-and-swap; the claim is re-read after writing so two
        racing claimers see the same winner in all but a sub-second window.
        """
        current = self.get(name, version).tags.get(TAG["release_run_id"])
        if current and current != release_run_id:
            return False
        if current is None:
            self.set_tags(name, version,
                          {TAG["released_by"]: released_by, TAG["release_run_id"]: release_run_id})
        return self.get(name, version).tags.get(TAG["release_run_id"]) == release_run_id

    # -- lifecycle ------------------------------------------------------------------------------
    def _transition(self, name: str, version: str | int, stage: Stage, *,
                    archive_existing: bool = False) -> None:
        current = self.get(name, version).stage
        check_transition(current, stage)
        if current == stage:
            return
        self._call(
            f"stage {name}/{version} -> {stage}",
            lambda: self.client.transition_model_version_stage(
                name, str(version), stage, archive_existing_versions=archive_existing
            ),
        )

    def _alias(self, name: str, alias: str, version: str | int | None) -> None:
        if version is None:
            holder = self.by_alias(name, alias)
            if holder is not None:
                self._call(f"remove alias {name}@{alias}",
                           lambda: self.client.delete_registered_model_alias(name, alias))
            return
        self._call(f"alias {name}@{alias} -> {version}",
                   lambda: self.client.set_registered_model_alias(name, alias, str(version)))

    def to_staging(self, name: str, version: str | int, *, contract_passed: bool,
                   contract_result: str = "") -> VersionInfo:
        """None → Staging with alias ``challenger``, only when the contract gate passed.

        Raises:
            RegistryError: when the gate did not pass (the version stays where it is;
                the contract result is still recorded as tags).
        """
        self.set_lineage(name, version, Lineage(contract_result=contract_result or None,
                                                contract_passed=contract_passed))
        if not contract_passed:
            raise RegistryError(f"{name}/{version}: contract gate failed, not moved to Staging "
                                f"({contract_result or 'no detail'})")
        self._transition(name, version, "Staging")
        self._alias(name, CHALLENGER, version)
        return self.get(name, version)

    def promote(self, name: str, version: str | int) -> VersionInfo:
        """Staging → Production: alias ``champion``; the previous Production version Archived.

        ``challenger`` is removed when it points at this version.
        """
        self._transition(name, version, "Production", archive_existing=True)
        self._alias(name, CHAMPION, version)
        challenger = self.by_alias(name, CHALLENGER)
        if challenger is not None and challenger.version == str(version):
            self._alias(name, CHALLENGER, None)
        self.set_tags(name, version, {TAG["promoted_at"]: _now()})
        return self.get(name, version)

    def restage(self, name: str, version: str | int) -> VersionInfo:
        """Archived → Staging again, alias ``challenger``: an operator re-runs the release of a rolled-back version.

        Only a version whose contract gate passed (its ``modelops.contract_passed`` tag) comes back;
        its rollback tags stay, as its history. A version already in Staging is left as it is.

        Raises:
            RegistryError: the contract gate never passed for it, or the stage cannot change.
        """
        info = self.get(name, version)
        if info.stage != "Staging":
            if info.tags.get(TAG["contract_passed"]) != "true":
                raise RegistryError(f"{name}/{version}: its contract gate has not passed, not moved back to "
                                    f"Staging (stage {info.stage}); release it afresh")
            self._transition(name, version, "Staging")
        self._alias(name, CHALLENGER, version)
        return self.get(name, version)

    def mark_rollback(self, name: str, version: str | int, *, reason: str) -> VersionInfo:
        """A rolled-back canary: Archived, reason tags, ``challenger`` removed if it pointed here.

        The champion (stable) is not touched.
        """
        self.set_tags(name, version, {TAG["rollback_reason"]: reason[:5000], TAG["rolled_back_at"]: _now()})
        info = self.get(name, version)
        if info.stage != "Production":
            self._transition(name, version, "Archived")
        for alias in info.aliases:
            if alias == CHALLENGER:
                self._alias(name, CHALLENGER, None)
        return self.get(name, version)

    def stage_alias_consistent(self, name: str) -> list[str]:
        """Problems where aliases and stages disagree (empty when in step)."""
        problems = []
        for info in self.versions(name):
            want = alias_for(info.stage)  # type: ignore[arg-type]
            extra = {CHALLENGER, CHAMPION} & set(info.aliases) - ({want} if want else set())
            if extra:
                problems.append(f"{name}/{info.version} is {info.stage} but carries {sorted(extra)}")
        return problems


def _info(mv: Any) -> VersionInfo:
    return VersionInfo(
        name=str(mv.name), version=str(mv.version), stage=str(mv.current_stage or "None"),
        run_id=str(mv.run_id or ""), source=str(mv.source or ""),
        aliases=tuple(getattr(mv, "aliases", None) or ()), tags=dict(mv.tags or {}),
        created_ms=int(getattr(mv, "creation_timestamp", None) or 0),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
