"""The feedback join's object-store output is switched atomically: a reader sees one run's JSON and Parquet.

An in-memory store with S3's conditional-put semantics (ETags, If-Match / If-None-Match) stands in for the
object store; the writes are the driver's small files (the quarantine frame is the Spark tests' subject).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from modelops.errors import ModelopsError
from modelops.feedback import outputs
from modelops.feedback.outputs import JSON_NAME, PARQUET_NAME, POINTER_NAME, current_location, current_prefix

ROOT = "s3://modelops/metrics/ctr_cvr/dt=2026-12-04"
PREFIX = "metrics/ctr_cvr/dt=2026-12-04"


class ConditionalStore:
    """Objects in a dict, S3's conditional put on top."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.before_switch: list[object] = []  # callables run just before a conditional put (a racing writer)

    @staticmethod
    def _etag(data: bytes) -> str:
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "") -> str:
        self.objects[key] = data
        return hashlib.sha256(data).hexdigest()

    def get_bytes(self, key: str) -> bytes:
        return self.objects[key]

    def get_with_etag(self, key: str) -> tuple[bytes | None, str | None]:
        data = self.objects.get(key)
        return (data, self._etag(data)) if data is not None else (None, None)

    def put_if(self, key: str, data: bytes, etag: str | None, *, content_type: str = "") -> bool:
        for hook in self.before_switch:
            hook()  # type: ignore[operator]
        current = self.objects.get(key)
        if (etag is None and current is not None) or (etag is not None and (
                current is None or self._etag(current) != etag)):
            return False
        self.objects[key] = data
        return True

    def list_keys(self, prefix: str) -> Iterator[str]:
        yield from sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


@pytest.fixture()
def store(monkeypatch: pytest.MonkeyPatch) -> ConditionalStore:
    fake = ConditionalStore()
    monkeypatch.setattr(outputs, "_store", lambda bucket: fake)
    return fake


def _run(number: int, *, check_inside: object = None) -> str:
    """One run writing the pair ``{"run": number}`` / ``b"parquet-<number>"``; returns its generation."""
    with outputs.output_for(ROOT).writing() as writer:
        writer.put(PARQUET_NAME, f"parquet-{number}".encode())
        if check_inside is not None:
            check_inside()  # type: ignore[operator]
        writer.put(JSON_NAME, json.dumps({"run": number}).encode())
    return writer.location(JSON_NAME).rsplit("/", 2)[1]


def _read_pair(store: ConditionalStore) -> tuple[int, str]:
    """What a reader sees: the JSON's run and the Parquet's, both from the generation the pointer names."""
    current = current_prefix(store, PREFIX)
    return json.loads(store.get_bytes(f"{current}/{JSON_NAME}"))["run"], store.get_bytes(
        f"{current}/{PARQUET_NAME}").decode()


def test_a_run_becomes_current_only_when_its_pair_is_complete(store: ConditionalStore) -> None:
    assert current_prefix(store, PREFIX) == PREFIX  # nothing written yet
    first = _run(1)
    assert first.startswith("g-") and _read_pair(store) == (1, "parquet-1")
    pointer = json.loads(store.objects[f"{PREFIX}/{POINTER_NAME}"])
    assert (pointer["schema_version"], pointer["generation"], pointer["previous"]) == (1, first, None)

    seen_while_writing: list[tuple[int, str]] = []
    second = _run(2, check_inside=lambda: seen_while_writing.append(_read_pair(store)))
    assert seen_while_writing == [(1, "parquet-1")]  # the new Parquet is written, the old pair is still current
    assert _read_pair(store) == (2, "parquet-2") and second != first
    assert current_location(ROOT) == f"{ROOT}/{second}"


def test_the_previous_generation_stays_for_readers_in_flight_and_older_ones_go(store: ConditionalStore) -> None:
    first, second = _run(1), _run(2)
    generations = {k.split("/")[3] for k in store.objects if k != f"{PREFIX}/{POINTER_NAME}"}
    assert generations == {first, second}
    third = _run(3)
    generations = {k.split("/")[3] for k in store.objects if k != f"{PREFIX}/{POINTER_NAME}"}
    assert generations == {second, third}


def test_a_flat_output_from_before_the_pointer_is_read_then_replaced(store: ConditionalStore) -> None:
    store.put_bytes(f"{PREFIX}/{JSON_NAME}", json.dumps({"run": 0}).encode())
    store.put_bytes(f"{PREFIX}/{PARQUET_NAME}", b"parquet-0")
    store.put_bytes(f"{PREFIX}/quarantine/part-0123456789ab-00000.parquet", b"q")
    assert _read_pair(store) == (0, "parquet-0")
    generation = _run(1)
    assert _read_pair(store) == (1, "parquet-1")
    assert sorted(store.objects) == [f"{PREFIX}/{POINTER_NAME}", f"{PREFIX}/{generation}/{JSON_NAME}",
                                     f"{PREFIX}/{generation}/{PARQUET_NAME}"]


def test_a_run_that_loses_the_switch_to_a_concurrent_one_drops_its_output(store: ConditionalStore) -> None:
    first = _run(1)
    racer: list[str] = []

    def concurrent_switch() -> None:  # another run makes its output current between our read and our put
        if not racer:
            store.before_switch.clear()
            racer.append(_run(7))

    store.before_switch.append(concurrent_switch)
    with pytest.raises(ModelopsError, match="another run made its output current"):
        _run(2)
    assert _read_pair(store) == (7, "parquet-7")
    # The winner's generation and the one it replaced; nothing of the losing run.
    assert {k.split("/")[3] for k in store.objects if "/g-" in k} == {first, racer[0]}


def test_a_failed_run_leaves_the_current_pair_and_no_files(store: ConditionalStore) -> None:
    _run(1)
    before = dict(store.objects)

    def fail() -> None:
        raise RuntimeError("the job failed half-way")

    with pytest.raises(RuntimeError):
        _run(2, check_inside=fail)
    assert store.objects == before and _read_pair(store) == (1, "parquet-1")


def test_a_foreign_location_is_still_refused_and_a_broken_pointer_named(store: ConditionalStore) -> None:
    _run(1)
    store.put_bytes(f"{PREFIX}/notes.txt", b"not the job's")
    with pytest.raises(ModelopsError, match="refusing to replace"):
        outputs.output_for(ROOT)
    store.delete(f"{PREFIX}/notes.txt")
    store.put_bytes(f"{PREFIX}/{POINTER_NAME}", b'{"generation": "../elsewhere"}')
    with pytest.raises(ModelopsError, match="is not a g-<tag> name"):
        current_prefix(store, PREFIX)
