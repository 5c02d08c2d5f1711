"""The shadow phase in the release DAG: its stage of the canary operator and what the stages share.

``model_release`` runs the release in three deferrable stages of
:class:`~modelops.canary.operator.CanaryOperator`: ``shadow`` (the shadow phase; skipped when the
spec asks for none, or for a first release), ``canary_to_approval`` (the steps, up to the approval of
the 100 % step) and ``canary_finish``. Each approval is the standard provider's, asked only when the
release waits for it (:class:`~modelops.canary.approval.ReleaseApproval`): ``approve_shadow`` after
the shadow stage (a candidate that answers differently, with ``shadow_approval``), and
``approve_full_rollout`` before the last stage.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

from modelops.canary.measurement import Measurement
from modelops.canary.spec import CanarySpec
from modelops.canary.status import CanaryStatus, Phase

log = logging.getLogger(__name__)

SHADOW_TASK = "shadow"
SHADOW_APPROVAL_TASK = "approve_shadow"
PREVIOUS_STAGE = {"to_approval": SHADOW_TASK, "finish": "canary_to_approval"}
"""The task of the stage before each stage: a release that already ended there ends here too."""


def in_shadow(status: CanaryStatus) -> bool:
    """The release is in its shadow phase (paused there included)."""
    return status.phase is Phase.SHADOW or (status.phase is Phase.PAUSED and status.paused_from is Phase.SHADOW)


def skip_shadow(spec: CanarySpec, wiring: Any) -> None:
    """Skip the shadow stage (the next stage goes on) when there is no shadow phase to run."""
    from airflow.sdk.exceptions import AirflowSkipException

    if not spec.shadow:
        raise AirflowSkipException("no shadow phase (shadow=false): the canary steps start at once")
    if wiring.runner is None:
        raise AirflowSkipException("nothing to mirror to (a first release, or the version already serves)")


def with_shadow(source: Any, m: Measurement, model: str, candidate_version: int, opened: Mapping[str, Any],
                closed: Mapping[str, Any]) -> Measurement:
    """The measurement with the candidate's mirrored answers over the same window."""
    from modelops.canary.shadow_source import measure_shadow

    return dataclasses.replace(m, shadow=measure_shadow(source, model, candidate_version, opened, closed))


def model_overrides(published: Mapping[str, Any]) -> dict[str, Any]:
    """The canary spec fields the published version's model spec declares (``canary:`` in ``modelops.yaml``),
    with the gates its outcomes allow (:func:`~modelops.canary.params.with_model_gates`)."""
    try:
        return dict(_overrides(str(published["model"]), int(published["triton_version"])))
    except (KeyError, TypeError, ValueError):
        return {}


@functools.lru_cache(maxsize=64)
def _overrides(model: str, triton_version: int) -> tuple[tuple[str, Any], ...]:
    try:
        from modelops.objectstore import ObjectStore
        from modelops.serving.spec_reconcile import read_spec

        spec = read_spec(ObjectStore.from_settings(), model, triton_version)
    except Exception as exc:  # the release goes on with its params; the spec's overrides are a refinement
        log.warning("model spec of %s v%d unreadable, no canary overrides from it: %s", model, triton_version, exc)
        return ()
    if spec is None:
        return ()
    from modelops.canary.params import with_model_gates

    canary = spec.canary if isinstance(spec.canary, dict) else {}
    merged = with_model_gates(canary, spec.outcomes.accepted_actions())
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in merged.items()))
