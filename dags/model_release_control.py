"""model_release_control: abort, pause or resume a running canary release.

Trigger it from the Airflow UI with the form (model, canary version, action) or with
``modelops release abort|pause|resume --model M --version N``. It writes a control request
beside the release's checkpoint (``canary/<model>/v<N>.control.json`` in the object store);
the release's canary task applies it at its next analysis window: abort rolls back at
once, pause holds the weight (no analysis, no promotion), resume goes on. A release waiting
for approval runs no window: an abort then answers its open approval with Reject, and the
rejection applies the abort (by whoever asked, with their reason).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from modelops.names import MODEL_NAME_PATTERN

PARAMS = {
    "model": Param("recommender", type="string", pattern=MODEL_NAME_PATTERN,
                   description=f"Registered model name ({MODEL_NAME_PATTERN})."),
    "version": Param(1, type="integer", minimum=1,
                     description="The canary's Triton version (modelops release start prints it)."),
    "action": Param("abort", type="string", enum=["abort", "pause", "resume"],
                    description="abort: roll back now; pause: hold the weight; resume: go on."),
    "reason": Param("", type="string", description="Why (recorded in the status and the notification)."),
    "requested_by": Param("airflow-ui", type="string", description="Who asks."),
}


@dag(
    dag_id="model_release_control",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["modelops", "release"],
    doc_md=__doc__,
)
def model_release_control() -> None:
    @task
    def request_control() -> dict[str, Any]:
        from modelops.airflow_client import client_from_settings
        from modelops.canary.adapters import ObjectStoreStatusStore, checkpoint_key
        from modelops.canary.approval import reject_open_approval
        from modelops.canary.control import write_control
        from modelops.canary.record_store import load_record
        from modelops.canary.status import Phase
        from modelops.errors import ConfigError
        from modelops.objectstore import ObjectStore

        params: dict[str, Any] = get_current_context()["params"]
        model, version = str(params["model"]), int(params["version"])
        store = ObjectStore.from_settings()
        saved = ObjectStoreStatusStore(store, checkpoint_key(model, version)).load()
        if saved is None:
            raise ConfigError(f"no canary release of {model} v{version} (nothing at {checkpoint_key(model, version)})")
        if saved.status.phase.terminal:
            raise ConfigError(f"the release of {model} v{version} already ended ({saved.status.phase.value})")
        request = write_control(store, model, version, str(params["action"]), str(params["requested_by"]),
                                str(params["reason"]))
        if request["action"] == "abort" and saved.status.phase is Phase.WAITING_APPROVAL:
            record = load_record(store, model, version)
            if record is not None:
                print(reject_open_approval(client_from_settings().request, record.dag_id, record.run_id))
        return request

    request_control()


model_release_control()
