"""precompute_predictions: the champion's scores of the active users x candidate items, as a snapshot.

Hourly: for each routed model (or the one named in the form) take the champion — the stable
Triton version of its routes document — score every user x item of the served feature snapshot
(capped by the form) through Triton's HTTP API with binary tensors in batches, and write a
versioned snapshot to the object store: ``precomputed/<model>/v=<version>/<interval>/`` with the
scores first and the manifest (version, sha256, created_at, rows, feature snapshot) last. The
gateway answers from it while that version is the one it routes a user to and the snapshot is
fresh (``MODELOPS_PRECOMPUTED_MAX_AGE_S``). Re-running an interval rewrites its snapshot; snapshots
beyond the newest ``keep`` of each version are deleted.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task


@dag(
    dag_id="precompute_predictions",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["modelops", "serving", "precompute"],
    params={
        "model": Param("", type="string", description="One model to score; empty: every routed model."),
        "max_users": Param(0, type="integer", minimum=0, description="Active users to score (0: all)."),
        "max_items": Param(0, type="integer", minimum=0, description="Candidate items to score (0: all)."),
        "max_pairs": Param(25_000_000, type="integer", minimum=0,
                           description="Refuse a population above this many pairs (the gateway holds 4 bytes "
                                       "per pair per routed version; 0: no bound)."),
        "batch_rows": Param(4096, type="integer", minimum=1,
                            description="Pairs per Triton call (at most the model's max_batch_size)."),
        "keep": Param(3, type="integer", minimum=1, description="Snapshots kept per version (older ones deleted)."),
    },
    doc_md=__doc__,
)
def precompute_predictions() -> None:
    @task(retries=2)
    def resolve_champions() -> list[dict[str, Any]]:
        from dataclasses import asdict

        from modelops.jobs.precompute_tasks import champions
        from modelops.objectstore import ObjectStore

        model = str(get_current_context()["params"]["model"])
        return [asdict(c) for c in champions(ObjectStore.from_settings(), [model] if model else None)]

    @task(retries=2)
    def score_snapshot(champion: dict[str, Any]) -> dict[str, Any]:
        from modelops.jobs.precompute_tasks import Champion, interval_start, precompute

        context = get_current_context()
        params = context["params"]
        return precompute(Champion(**champion), interval_start(context), max_users=int(params["max_users"]),
                          max_items=int(params["max_items"]), max_pairs=int(params["max_pairs"]),
                          batch_rows=int(params["batch_rows"]),
                          keep=int(params["keep"]))

    score_snapshot.expand(champion=resolve_champions())


precompute_predictions()
