"""``modelops demo``, the reference recommender's story: train, release, canary (promote, roll back), Staging, jobs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from modelops.config import Settings
from modelops.demo.common import DEMO_CANARY, Step, canary_under_traffic, expect_outcome, follow, wait_release

if TYPE_CHECKING:
    from modelops.traffic.runner import BackgroundTraffic


DEMO_MODEL = "recommender"
_STATE: dict[str, object] = {}


def _publish_features(cfg: Settings) -> str:
    from dataclasses import replace

    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables
    from modelops.modelspec.recommender import recommender_features
    from modelops.objectstore import ObjectStore

    features = recommender_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=7))
    snapshot = time.strftime("%Y-%m-%d", time.gmtime())
    published = publish_feature_tables(ObjectStore.from_settings(cfg), snapshot, users, items, features=features)
    return f"snapshot {published.snapshot}: {len(users)} users, {len(items)} items, {len(features)} features"


def _train_and_register(cfg: Settings) -> str:
    from modelops.airflow_client import client_from_settings

    run_id = follow("train_and_register", {"model_name": DEMO_MODEL})
    registered = client_from_settings().xcom("train_and_register", run_id, "register")
    _STATE["version"] = registered["version"]
    return f"MLflow {DEMO_MODEL} version {registered['version']} (run {registered['run_id'][:12]})"


def _release(cfg: Settings) -> str:
    from modelops.airflow_client import client_from_settings
    from modelops.canary.adapters import current_routes
    from modelops.objectstore import ObjectStore

    conf: dict[str, object] = {"model": DEMO_MODEL, "version": str(_STATE["version"])}
    earlier = current_routes(ObjectStore.from_settings(cfg), DEMO_MODEL)
    if earlier is None:
        run_id = follow("model_release", conf)
    else:  # a second `make demo` on the stack the first one left up: a canary against what it left serving
        print(f"    an earlier demo left {DEMO_MODEL} Triton v{earlier.stable.version} serving: this release is a "
              "canary against it, under generated traffic")
        run_id = canary_under_traffic(client_from_settings(), DEMO_MODEL, {**conf, **DEMO_CANARY}, _traffic(cfg))
    published = client_from_settings().xcom("model_release", run_id, "publish")
    _STATE["triton_version"] = published["triton_version"]
    from modelops.registry.mlflow_registry import MlflowRegistry

    info = MlflowRegistry.from_settings().get(DEMO_MODEL, str(_STATE["version"]))
    return (f"Triton {DEMO_MODEL} version {published['triton_version']} (sha256 {published['sha256'][:12]}…), "
            f"MLflow version {info.version} in {info.stage} (aliases: {', '.join(info.aliases) or '-'})")


def _infer(cfg: Settings) -> str:
    from dataclasses import replace

    import requests

    from modelops.documents.feature_tables import FeatureLookup, load_feature_tables
    from modelops.example.synthetic import WorldSpec, generate_requests
    from modelops.objectstore import ObjectStore

    users, items, _snapshot = load_feature_tables(ObjectStore.from_settings(cfg))
    request = generate_requests(replace(WorldSpec(), seed=11, n_requests=1)).iloc[0]
    item_ids = list(request["item_ids"])[:5]
    matrix = FeatureLookup.from_frames(users, items).matrix([request["user_id"]] * len(item_ids), item_ids)
    version = _STATE["triton_version"]
    body = {"inputs": [{"name": "features", "shape": list(matrix.shape), "datatype": "FP32",
                        "data": matrix.ravel().tolist()}]}
    response = requests.post(f"{cfg.triton_http_url}/v2/models/{DEMO_MODEL}/versions/{version}/infer",
                             json=body, timeout=30)
    response.raise_for_status()
    scores = response.json()["outputs"][0]["data"]
    for item, score in zip(item_ids, scores, strict=True):
        print(f"    user {request['user_id']}  item {item}  click probability {score:.4f}")
    return f"{len(scores)} scores from Triton {DEMO_MODEL} v{version}"


def _traffic(cfg: Settings) -> BackgroundTraffic:
    """Simulated users against the stack's gateway for the length of a release."""
    from modelops.traffic.runner import BackgroundTraffic
    from modelops.traffic.simulation import Behaviour, TrafficSpec

    spec = TrafficSpec(model=DEMO_MODEL, rate=40.0, max_requests=1_000_000, max_seconds=900.0, n_users=1000,
                       n_items=1000, items_per_request=(2, 8), id_width=6, default=Behaviour(0.1, 0.2, 0.1),
                       per_version={}, concurrency=16, seed=5)
    return BackgroundTraffic(spec, cfg.gateway_url)


def _canary_release(cfg: Settings, variant: str, expect: str) -> str:
    from modelops.airflow_client import client_from_settings

    client = client_from_settings()
    train_conf: dict[str, object] = {"model_name": DEMO_MODEL, "seed": 8 if variant == "good" else 9,
                                     "variant": variant, "error_rate": 0.3}
    run_id = follow("train_and_register", train_conf)
    version = client.xcom("train_and_register", run_id, "register")["version"]
    print(f"    registered {DEMO_MODEL} version {version} ({variant}); releasing it with a canary under traffic")
    conf = {"model": DEMO_MODEL, "version": str(version), **DEMO_CANARY}
    with _traffic(cfg):
        release = client.trigger("model_release", conf)
        state = wait_release(client, DEMO_MODEL, release)
    outcome = expect_outcome(client, DEMO_MODEL, release, state, f"the {variant} version", expect)
    return f"{DEMO_MODEL} version {version} ({variant}) {outcome}"


def _release_good(cfg: Settings) -> str:
    return _canary_release(cfg, "good", "promoted")


def _release_faulty(cfg: Settings) -> str:
    return _canary_release(cfg, "faulty-errors", "rolled back")


def _release_on_staging(cfg: Settings) -> str:
    """A person's path: a new version moved to Staging in the MLflow UI is released by itself."""
    from mlflow import MlflowClient

    from modelops.airflow_client import AirflowError, client_from_settings

    client = client_from_settings()
    run_id = follow("train_and_register", {"model_name": DEMO_MODEL, "seed": 10, "variant": "good"})
    version = str(client.xcom("train_and_register", run_id, "register")["version"])
    mlflow = MlflowClient(cfg.mlflow_uri)
    # The model's release options, as its owner would set them once in the MLflow UI: a canary sized
    # for the demo's traffic (the defaults, 1 % first and 60 s windows, suit busier models).
    for param, value in (("canary_steps", "25,50,100"), ("analysis_interval_s", "5"), ("min_requests", "20"),
                         ("stable_grace_s", "5")):
        mlflow.set_registered_model_tag(DEMO_MODEL, f"modelops.release.{param}", value)
    mlflow.transition_model_version_stage(DEMO_MODEL, version, "Staging")
    print(f"    moved {DEMO_MODEL} version {version} to Staging through the MLflow client (as the MLflow UI "
          "does); release_on_staging (every minute) starts its release")
    with _traffic(cfg):
        deadline, release = time.monotonic() + 360, None
        while release is None and time.monotonic() < deadline:
            runs = client.request("GET", "/api/v2/dags/model_release/dagRuns",
                                  params={"limit": 50, "order_by": "-start_date"})["dag_runs"]
            release = next((r["dag_run_id"] for r in runs if (r.get("conf") or {}).get("model") == DEMO_MODEL
                            and str((r.get("conf") or {}).get("version")) == version), None)
            time.sleep(3)
        if release is None:
            raise AirflowError(f"no model_release run started for {DEMO_MODEL} version {version} within 360 s "
                               "(is release_on_staging paused?)")
        print(f"    release_on_staging started model_release run {release}")
        print(f"    follow it in the cockpit: {cfg.airflow_api_url}/modelops/releases (Airflow nav: Browse → "
              "Releases), or on the run page's Release tab")
        state = wait_release(client, DEMO_MODEL, release)
    if state != "success":
        raise AirflowError(f"the release of {DEMO_MODEL} version {version} from Staging ended {state}")
    _STATE["version"] = version
    return f"{DEMO_MODEL} version {version}: moved to Staging, released and promoted without a trigger"


def _nightly_jobs(cfg: Settings) -> str:
    """The batch paths on the demo's traffic: CTR / CVR per version, then the drift check."""
    from modelops.airflow_client import AirflowError, client_from_settings

    client = client_from_settings()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    # A window of 36 s: today's run waits only that long for late feedback (the schedule waits 24 h).
    follow("feedback_join", {"window_hours": 0.01})
    drift_run = follow("nightly_drift", {})
    try:
        reports = client.xcom("nightly_drift", drift_run, "publish_reports") or []
    except AirflowError:  # skipped: no version had samples to compare yet
        reports = []
    version = str(_STATE.get("version", ""))
    print(f"    CTR / CVR of {day}: s3://{cfg.bucket}/metrics/ctr_cvr/dt={day}/ (ctr_cvr.json), on the MLflow run "
          f"(metrics online_ctr, online_cvr) and on the lineage page "
          f"{cfg.airflow_api_url}/modelops/lineage/{DEMO_MODEL}/{version}")
    for report in reports:
        print(f"    drift report of {report['model']} v{report['triton_version']}: {report['report']} "
              f"(drifted: {report['drifted']})")
    if not reports:
        print("    drift: the launch day's samples became the version's baseline; tomorrow's scheduled "
              f"nightly_drift compares with them (reports under s3://{cfg.bucket}/reports/drift/{DEMO_MODEL}/)")
    print(f"    the MLflow version page ({cfg.mlflow_uri}/#/models/{DEMO_MODEL}/versions/{version}) carries the "
          "same summary in its description")
    return f"feedback_join and nightly_drift ran for {day}"


STEPS: tuple[Step, ...] = (
    Step("publish the feature tables (object store)", _publish_features),
    Step("train and register the reference model (Airflow: train_and_register)", _train_and_register),
    Step("release it: contract gate, Triton publish, verify (Airflow: model_release)", _release),
    Step("score one request on the released Triton version", _infer),
    Step("release a better version under generated traffic (canary: expect promotion)", _release_good),
    Step("release a version that fails 30% of requests (canary: expect rollback)", _release_faulty),
    Step("move a new version to Staging in MLflow: the release starts by itself (release_on_staging)",
         _release_on_staging),
)
JOBS = Step("run feedback_join and nightly_drift on the demo's traffic (CTR / CVR, drift)", _nightly_jobs)
