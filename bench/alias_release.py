"""Alias → release: seconds from setting ``challenger`` on a version to its ``model_release`` run started.

Two paths on a stack of its own (``--port-base``, default 26500, temporary ``MODELOPS_HOME``; object
store, MLflow and Airflow only):

1. **webhook** (``--webhook-trials``, default 5; goal median <= 5 s): MLflow delivers
   ``model_version_alias.created`` to the receiver on Airflow's API server, which claims the
   version and triggers the run. One untimed trial first (the receiver's first delivery).
2. **poll** (``--poll-trials``, default 3; goal median <= 60 s), the anchor (before the webhook,
   the only way): the webhook disabled in MLflow (as ``MODELOPS_RELEASE_WEBHOOKS=off`` registers
   it), ``release_on_staging``'s one-minute poll finds the alias. The trials' aliases are set at
   spread-out moments of one minute, so they sample the schedule's phase instead of following it.

Each trial is a throwaway registered model (a version of an empty run); its run is marked failed
once it has started (it would stop at the contract gate), so no trial waits for another's slot
(``model_release`` runs at most 4 at a time). The clock starts before ``set_registered_model_alias`` and stops
at the run's ``start_date`` (the scheduler set it running; Airflow's clock, same machine); the run's
creation (``queued_at``) is printed too. Medians, min and max; the ratio webhook / poll last.

Run: ``.venv/bin/python bench/alias_release.py`` (~6 minutes on 2 shared cores, ~2.5 of them the
stack's start).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._stack import load_average, on_private_stack  # after the path: runnable without the install

GOAL_WEBHOOK_S = 5.0
GOAL_POLL_S = 60.0
SERVICES = ("mlflow", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _throwaway(mlflow_uri: str) -> tuple[str, str]:
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("bench-alias-release")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("bench-alias-release")
    run = client.create_run(experiment_id)
    name = f"bench_alias_{uuid.uuid4().hex[:6]}"
    client.create_registered_model(name)
    version = client.create_model_version(name, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    return name, str(version.version)


def _trial(cfg: Any, airflow: Any, timeout_s: float, delay_s: float = 0.0) -> tuple[float, float, str]:
    """(seconds to the run's start, seconds to its creation, who started it) for one new version."""
    from mlflow import MlflowClient

    name, version = _throwaway(cfg.mlflow_uri)
    time.sleep(delay_s)
    set_at = time.time()
    MlflowClient(cfg.mlflow_uri).set_registered_model_alias(name, "challenger", version)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = airflow.request("GET", "/api/v2/dags/model_release/dagRuns",
                               params={"limit": 50, "order_by": "-run_after"})["dag_runs"]
        mine = [r for r in runs if (r.get("conf") or {}).get("model") == name and r.get("start_date")]
        if mine:
            run = mine[0]
            # Its release would stop at the contract gate; end it now, so it holds none of model_release's
            # max_active_runs slots (a queued run does not start while they are taken) and loads no core.
            airflow.request("PATCH", f"/api/v2/dags/model_release/dagRuns/{run['dag_run_id']}",
                            json={"state": "failed"})
            return (_epoch(run["start_date"]) - set_at, _epoch(run["queued_at"]) - set_at,
                    str(run["conf"]["started_by"]))
        time.sleep(0.2)
    raise SystemExit(f"no model_release run of {name} started within {timeout_s:.0f} s")


def _row(label: str, values: list[float], anchor: list[float]) -> str:
    def cell(v: list[float]) -> str:
        return f"{statistics.median(v):8.2f}" if v else f"{'-':>8}"
    return f"  {label:34} {cell(values)} {cell(anchor)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-base", type=int, default=26500)
    parser.add_argument("--webhook-trials", type=int, default=5)
    parser.add_argument("--poll-trials", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, str]]] = {"webhook": [], "poll": []}

    def work() -> None:
        from modelops.airflow_client import client_from_settings
        from modelops.config import settings
        from modelops.registry.webhooks import ensure_release_webhook

        cfg = settings()
        airflow = client_from_settings()
        for dag in ("model_release", "release_on_staging"):
            airflow.wait_for_dag(dag, timeout_s=300)
        print(f"stack up; {load_average()}", flush=True)
        _trial(cfg, airflow, 120)  # untimed: the receiver's and the scheduler's first run
        for i in range(args.webhook_trials):
            results["webhook"].append(_trial(cfg, airflow, 120))
            print(f"  webhook trial {i + 1}: run started after {results['webhook'][-1][0]:.2f} s", flush=True)
        ensure_release_webhook(replace(cfg, release_webhooks="off"))
        time.sleep(6)  # MLflow's webhook cache (5 s in the embedded stack)
        offsets = sorted(random.uniform(0, 60) for _ in range(args.poll_trials))
        lock = threading.Lock()

        def poll_trial(offset: float) -> None:
            result = _trial(cfg, airflow, 240, delay_s=offset)
            with lock:
                results["poll"].append(result)
                print(f"  poll trial: alias set at +{offset:.0f} s, run started after {result[0]:.2f} s", flush=True)

        threads = [threading.Thread(target=poll_trial, args=(o,)) for o in offsets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ensure_release_webhook(cfg)

    on_private_stack(args.port_base, "modelops-bench-alias-", work, only=SERVICES)
    webhook, poll = results["webhook"], results["poll"]
    assert {s for _, _, s in webhook} == {"mlflow-webhook"}, webhook
    assert {s for _, _, s in poll} == {"alias-watcher"}, poll
    print(f"\nalias challenger set -> model_release run (seconds; {load_average()})")
    print(f"  {'':34} {'webhook':>8} {'poll':>8}  (anchor)")
    print(f"  {'trials':34} {len(webhook):8d} {len(poll):8d}")
    print(_row("median, run started", [w for w, _, _ in webhook], [p for p, _, _ in poll]))
    print(_row("median, run created (queued)", [q for _, q, _ in webhook], [q for _, q, _ in poll]))
    def spread(values: list[float]) -> str:
        return f"{min(values):.1f}-{max(values):.1f}".rjust(8)
    print(f"  {'min-max, run started':34} {spread([w for w, _, _ in webhook])} {spread([p for p, _, _ in poll])}")
    print(f"  {'goal (median)':34} {'<= ' + str(GOAL_WEBHOOK_S):>8} {'<= ' + str(GOAL_POLL_S):>8}")
    median_webhook = statistics.median(w for w, _, _ in webhook)
    median_poll = statistics.median(p for p, _, _ in poll)
    ok = median_webhook <= GOAL_WEBHOOK_S and median_poll <= GOAL_POLL_S
    print(f"ratio webhook / poll (medians, run started): {median_webhook / median_poll:.3f}"
          f"{'' if ok else '  (a goal missed)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
