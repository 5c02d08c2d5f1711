"""The Releases page stays fast: 50 models × 20 releases, rendered from the real object store.

The documents are seeded into a bucket of their own (so the stack's own Releases page stays
readable) and the page is built by the same function the endpoint runs: the listing, the
parallel reads of every routes document and release index, the view model and the template.
"""

from __future__ import annotations

import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from modelops.config import Settings

pytestmark = pytest.mark.integration

MODELS, RELEASES = 50, 20
LIMIT_MS = 300.0


def _seed(store: object) -> None:
    from modelops.canary.record import ReleaseRef, index_document, index_key, index_with, updated
    from modelops.canary.status import CanaryStatus, Phase
    from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes

    def one(m: int) -> None:
        model = f"perf_{m:02d}"
        rows: list[dict[str, object]] = []
        for v in range(1, RELEASES + 1):
            ref = ReleaseRef(model=model, canary_version=v + 1, canary_sha256=f"{v:064x}", mlflow_version=str(v + 1),
                             started_by="perf", dag_id="model_release", run_id=f"manual__{m}_{v}",
                             steps=(0.25, 0.5, 1.0), stable_version=v, stable_sha256=f"{v - 1:064x}")
            phase = Phase.ROLLED_BACK if v % 3 == 0 else Phase.PROMOTED
            status = CanaryStatus(model=model, stable_version=v, canary_version=v + 1, phase=phase, weight=0.0,
                                  started_at=1_700_000_000.0 + v * 600, updated_at=1_700_000_000.0 + v * 600 + 90,
                                  reason="failed gates: error_rate" if v % 3 == 0 else "",
                                  mttr_s=7.0 if v % 3 == 0 else None)
            rows = index_with(rows, updated(None, ref, status))
        store.put_bytes(index_key(model), index_document(model, rows))  # type: ignore[attr-defined]
        routes = Routes(model=model, revision=RELEASES, stable=VersionRef(RELEASES, f"{RELEASES:064x}"), canary=None,
                        canary_weight=0.0, updated_at=datetime.now(UTC).isoformat(), updated_by="perf")
        store.put_bytes(routes_key(model), serialize_routes(routes))  # type: ignore[attr-defined]

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(MODELS)))


def _touch(store: object, m: int, at: float) -> None:
    """A release of model ``m`` moves on (what every analysis window does): its index changes."""
    from modelops.canary.record import ReleaseRef, index_document, index_key, index_rows, index_with, updated
    from modelops.canary.status import CanaryStatus, Phase

    model = f"perf_{m:02d}"
    rows = [r.to_dict(windows=False) for r in index_rows(store.get_bytes(index_key(model)))]  # type: ignore[attr-defined]
    ref = ReleaseRef(model=model, canary_version=RELEASES + 2, canary_sha256="c" * 64, mlflow_version="99",
                     started_by="perf", dag_id="model_release", run_id=f"manual__{m}_live", steps=(0.25, 0.5, 1.0),
                     stable_version=RELEASES + 1)
    status = CanaryStatus(model=model, stable_version=RELEASES + 1, canary_version=RELEASES + 2,
                          phase=Phase.PROGRESSING, weight=0.25, step_index=0, started_at=1_800_000_000.0,
                          updated_at=at)
    store.put_bytes(index_key(model), index_document(model, index_with(rows, updated(None, ref, status))))  # type: ignore[attr-defined]


def test_the_releases_page_renders_50_models_x_20_releases_in_under_300_ms(stack_settings: Settings) -> None:
    """Server time of the page as people use it: nothing changed, or one release moved on since the
    last view (only the changed documents are read and rendered again). The first, cold render of
    a fresh process is printed, not asserted."""
    from modelops.cockpit.app import releases_page
    from modelops.cockpit.views import Links
    from modelops.objectstore import ObjectStore

    store = ObjectStore.from_settings(stack_settings, bucket=f"cockpit-perf-{uuid.uuid4().hex[:8]}")
    store.ensure_bucket()
    _seed(store)
    links = Links(mlflow_ui="http://mlflow", cockpit="/modelops")
    started = time.perf_counter()
    page = releases_page(store, "perf", links)
    cold = (time.perf_counter() - started) * 1000
    body = page.body.decode()
    assert body.count('<table class="history"') == MODELS and body.count("data-version=") == MODELS * RELEASES
    unchanged, one_changed = [], []
    for i in range(5):
        started = time.perf_counter()
        releases_page(store, "perf", links)
        unchanged.append((time.perf_counter() - started) * 1000)
        _touch(store, i, time.time())
        started = time.perf_counter()
        page = releases_page(store, "perf", links)
        one_changed.append((time.perf_counter() - started) * 1000)
        assert f"manual__{i}_live" in page.body.decode()  # the change is on the page at once
    print(f"Releases page, {MODELS} models x {RELEASES} releases: cold {cold:.0f} ms; median unchanged "
          f"{statistics.median(unchanged):.0f} ms ({', '.join(f'{t:.0f}' for t in unchanged)}); median one release "
          f"moved on {statistics.median(one_changed):.0f} ms ({', '.join(f'{t:.0f}' for t in one_changed)})")
    assert statistics.median(unchanged) < LIMIT_MS, unchanged
    assert statistics.median(one_changed) < LIMIT_MS, one_changed
