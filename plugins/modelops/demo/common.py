"""What every story of ``modelops demo`` uses: steps, the stack, following a run, a release's outcome."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from modelops.config import Settings


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Settings], str]


DEMO_CANARY: dict[str, object] = {"canary_steps": "25,50,100", "analysis_interval_s": 5, "min_requests": 20,
                                  "stable_grace_s": 5}
"""The demo's canary: sized for its generated traffic (40 req/s); the defaults (1 % first, 60 s windows) suit
busier models."""


def stack_up(cfg: Settings) -> str:
    from modelops.stack import launcher

    states = launcher.up(cfg, progress=lambda line: print(line, flush=True))
    print(launcher.format_table(states))
    return f"{len(states)} services healthy"


def urls(cfg: Settings) -> str:
    from modelops.credentials import airflow_password
    from modelops.observability.prometheus import active

    print(f"    Airflow UI  {cfg.airflow_api_url}  (user {cfg.airflow_user}, password {airflow_password(cfg)})")
    print(f"    Releases    {cfg.airflow_api_url}/modelops/releases  (the release cockpit; Airflow nav: Browse)")
    print(f"    MLflow UI   {cfg.mlflow_uri}")
    print(f"    Triton      {cfg.triton_http_url}")
    print(f"    Gateway     {cfg.gateway_url}  (API: {cfg.gateway_url}/openapi.json)")
    print(f"    S3 store    {cfg.s3_endpoint}  (buckets {cfg.bucket}, {cfg.mlflow_bucket})")
    if active(cfg):
        print(f"    Prometheus  http://{cfg.bind_host}:{cfg.prometheus_port}  (rules and alerts: /rules, /alerts; "
              "the dashboards' queries: grafana/dashboards/*.json)")
        print(f"    Alertmanager http://{cfg.bind_host}:{cfg.alertmanager_port}  "
              "(alerts to MODELOPS_NOTIFY_URLS through the relay)")
    return "URLs printed"


def run_url(base: str, dag_id: str, run_id: str) -> str:
    return f"{base}/dags/{dag_id}/runs/{run_id}"


def follow(dag_id: str, conf: dict[str, object]) -> str:
    """Trigger ``dag_id`` and wait for it; returns the run id, or raises naming the failed tasks."""
    from modelops.airflow_client import AirflowError, client_from_settings

    client = client_from_settings()
    run_id = client.trigger(dag_id, conf)
    print(f"    triggered {dag_id} run {run_id} (watch it at {run_url(client.base_url, dag_id, run_id)})")
    state = client.wait(dag_id, run_id, timeout_s=900,
                        on_change=lambda s: print(f"    {dag_id}: {s}", flush=True))
    if state != "success":
        failed = [t["task_id"] for t in client.task_instances(dag_id, run_id) if t["state"] == "failed"]
        raise AirflowError(f"{dag_id} run {run_id} ended {state} (failed tasks: {', '.join(failed) or '-'}); "
                           f"see `modelops stack logs airflow-scheduler` and the task logs in the UI")
    return run_id


def run_note(client: Any, run_id: str) -> str:
    return str(client.request("GET", f"/api/v2/dags/model_release/dagRuns/{run_id}").get("note") or "")


def wait_release(client: Any, model: str, run_id: str) -> str:
    """The release's end, or an error at once when it paused and waits for a person (never 15 minutes)."""
    from modelops.airflow_client import AirflowError
    from modelops.release.follow import PAUSED
    from modelops.release.follow import wait_release as wait

    state = wait(client, model, run_id, timeout_s=900,
                 on_change=lambda s: print(f"    model_release: {s}", flush=True),
                 on_pause=lambda note: print("    " + note.replace("\n", "\n    "), flush=True))
    if state == PAUSED:
        raise AirflowError(f"the release of {model} (run {run_id}) paused and waits for a person (see above); "
                           "resume it (`modelops release resume`) or abort it (`modelops release abort`), "
                           "then run the demo again")
    return state


def canary_under_traffic(client: Any, model: str, conf: dict[str, object], traffic: Any) -> str:
    """Release ``conf`` as a canary against what serves now while ``traffic`` runs; the run id, or an error
    naming the run's note when the release did not succeed (a second ``make demo`` on the stack the first
    one left up releases this way)."""
    from modelops.airflow_client import AirflowError

    with traffic:
        run_id = client.trigger("model_release", conf)
        state = wait_release(client, model, run_id)
    if state != "success":
        raise AirflowError(f"the release of {model} version {conf['version']} ended {state}: "
                           f"{run_note(client, run_id)}")
    return str(run_id)


def recorded_outcome(client: Any, model: str, run_id: str, state: str) -> str:
    """The release's outcome from its recorded phase (the release record the canary task wrote), not the run state.

    A run can succeed while its release paused or was aborted, and fail after a promotion;
    the release record in the object store says what happened to the version.
    """
    from modelops.airflow_client import AirflowError
    from modelops.canary.record import ReleaseRecord, record_key
    from modelops.objectstore import ObjectStore

    try:
        canary_version = int(client.xcom("model_release", run_id, "publish")["triton_version"])
    except (AirflowError, KeyError, TypeError, ValueError):
        return f"unknown (nothing published; the run ended {state})"
    store, key = ObjectStore.from_settings(), record_key(model, canary_version)
    if not store.exists(key):
        return f"unknown (no release record; the run ended {state})"
    record = ReleaseRecord.from_dict(json.loads(store.get_bytes(key)))
    return {"rolled_back": "rolled back"}.get(record.phase, record.phase.replace("_", " "))


def expect_outcome(client: Any, model: str, run_id: str, state: str, what: str, expect: str) -> str:
    """Print the release's timeline; raise when its recorded outcome is not ``expect``."""
    from modelops.airflow_client import AirflowError

    note = run_note(client, run_id)
    print("    timeline: " + note.replace("\n", "\n              "))
    outcome = recorded_outcome(client, model, run_id, state)
    if outcome != expect:
        raise AirflowError(f"expected {what} to be {expect}, it was {outcome}: {note}")
    return outcome
