"""The version index's compare-and-swap raced for real on the stack's object store (SeaweedFS).

moto's conditional put was check-then-write: two racing writers could both "win". Here many
threads, released together by a barrier, race the same conditional write: exactly one may
win each round, and concurrent publishes of different sha256s get distinct integers.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelops.config import Settings
from modelops.objectstore import ObjectStore
from modelops.serving.index_store import S3ConditionalStore, allocate_version, index_key, read_index

pytestmark = pytest.mark.integration

WRITERS = 12


def _race(count: int, attempt: object) -> list[object]:
    barrier = threading.Barrier(count)

    def run(k: int) -> object:
        barrier.wait(timeout=30)
        return attempt(k)  # type: ignore[operator]

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def test_racing_conditional_writes_have_exactly_one_winner(stack_settings: Settings) -> None:
    stores = [S3ConditionalStore(ObjectStore.from_settings(stack_settings)) for _ in range(WRITERS)]
    key = f"tests/cas-race-{uuid.uuid4().hex}.json"
    created = _race(WRITERS, lambda k: stores[k].write_if(key, f'{{"writer": {k}}}'.encode(), None))
    assert created.count(True) == 1, f"If-None-Match: * let {created.count(True)} writers create {key}"
    body, etag = stores[0].read(key)
    assert body == f'{{"writer": {created.index(True)}}}'.encode()
    replaced = _race(WRITERS, lambda k: stores[k].write_if(key, f'{{"replacer": {k}}}'.encode(), etag))
    assert replaced.count(True) == 1, f"If-Match let {replaced.count(True)} writers replace the same ETag"
    stores[0].remove(key)


def test_concurrent_allocations_give_distinct_integers(stack_settings: Settings) -> None:
    model = f"cas_{uuid.uuid4().hex[:8]}"
    shas = [hashlib.sha256(f"{model}-{k}".encode()).hexdigest() for k in range(WRITERS)]
    stores = [ObjectStore.from_settings(stack_settings) for _ in range(WRITERS)]
    results = _race(WRITERS, lambda k: allocate_version(stores[k], model, shas[k]))
    versions = [r.version for r in results]  # type: ignore[attr-defined]
    assert sorted(versions) == list(range(1, WRITERS + 1)), versions
    index, _ = read_index(S3ConditionalStore(stores[0]), model)
    assert dict(index.versions) == dict(zip(shas, versions, strict=True))
    # The same sha256 published concurrently still gets its one integer.
    again = _race(WRITERS, lambda k: allocate_version(stores[k], model, shas[0]).version)
    assert set(again) == {versions[0]}
    stores[0].delete(index_key(model))
