"""model_release: take an MLflow version to a loaded, verified Triton version (then the canary).

Trigger it from the Airflow UI with the form (model, version number or alias, or a run URI
that is registered first), or let ``release_on_staging`` start it when a version is moved to
Staging in the MLflow UI. Any MLflow model is released: the reference recommender's pipeline, or
any other flavor published from its model spec (``modelops.release.spec_release``). Steps: resolve
candidate → contract gate (GX suite — the recommender's feature suite, or the one rendered from the
model's spec — on the version's evaluation sample; results stored on the MLflow run; failure notifies
and stops) → publish (sha256 → integer Triton version, verified upload, load; a spec model's answers
checked against its framework's own; a refused model fails without retry) → verify served →
``shadow`` (with the ``shadow`` param: users answered by the stable version alone while a share of
their requests is mirrored to the candidate and its answers judged against the stable's; skipped
otherwise) → ``approve_shadow`` (only for a candidate that answers differently, with
``canary_shadow_approval``) → canary (``canary_to_approval``: a deferrable operator; the triggerer
waits out each analysis interval) → ``approve_full_rollout`` (Required Actions in the UI; skipped unless
``require_approval``) → ``canary_finish`` (promotion, or the rest of the release) →
``retire_previous_stable`` (after a promotion, unloads the replaced version once
``stable_grace_s`` has passed; until then routing back to it is instant). The
canary's analysis tables are in the canary tasks' logs; the run's note is the summary.
Abort / pause / resume a running release with the ``model_release_control`` DAG.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from modelops.canary.approval import ReleaseApproval
from modelops.canary.operator import CanaryOperator
from modelops.canary.params import extra_param_names
from modelops.canary.retire import DEFAULT_STABLE_GRACE_S, RetirePreviousStable
from modelops.canary.shadow_stage import SHADOW_APPROVAL_TASK, SHADOW_TASK
from modelops.canary.spec import CanarySpec, describe
from modelops.names import MODEL_NAME_PATTERN

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", tuple: "array"}


def _canary_threshold_params() -> dict[str, Param]:
    """A DAG param per remaining canary spec field (``canary_<field>``), default and doc from the spec."""
    fields = describe()
    params = {}
    for param, name in extra_param_names().items():
        default, doc = fields[name]
        value = list(default) if isinstance(default, tuple) else default
        params[param] = Param(value, type=_JSON_TYPES[type(default)], description=doc)
    return params


_SPEC = CanarySpec()  # the documented defaults
PARAMS = {
    "model": Param("recommender", type="string", pattern=MODEL_NAME_PATTERN,
                   description=f"Registered model name ({MODEL_NAME_PATTERN})."),
    "version": Param("challenger", type="string",
                     description="Version number (e.g. 3) or alias (challenger, champion). Ignored with run_uri."),
    "run_uri": Param("", type="string", description="runs:/<run_id>/<path>: registered first, then released."),
    "started_by": Param("airflow-ui", type="string", description="Who started the release (recorded as a tag)."),
    "claim_id": Param("", type="string", description="Set by release_on_staging; leave empty."),
    # Canary options (read by the canary stage of the release).
    "canary_steps": Param(",".join(f"{w * 100:g}" for w in _SPEC.steps), type="string",
                          description="Canary weights in percent, in order; the last is 100 (promotion)."),
    "analysis_interval_s": Param(int(_SPEC.interval_s), type="integer", minimum=1,
                                 description=describe()["interval_s"][1]),
    "min_requests": Param(_SPEC.min_requests, type="integer", minimum=1, description=describe()["min_requests"][1]),
    "require_approval": Param(_SPEC.require_approval, type="boolean", description=describe()["require_approval"][1]),
    "shadow": Param(_SPEC.shadow, type="boolean", description=describe()["shadow"][1]),
    "shadow_share": Param(_SPEC.shadow_share, type="number", minimum=0.1, maximum=1.0,
                          description=describe()["shadow_share"][1]),
    "stable_grace_s": Param(DEFAULT_STABLE_GRACE_S, type="integer", minimum=0,
                            description="Seconds the previous stable version stays loaded after a promotion "
                                        "(instant rollback), then it is unloaded."),
    **_canary_threshold_params(),
}


@dag(
    dag_id="model_release",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=4,
    params=PARAMS,
    tags=["modelops", "release"],
    doc_md=__doc__,
)
def model_release() -> None:
    @task(retries=2)
    def resolve_candidate() -> dict[str, str]:
        from modelops.airflow_tasks import gate
        from modelops.release.steps import resolve_candidate as resolve

        context = get_current_context()
        params: dict[str, Any] = context["params"]
        return gate(resolve)(params, release_run_id=f"airflow:{context['dag_run'].run_id}").as_dict()

    @task(retries=1)
    def contract_gate(candidate: dict[str, str]) -> dict[str, Any]:
        from modelops.airflow_tasks import gate
        from modelops.release.steps import contract_gate as check_contract

        return gate(check_contract)(candidate)

    @task(retries=2)
    def publish(candidate: dict[str, str], contract: dict[str, Any]) -> dict[str, Any]:
        from modelops.airflow_tasks import gate
        from modelops.release.steps import publish as publish_version

        return gate(publish_version)(candidate)

    @task(retries=2)
    def verify_served(candidate: dict[str, str], published: dict[str, Any]) -> dict[str, Any]:
        from modelops.release.steps import verify

        return verify(candidate, published)

    candidate = resolve_candidate()
    contract = contract_gate(candidate)
    published = publish(candidate, contract)
    verified = verify_served(candidate, published)
    # Retries are safe (the release resumes from its checkpoint) and needed: on a loaded scheduler a
    # short interval can fire before the deferral's exit is processed, and the scheduler then fails the
    # re-queued try ("finished with state success, but ... queued").
    resumable = {"retries": 3, "retry_delay": timedelta(seconds=2)}
    # The shadow phase (skipped without one): users answered by the stable version alone while the candidate
    # answers mirrored requests; a candidate that answers differently may wait for approve_shadow.
    shadow = CanaryOperator(task_id=SHADOW_TASK, candidate=candidate, published=published, stage="shadow",
                            **resumable)
    shadow_approval = ReleaseApproval(
        task_id=SHADOW_APPROVAL_TASK, canary_task_id=SHADOW_TASK, **resumable,
        subject="{{ params.model }} answers differently in shadow: go on to the canary steps?",
        body="No user has seen the candidate yet. In shadow it answered differently from the stable version beyond "
             "its divergence thresholds (the Release tab shows the figures). Approve if the change is intended: the "
             "canary steps start; Reject to roll back.",
    )
    canary = CanaryOperator(task_id="canary_to_approval", candidate=candidate, published=published,
                            stage="to_approval", trigger_rule="none_failed", **resumable)
    # The approval's retries carry an earlier try's answer over (the same scheduler race, when a
    # person answers within a second or two of the asking); see modelops.canary.approval.
    approval = ReleaseApproval(
        task_id="approve_full_rollout", **resumable,
        subject="Promote {{ params.model }} to 100%?",
        body="The canary passed every analysed step and waits at its last weight. Approve to promote "
             "(100%, MLflow Production + champion); Reject to roll back. Analyses: `canary_to_approval` log.",
    )
    done = CanaryOperator(task_id="canary_finish", candidate=candidate, published=published, stage="finish",
                          trigger_rule="none_failed", **resumable)
    retire = RetirePreviousStable(task_id="retire_previous_stable", **resumable)
    verified >> shadow >> shadow_approval >> canary >> approval >> done >> retire


model_release()
