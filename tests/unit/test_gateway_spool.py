"""The event spool: frames, rotation, crash recovery, verified upload, group commit, budget."""

from __future__ import annotations

import asyncio
import io
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from modelops.errors import ObjectStoreError
from modelops.gateway.logs.eventlog import (
    EventLogs,
    SpoolConfig,
    convert_feedback,
    convert_predictions,
    feedback_record,
    prediction_record,
    scored_converter,
    scored_record,
)
from modelops.gateway.logs.groupcommit import GroupCommitter
from modelops.gateway.logs.spool import (
    SegmentWriter,
    SpoolFull,
    encode_frame,
    read_frames,
    recover_orphans,
    spool_usage,
)
from modelops.gateway.logs.upload import Uploader
from modelops.records import FEEDBACK, PREDICTIONS, scored_samples_schema

T0 = datetime(2026, 11, 29, 21, 59, 58, tzinfo=UTC).timestamp()


class MemoryStore:
    """An in-memory object store; ``down`` makes every call fail like an unreachable server."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.down = False
        self.puts = 0

    def put_bytes(self, key: str, data: bytes, *, content_type: str = "") -> str:
        if self.down:
            raise ObjectStoreError("connection refused")
        self.puts += 1
        self.objects[key] = data
        return ""

    def get_bytes(self, key: str) -> bytes:
        if self.down:
            raise ObjectStoreError("connection refused")
        return self.objects[key]


def _feedback(k: int, at: float = T0) -> list[object]:
    return feedback_record(feedback_token=f"tok-{k}", action="click", ts=at - 5, received_at=at)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_frames_round_trip_and_torn_tail_is_cut() -> None:
    data = b"".join(encode_frame(_feedback(k)) for k in range(5))
    records, used = read_frames(data)
    assert len(records) == 5 and used == len(data)
    records, used = read_frames(data + encode_frame(_feedback(5))[:-3])
    assert len(records) == 5 and used == len(data)
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    assert len(read_frames(bytes(corrupt))[0]) == 4


def test_rotation_by_size_and_by_age(tmp_path: Path) -> None:
    clock = Clock()
    writer = SegmentWriter(tmp_path, max_bytes=100, max_age_s=5.0, clock=clock)
    frame = encode_frame(_feedback(0))
    for _ in range(3):
        writer.write(frame * 2)
    sealed = sorted(tmp_path.glob("*.seg"))
    assert sealed, "a full segment is sealed before the next write"
    assert writer.rotate_if_due() is None  # the new segment is neither full nor old
    clock.now += 6
    aged = writer.rotate_if_due()
    assert aged is not None and aged.suffix == ".seg"
    assert not list(tmp_path.glob("*.open"))
    total = sum(len(read_frames(p.read_bytes())[0]) for p in tmp_path.glob("*.seg"))
    assert total == 6


def test_orphan_of_a_dead_writer_is_recovered_but_a_live_one_is_not(tmp_path: Path) -> None:
    live = SegmentWriter(tmp_path)
    live.write(encode_frame(_feedback(1)))
    dead = SegmentWriter(tmp_path)
    dead.write(b"".join(encode_frame(_feedback(k)) for k in range(3)))
    assert dead.current is not None
    with open(dead.current, "ab") as handle:  # the crash tore the last frame
        handle.write(encode_frame(_feedback(9))[:7])
    os.close(dead._fd)  # the process died: its flock is gone
    recovered = recover_orphans(tmp_path)
    assert len(recovered) == 1 and recovered[0].suffix == ".seg"
    assert [r[0] for r in read_frames(recovered[0].read_bytes())[0]] == ["tok-0", "tok-1", "tok-2"]
    assert live.current is not None and live.current.exists()  # still locked by its writer


def test_upload_is_partitioned_verified_and_deletes_only_after_success(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path)
    # Two hours: 21:59:58 and 22:00:03.
    writer.write(b"".join(encode_frame(_feedback(k, T0 + 5 * (k % 2))) for k in range(10)))
    segment = writer.seal()
    assert segment is not None
    store = MemoryStore()
    uploader = Uploader(tmp_path, "logs/feedback", store, convert_feedback)
    store.down = True
    with pytest.raises(ObjectStoreError):
        uploader.run_once()
    assert segment.exists(), "nothing is deleted while the store is down"
    store.down = False
    assert uploader.run_once() == 1
    assert not segment.exists()
    assert sorted(k.rsplit("/", 1)[0] for k in store.objects) == [
        "logs/feedback/dt=2026-11-29/hour=21", "logs/feedback/dt=2026-11-29/hour=22"]
    tables = [pq.read_table(io.BytesIO(v)) for v in store.objects.values()]
    assert all(t.schema.equals(FEEDBACK) for t in tables)
    assert sorted(tok for t in tables for tok in t.column("feedback_token").to_pylist()) == sorted(
        f"tok-{k}" for k in range(10))


def test_prediction_and_scored_conversion_keep_the_record_schemas() -> None:
    rec = prediction_record(request_id="r1", feedback_token="t", ts=T0, model="m", model_version=3,
                            model_sha256="a" * 64, user_hash="u", n_items=2, score_mean=0.5, score_max=0.6,
                            score_std=0.1, latency_ms=1.5, delay_origin="triton")
    (table_bytes,) = convert_predictions([rec]).values()
    table = pq.read_table(io.BytesIO(table_bytes))
    assert table.schema.equals(PREDICTIONS)
    assert table.column("ts").to_pylist()[0].timestamp() == pytest.approx(T0)
    names = ["f_a", "f_b", "f_c"]
    features = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, np.nan]], dtype=np.float32)
    rec = scored_record(request_id="r1", ts=T0, model="m", model_version=3,
                        scores=np.array([0.25, 0.75], dtype=np.float32), features=features)
    (table_bytes,) = scored_converter(names)([rec]).values()
    table = pq.read_table(io.BytesIO(table_bytes))
    assert table.schema.equals(scored_samples_schema(names))
    assert table.column("item_index").to_pylist() == [0, 1]
    assert table.column("score").to_pylist() == [0.25, 0.75]
    assert table.column("f_b").to_pylist() == [None, 5.0]
    assert table.column("f_c").to_pylist() == [3.0, None]


def test_group_commit_batches_concurrent_appends_and_each_is_on_disk_when_acknowledged(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path)
    writes: list[int] = []
    original = writer.write

    def counting_write(frames: bytes) -> None:
        writes.append(len(frames))
        original(frames)

    writer.write = counting_write  # type: ignore[method-assign]

    async def main() -> None:
        committer = GroupCommitter(writer, budget_bytes=10**9, usage=lambda: 0, sync="fsync")
        committer.start()

        async def one(k: int) -> None:
            await committer.append(_feedback(k))
            assert writer.current is not None
            records = read_frames(writer.current.read_bytes())[0]
            assert [f"tok-{k}"] == [r[0] for r in records if r[0] == f"tok-{k}"]

        await asyncio.gather(*(one(k) for k in range(200)))
        await committer.close()

    asyncio.run(main())
    assert len(writes) < 50, "appends share fsyncs"
    records = [r for p in tmp_path.glob("*.seg") for r in read_frames(p.read_bytes())[0]]
    assert len(records) == 200


def test_sync_write_acknowledges_once_written_and_fdatasyncs_within_the_flush_interval(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path)
    syncs: list[float] = []
    original_sync = writer.sync

    def counting_sync() -> None:
        syncs.append(time.monotonic())
        original_sync()

    writer.sync = counting_sync  # type: ignore[method-assign]

    async def main() -> None:
        committer = GroupCommitter(writer, budget_bytes=10**9, usage=lambda: 0, flush_interval_s=0.02)
        assert committer.sync == "write"  # the default
        committer.start()
        await committer.append(_feedback(0))  # no segment open yet: written and fsynced by the writer thread
        assert not writer.unsynced
        for k in range(1, 50):
            await committer.append(_feedback(k))  # returns without a thread hand-off: on the page cache
            assert writer.current is not None
            records = read_frames(writer.current.read_bytes())[0]
            assert records[-1][0] == f"tok-{k}", "acknowledged means written to the segment"
        assert writer.unsynced and not syncs
        deadline = time.monotonic() + 5
        while writer.unsynced and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert not writer.unsynced and len(syncs) == 1, "one fdatasync for the 49 records, within the interval"
        await committer.close()

    asyncio.run(main())
    records = [r[0] for p in tmp_path.glob("*.seg") for r in read_frames(p.read_bytes())[0]]
    assert records == [f"tok-{k}" for k in range(50)]


def test_sync_write_refuses_with_spool_full_when_the_disk_write_fails(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path)

    async def main() -> None:
        committer = GroupCommitter(writer, budget_bytes=10**9, usage=lambda: 0)
        committer.start()
        await committer.append(_feedback(0))
        assert writer.current is not None
        os.close(writer._fd)  # the next write fails with EBADF, as a failing disk would with EIO
        with pytest.raises(SpoolFull, match="event spool write failed"):
            await committer.append(_feedback(1))
        writer._fd = -1  # the fd is gone: nothing left to seal

    asyncio.run(main())


def test_sync_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="sync: must be one of write, fsync, got 'lazy'"):
        GroupCommitter(SegmentWriter(Path("/tmp")), budget_bytes=1, usage=lambda: 0, sync="lazy")


def test_budget_refuses_new_writes(tmp_path: Path) -> None:
    committer = GroupCommitter(SegmentWriter(tmp_path), budget_bytes=100, usage=lambda: 101)
    with pytest.raises(SpoolFull):
        committer.check_budget()


def test_event_logs_restart_uploads_leftovers(tmp_path: Path) -> None:
    store = MemoryStore()
    store.down = True
    config = SpoolConfig(upload_interval_s=0.05, max_backoff_s=0.05)

    async def first_run() -> None:
        logs = EventLogs(tmp_path, store, ["f_a"], config)
        await logs.start()
        for k in range(20):
            await logs.committers["feedback"].append(_feedback(k))
        await logs.close(upload_timeout_s=0.5)

    asyncio.run(first_run())
    assert spool_usage(tmp_path)[1] >= 1 and not store.objects
    store.down = False

    async def second_run() -> None:
        logs = EventLogs(tmp_path, store, ["f_a"], config)
        await logs.start()
        for _ in range(100):
            if store.objects:
                break
            await asyncio.sleep(0.02)
        await logs.close()

    asyncio.run(second_run())
    tokens = [t for v in store.objects.values() for t in pq.read_table(io.BytesIO(v)).column(0).to_pylist()]
    assert sorted(tokens) == sorted(f"tok-{k}" for k in range(20))
    assert spool_usage(tmp_path) == (0, 0)


def test_a_batch_refused_by_a_full_disk_leaves_no_torn_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from modelops.gateway.logs import spool

    writer = SegmentWriter(tmp_path)
    writer.write(b"".join(encode_frame(_feedback(k)) for k in range(3)))
    real_write = os.write

    def full_disk(fd: int, data: object) -> int:  # takes half the batch, then ENOSPC (a tmpfs at a page edge)
        view = memoryview(data)  # type: ignore[arg-type]
        if len(view) > 8:
            return real_write(fd, view[: len(view) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool.os, "write", full_disk)
    with pytest.raises(OSError):
        writer.write(b"".join(encode_frame(_feedback(k)) for k in range(3, 6)))
    monkeypatch.setattr(spool.os, "write", real_write)
    writer.write(encode_frame(_feedback(6)))  # space again: the next acknowledged batch follows the good frames
    segment = writer.seal()
    assert segment is not None
    data = segment.read_bytes()
    records, used = read_frames(data)
    assert used == len(data)
    assert [r[0] for r in records] == ["tok-0", "tok-1", "tok-2", "tok-6"]


def _torn_segment(spool_dir: Path, *, records: int, torn_bytes: int) -> Path:
    """A sealed segment of ``records`` feedback frames followed by the first ``torn_bytes`` of another."""
    writer = SegmentWriter(spool_dir)
    writer.write(b"".join(encode_frame(_feedback(k)) for k in range(records)))
    assert writer.current is not None
    with open(writer.current, "ab") as handle:
        handle.write(encode_frame(_feedback(9))[:torn_bytes])
    segment = writer.seal()
    assert segment is not None
    return segment


def test_a_torn_segment_uploads_its_records_even_when_the_local_quarantine_cannot_be_written(tmp_path: Path) -> None:
    spool_dir = tmp_path / "feedback"
    segment = _torn_segment(spool_dir, records=4, torn_bytes=7)
    (tmp_path / "quarantine").write_text("not a directory")  # the local copy fails like a full disk
    store = MemoryStore()
    uploader = Uploader(spool_dir, "logs/feedback", store, convert_feedback)
    assert uploader.run_once() == 1
    assert not segment.exists()
    kept = store.objects[f"logs/feedback/_quarantine/{segment.name}"]
    assert read_frames(kept)[1] == len(kept) - 7, "the copy keeps the unreadable tail"
    parquet = [v for k, v in store.objects.items() if k.endswith(".parquet")]
    tokens = sorted(t for v in parquet for t in pq.read_table(io.BytesIO(v)).column("feedback_token").to_pylist())
    assert tokens == ["tok-0", "tok-1", "tok-2", "tok-3"]
    assert uploader.stats.quarantined == 1


def test_a_torn_segment_is_copied_aside_and_counted_once_while_the_store_keeps_failing(tmp_path: Path) -> None:
    spool_dir = tmp_path / "feedback"
    segment = _torn_segment(spool_dir, records=2, torn_bytes=5)

    class DownStore(MemoryStore):
        def put_bytes(self, key: str, data: bytes, *, content_type: str = "") -> str:
            raise ObjectStoreError("store down")

    down = DownStore()
    uploader = Uploader(spool_dir, "logs/feedback", down, convert_feedback)
    for _ in range(3):  # three retries while the store is down: the segment stays, one copy, one count
        with pytest.raises(ObjectStoreError):
            uploader.run_once()
    assert segment.exists() and (tmp_path / "quarantine" / segment.name).exists()
    assert uploader.stats.quarantined == 1
    uploader.store = MemoryStore()  # the store is back
    assert uploader.run_once() == 1 and not segment.exists()
    assert uploader.stats.quarantined == 1


def test_a_segment_the_converter_refuses_is_set_aside_and_later_segments_still_upload(tmp_path: Path) -> None:
    spool_dir = tmp_path / "feedback"
    writer = SegmentWriter(spool_dir)
    writer.write(encode_frame(["an", "older", "record", "format"]))
    first = writer.seal()
    writer.write(b"".join(encode_frame(_feedback(k)) for k in range(3)))
    second = writer.seal()
    assert first is not None and second is not None and first < second
    store = MemoryStore()
    uploader = Uploader(spool_dir, "logs/feedback", store, convert_feedback)
    assert uploader.run_once() == 1
    assert not first.exists() and not second.exists()
    assert (tmp_path / "quarantine" / first.name).read_bytes() == encode_frame(["an", "older", "record", "format"])
    assert uploader.stats.quarantined == 1
    parquet = [v for k, v in store.objects.items() if k.endswith(".parquet")]
    tokens = sorted(t for v in parquet for t in pq.read_table(io.BytesIO(v)).column("feedback_token").to_pylist())
    assert tokens == ["tok-0", "tok-1", "tok-2"]


def test_close_answers_the_batch_in_flight_and_the_records_queued_behind_it(tmp_path: Path) -> None:
    import threading

    entered, gate = threading.Event(), threading.Event()

    class SlowDisk(SegmentWriter):
        def write(self, frames: bytes) -> None:
            entered.set()
            gate.wait(5)
            super().write(frames)

    async def main() -> None:
        committer = GroupCommitter(SlowDisk(tmp_path), budget_bytes=1 << 30, usage=lambda: 0, sync="fsync")
        committer.start()
        first = asyncio.create_task(committer.append(_feedback(0)))
        await asyncio.to_thread(entered.wait, 5)  # the first batch is in the writer thread
        second = asyncio.create_task(committer.append(_feedback(1)))
        await asyncio.sleep(0)
        closing = asyncio.create_task(committer.close())
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, second, closing), 5)  # nobody left waiting

    asyncio.run(main())
    tokens = [r[0] for seg in sorted(tmp_path.glob("*.seg")) for r in read_frames(seg.read_bytes())[0]]
    assert tokens == ["tok-0", "tok-1"]
    assert not list(tmp_path.glob("*.open"))


def test_idle_ticks_hand_nothing_to_the_writer_thread_until_the_segment_is_due(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path, max_age_s=0.3)
    rotations: list[float] = []

    async def main() -> None:
        committer = GroupCommitter(writer, budget_bytes=10**9, usage=lambda: 0, flush_interval_s=0.01)
        original = committer._rotate

        def counting_rotate() -> Path | None:
            rotations.append(time.monotonic())
            return original()

        committer._rotate = counting_rotate  # type: ignore[method-assign]
        committer.start()
        await committer.append(_feedback(1))
        deadline = time.monotonic() + 5
        while not list(tmp_path.glob("*.seg")) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # idle ticks with no open segment
        await committer.close()

    asyncio.run(main())
    assert len(list(tmp_path.glob("*.seg"))) == 1  # sealed by age on an idle tick
    assert len(rotations) == 1  # ~50 idle ticks, one hand-off: the one that sealed
