"""The MLflow model version's description: a Markdown page a person reads on the registry page.

The ``modelops.*`` tags stay for machines; the description says the same for people: what
serves, the latest release and its outcome, the lineage, the latest nightly drift verdict
and CTR / CVR by day. :func:`markdown` is pure; :func:`refresh` rebuilds it from the
current facts (registry tags, the model's release index, the latest drift report) and is
called by every step that changes one of them (release end, feedback_join, nightly_drift),
so it is kept current and never appended to.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from modelops.canary.record import ReleaseRecord

_log = logging.getLogger(__name__)
MARKER = "<!-- modelops: generated, replaced on every release and nightly job -->"
MAX_DAYS = 14


def when(epoch: float | None) -> str:
    """``2026-11-30 20:41:07 UTC`` (empty for None)."""
    return "" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.4g}"


def ctr_days(tags: Mapping[str, str]) -> list[tuple[str, float | None, float | None, str]]:
    """(day, CTR, CVR, impressions) from the ``modelops.ctr.<day>`` tags the feedback job writes."""
    def value(key: str) -> float | None:
        raw = tags.get(key)
        try:
            return None if raw in (None, "null") else float(raw)  # type: ignore[arg-type]
        except ValueError:
            return None

    days = sorted(k[len("modelops.ctr."):] for k in tags if k.startswith("modelops.ctr."))
    return [(d, value(f"modelops.ctr.{d}"), value(f"modelops.cvr.{d}"), tags.get(f"modelops.impressions.{d}", ""))
            for d in days]


def markdown(model: str, version: str, tags: Mapping[str, str], releases: Sequence[ReleaseRecord],
             drift: Mapping[str, str], cockpit_url: str = "") -> str:
    """The description of one MLflow version (Markdown)."""
    triton = tags.get("modelops.triton_version", "")
    contract = tags.get("modelops.contract_result") or tags.get("modelops.contract_passed", "not checked")
    lines = [MARKER, f"### {model} version {version}", ""]
    ours = [r for r in releases if r.mlflow_version == version]
    if ours:
        r = ours[0]
        outcome = r.phase if r.ended_at is not None else f"running ({r.phase} at {r.weight:.0%})"
        stable = f"stable v{r.stable_version}" if r.stable_version else "no stable version (first release)"
        lines.append(f"**Latest release:** {outcome} — Triton v{r.canary_version} against {stable}, "
                     f"started {when(r.started_at)} by {r.started_by}"
                     + (f"; {r.reason}" if r.reason else "")
                     + (f"; MTTR {seconds(r.mttr_s)}" if r.mttr_s is not None else "") + ".")
        if len(ours) > 1:
            lines.append(f"Earlier releases of this version: {len(ours) - 1}.")
    else:
        lines.append("**Not released yet.**")
    lines += ["", "| lineage | |", "|---|---|",
              f"| Triton version | {triton or 'not published'} |",
              f"| sha256 | `{tags.get('modelops.sha256', 'n/a')}` |",
              f"| training data | {tags.get('modelops.data_start', '?')} … {tags.get('modelops.data_end', '?')} |",
              f"| contract gate | {contract} |",
              f"| repository | `{tags.get('modelops.triton_repository', 'n/a')}` |", ""]
    lines.append(f"**Nightly drift:** {drift.get('verdict', 'no run yet')}"
                 + (f" — report `{drift['report']}`" if drift.get("report") else ""))
    days = ctr_days(tags)[-MAX_DAYS:]
    if days:
        lines += ["", "| day | CTR | CVR | impressions |", "|---|---|---|---|"]
        lines += [f"| {d} | {number(c)} | {number(v)} | {n} |" for d, c, v, n in days]
    if cockpit_url:
        lines += ["", f"[Lineage and releases in the Airflow cockpit]({cockpit_url})"]
    return "\n".join(lines) + "\n"


def refresh(model: str, version: str, store: Any = None, registry: Any = None) -> str:
    """Rebuild and write the version's description from the current facts; returns it."""
    from modelops.canary import record_store
    from modelops.config import settings
    from modelops.objectstore import ObjectStore
    from modelops.registry.mlflow_registry import MlflowRegistry

    cfg = settings()
    store = store or ObjectStore.from_settings(cfg)
    registry = registry or MlflowRegistry.from_settings(cfg)
    info = registry.get(model, version)
    triton = info.tags.get("modelops.triton_version", "")
    drift = record_store.latest_drift(store, model, triton) if triton else {}
    url = f"{cfg.airflow_api_url}/modelops/lineage/{model}/{version}"
    text = markdown(model, version, info.tags, record_store.model_releases(store, model), drift, url)
    registry.describe(model, version, text)
    return text


def refresh_quietly(model: str, version: str, log: Any = None, **kwargs: Any) -> None:
    """:func:`refresh`, logging instead of failing (the description is a courtesy to readers)."""
    try:
        refresh(model, version, **kwargs)
    except Exception as exc:
        (log or _log).warning("could not update the MLflow description of %s/%s: %s", model, version, exc)
