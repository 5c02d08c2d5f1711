"""The sha256 → integer Triton version mapping and its compare-and-swap allocation."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelops.errors import ServingError
from modelops.serving.index_store import allocate_version, index_key, lock_key, model_lock, read_index
from modelops.serving.versions import VersionIndex, assign_version


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_same_sha_gets_same_version_and_new_sha_gets_next() -> None:
    index = VersionIndex("ranker")
    index, v1, created1 = assign_version(index, sha("a"))
    index, v2, created2 = assign_version(index, sha("b"))
    again, v1_again, created_again = assign_version(index, sha("a"))
    assert (v1, created1, v2, created2) == (1, True, 2, True)
    assert (v1_again, created_again) == (1, False)
    assert again is index


def test_next_version_is_max_plus_one_even_with_gaps() -> None:
    index = VersionIndex("ranker", {sha("a"): 3, sha("b"): 7})
    _, version, _ = assign_version(index, sha("c"))
    assert version == 8


def test_index_round_trips_through_json() -> None:
    index = VersionIndex("ranker", {sha("b"): 2, sha("a"): 1})
    parsed = VersionIndex.from_json(index.to_json(), model="ranker")
    assert dict(parsed.versions) == dict(index.versions)
    assert parsed.sha256_of(2) == sha("b")


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({sha("a"): 1, sha("b"): 1}, "given to both"),
        ({sha("a"): 0}, ">= 1"),
        ({"xyz": 1}, "64 lowercase hex"),
    ],
)
def test_invalid_index_is_refused(versions: dict[str, int], message: str) -> None:
    with pytest.raises(ServingError, match=message):
        VersionIndex("ranker", versions)


def test_index_of_another_model_is_refused() -> None:
    with pytest.raises(ServingError, match="expected 'ranker'"):
        VersionIndex.from_json(VersionIndex("other").to_json(), model="ranker")


class AtomicMemoryStore:
    """An in-memory conditional store with S3's semantics (atomic compare-and-swap)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.lock = threading.Lock()
        self.counter = 0
        self.rejected = 0

    def read(self, key: str) -> tuple[bytes | None, str | None]:
        with self.lock:
            body, etag = self.objects.get(key, (None, None))
            return body, etag

    def remove(self, key: str) -> None:
        with self.lock:
            self.objects.pop(key, None)

    def write_if(self, key: str, body: bytes, etag: str | None) -> bool:
        with self.lock:
            current = self.objects.get(key)
            if (current[1] if current else None) != etag:
                self.rejected += 1
                return False
            self.counter += 1
            self.objects[key] = (body, f'"{self.counter}"')
            return True


def test_concurrent_publishes_never_share_an_integer() -> None:
    store = AtomicMemoryStore()
    shas = [sha(str(i)) for i in range(24)] * 2  # each sha published twice, concurrently
    barrier = threading.Barrier(8)

    def publish(digest: str) -> tuple[str, int]:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=0.5)
        return digest, allocate_version(store, "ranker", digest).version

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(publish, shas))
    by_sha: dict[str, set[int]] = {}
    for digest, version in results:
        by_sha.setdefault(digest, set()).add(version)
    assert all(len(v) == 1 for v in by_sha.values()), "one sha got two integers"
    numbers = [next(iter(v)) for v in by_sha.values()]
    assert sorted(numbers) == list(range(1, 25)), "two shas got the same integer, or a gap"
    index, _ = read_index(store, "ranker")
    assert {d: index.version_of(d) for d in by_sha} == {d: next(iter(v)) for d, v in by_sha.items()}


def test_a_stale_writer_retries_instead_of_overwriting() -> None:
    store = AtomicMemoryStore()
    first = allocate_version(store, "ranker", sha("a"))
    body, etag = store.read(index_key("ranker"))
    assert body is not None
    # Another publish lands between our read and our write: our etag is stale now.
    allocate_version(store, "ranker", sha("b"))
    assert store.write_if(index_key("ranker"), body, etag) is False
    third = allocate_version(store, "ranker", sha("c"))
    assert (first.version, third.version) == (1, 3)


def test_model_lock_serialises_holders_and_is_released() -> None:
    store = AtomicMemoryStore()
    inside: list[int] = []
    overlaps: list[int] = []

    def hold(i: int) -> None:
        with model_lock(store, "ranker", owner=f"t{i}", poll_s=0.001):
            inside.append(i)
            if len(inside) > 1:
                overlaps.append(i)
            time.sleep(0.002)
            inside.remove(i)

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(hold, range(12)))
    assert overlaps == []
    assert store.read(lock_key("ranker")) == (None, None)


def test_an_expired_lock_is_taken_over_and_a_live_one_times_out() -> None:
    store = AtomicMemoryStore()
    stale = json.dumps({"owner": "dead", "token": "x", "expires_at": time.time() - 1}).encode()
    store.write_if(lock_key("ranker"), stale, None)
    with model_lock(store, "ranker", owner="me"):
        body, _ = store.read(lock_key("ranker"))
        assert body is not None and json.loads(body)["owner"] == "me"
    live = json.dumps({"owner": "busy", "token": "y", "expires_at": time.time() + 60}).encode()
    store.write_if(lock_key("ranker"), live, None)
    with pytest.raises(ServingError, match="held by busy"), model_lock(store, "ranker", wait_s=0.05, poll_s=0.01):
        pass


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over_at_once_another_hosts_is_not() -> None:
    import socket
    import subprocess
    import sys

    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = psutil.Process(child.pid).create_time()
    child.kill()  # a publish task SIGKILLed while it held the lock
    child.wait()
    dead = {"owner": "publish killed", "token": "x", "expires_at": time.time() + 300, "host": socket.gethostname(),
            "pid": child.pid, "pid_started": started}
    store = AtomicMemoryStore()
    store.write_if(lock_key("ranker"), json.dumps(dead).encode(), None)
    began = time.monotonic()
    with model_lock(store, "ranker", owner="me", wait_s=5, poll_s=0.01):
        body, _ = store.read(lock_key("ranker"))
        assert body is not None and json.loads(body)["owner"] == "me"
    assert time.monotonic() - began < 2, "taken over without waiting for the TTL"
    # The same dead PID on another host proves nothing here: the lock is left to its TTL.
    store.write_if(lock_key("ranker"), json.dumps({**dead, "host": "elsewhere"}).encode(), None)
    with pytest.raises(ServingError, match="held by publish killed"), model_lock(store, "ranker", wait_s=0.05,
                                                                                poll_s=0.01):
        pass
    # A live holder on this host (this process) is waited for.
    alive = {**dead, "host": socket.gethostname(), "pid": os.getpid(), "pid_started": psutil.Process().create_time()}
    store.remove(lock_key("ranker"))
    store.write_if(lock_key("ranker"), json.dumps(alive).encode(), None)
    with pytest.raises(ServingError, match="held by"), model_lock(store, "ranker", wait_s=0.05, poll_s=0.01):
        pass


def test_a_holder_working_past_the_ttl_keeps_the_lock_renewed() -> None:
    store = AtomicMemoryStore()
    with model_lock(store, "ranker", owner="slow reload", ttl_s=0.3, poll_s=0.01):
        time.sleep(0.9)  # three TTLs of work: the renewer must keep pushing the expiry forward
        body, _ = store.read(lock_key("ranker"))
        assert body is not None and json.loads(body)["expires_at"] > time.time()
        with pytest.raises(ServingError, match="held by slow reload"), \
                model_lock(store, "ranker", owner="waiter", ttl_s=0.3, wait_s=0.2, poll_s=0.01):
            pass
    assert store.read(lock_key("ranker")) == (None, None)
