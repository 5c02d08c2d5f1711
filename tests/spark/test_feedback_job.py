"""The feedback-join Spark job against the pure-Python reference, on the same generated data."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from modelops.errors import ContractError, ModelopsError
from modelops.feedback.definitions import result_document, utc
from modelops.feedback.job import run_feedback_join
from modelops.feedback.reference import FeedbackEvent, Prediction, reference_join
from modelops.records import FEEDBACK, PREDICTIONS, partition_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(hours=6)
US = timedelta(microseconds=1)
VERSIONS = (("ranker", 1), ("ranker", 2), ("reco", 7))


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from modelops.spark import spark_session

    session = spark_session("test-feedback-job", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def generate(seed: int, window: timedelta) -> tuple[list[Prediction], list[FeedbackEvent]]:
    """Predictions around the run and events of every kind, with exact boundary cases."""
    rng = random.Random(seed)
    span = int((END - START + 4 * timedelta(hours=1)) / US)
    preds: list[Prediction] = []
    for i in range(400):
        at = START - 2 * timedelta(hours=1) + rng.randrange(span) * US
        model, version = rng.choice(VERSIONS)
        preds.append(Prediction(f"tok{i:04d}", at, model, version))
    preds.append(Prediction("tok0001", preds[1].ts - timedelta(minutes=5), "reco", 7))  # re-logged token
    preds.append(Prediction(None, START + timedelta(hours=1), "ranker", 1))  # no token: an impression only
    preds.append(Prediction("at-start", START, "ranker", 2))
    preds.append(Prediction("at-end", END, "ranker", 2))  # not in the run

    events: list[FeedbackEvent] = []

    def add(token: str | None, action: str | None, ts: datetime | None) -> None:
        received = None if ts is None or rng.random() < 0.1 else ts + rng.randrange(5_000_000) * US
        events.append(FeedbackEvent(token, action, ts, received))

    for p in rng.sample(preds[:400], 300):
        assert p.ts is not None and p.feedback_token is not None
        for action in rng.sample(("click", "purchase", "skip"), rng.randint(1, 2)):
            kind = rng.random()
            if kind < 0.70:
                add(p.feedback_token, action, p.ts + rng.randrange(int(window / US) + 1) * US)
            elif kind < 0.75:
                add(p.feedback_token, action, p.ts + window)  # last instant inside
            elif kind < 0.80:
                add(p.feedback_token, action, p.ts + window + US)
            elif kind < 0.85:
                add(p.feedback_token, action, p.ts - timedelta(seconds=1))
            elif kind < 0.88:
                add(p.feedback_token, action, p.ts)
            elif kind < 0.91:
                add(p.feedback_token, action.upper(), p.ts + US)
            else:
                add(f"unknown-{rng.randrange(10**6)}", action, p.ts + US)
    for e in rng.sample(events, 60):  # copies: some identical, some a little later
        shift = 0 if rng.random() < 0.5 else rng.randrange(1, 60) * 1_000_000
        events.append(FeedbackEvent(e.feedback_token, e.action, e.ts and e.ts + shift * US, e.received_at))
    events += [
        FeedbackEvent(None, "click", START, None),
        FeedbackEvent("", "click", START, None),
        FeedbackEvent("tok0002", None, START, None),
        FeedbackEvent("tok0002", "click", None, START),
        FeedbackEvent("at-start", "click", START + window, None),
        FeedbackEvent("at-end", "click", END + US, None),
    ]
    rng.shuffle(events)
    return preds, events


def write_log(rows: list[dict[str, object]], schema: pa.Schema, root: Path, by: str, *, partitioned: bool) -> str:
    """Write rows as Parquet: a dt=/hour= tree (partitioned by ``by``) or one file."""
    table = pa.Table.from_pylist(rows, schema=schema)
    if not partitioned:
        root.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root)
        return str(root)
    groups: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        when = row[by] if row[by] is not None else START
        assert isinstance(when, datetime)
        groups.setdefault(partition_path(str(root), when), []).append(row)
    for folder, part in groups.items():
        Path(folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(part, schema=schema), Path(folder) / "part-0.parquet")
    return str(root)


def write_inputs(
    tmp: Path, preds: list[Prediction], events: list[FeedbackEvent], *, partitioned: bool
) -> tuple[str, str]:
    pred_rows: list[dict[str, object]] = [
        {name: None for name in PREDICTIONS.names}
        | {"feedback_token": p.feedback_token, "ts": p.ts, "model": p.model, "model_version": p.model_version,
           "request_id": f"r{i}", "n_items": 3, "score_mean": 0.5}
        for i, p in enumerate(preds)
    ]
    event_rows: list[dict[str, object]] = [
        {"feedback_token": e.feedback_token, "action": e.action, "ts": e.ts, "received_at": e.received_at}
        for e in events
    ]
    suffix = "" if partitioned else ".parquet"
    return (
        write_log(pred_rows, PREDICTIONS, tmp / f"predictions{suffix}", "ts", partitioned=partitioned),
        write_log(event_rows, FEEDBACK, tmp / f"events{suffix}", "ts", partitioned=partitioned),
    )


def quarantine_rows(folder: Path) -> Counter[tuple[object, ...]]:
    table = pq.read_table(folder)
    return Counter(
        (r["feedback_token"], r["action"], r["ts"] and utc(r["ts"]), r["received_at"] and utc(r["received_at"]),
         r["reason"])
        for r in table.to_pylist()
    )


@pytest.mark.parametrize(("seed", "window_hours", "partitioned"), [(1, 24.0, True), (2, 1.5, False)])
def test_job_equals_reference(
    spark: SparkSession, tmp_path: Path, seed: int, window_hours: float, partitioned: bool
) -> None:
    preds, events = generate(seed, timedelta(hours=window_hours))
    pred_path, event_path = write_inputs(tmp_path, preds, events, partitioned=partitioned)
    expected = reference_join(preds, events, START, END, window_hours=window_hours)
    assert all(expected.rejected.values()), "the generated data should exercise every reason"

    out = tmp_path / "out"
    result = run_feedback_join(pred_path, event_path, START, END, str(out), window_hours=window_hours, spark=spark)

    assert result.rows == expected.rows
    assert result.rejected == expected.rejected
    document = json.loads(Path(result.json_path).read_text())
    assert document == result.document
    assert document == json.loads(json.dumps(result_document(
        start=START, end=END, window_hours=window_hours, rows=expected.rows, rejected=expected.rejected
    )))
    assert pq.read_table(result.parquet_path).to_pylist() == document["by_version"]
    assert quarantine_rows(result.quarantine_path) == Counter(
        (e.feedback_token, e.action, e.ts, e.received_at, r.value) for e, r in expected.quarantine
    )
    assert sorted(p.name for p in out.iterdir()) == ["ctr_cvr.json", "ctr_cvr.parquet", "quarantine"]


def test_rerun_overwrites_the_same_output(spark: SparkSession, tmp_path: Path) -> None:
    preds, events = generate(3, timedelta(hours=24))
    pred_path, event_path = write_inputs(tmp_path, preds, events, partitioned=True)
    out = tmp_path / "runs" / "2026-11-01"
    first = run_feedback_join(pred_path, event_path, START, END, str(out), spark=spark)
    json_before = Path(first.json_path).read_text()
    quarantine_before = quarantine_rows(first.quarantine_path)
    second = run_feedback_join(pred_path, event_path, START, END, str(out), spark=spark)
    assert Path(second.json_path).read_text() == json_before
    assert quarantine_rows(second.quarantine_path) == quarantine_before
    assert sorted(p.name for p in out.parent.iterdir()) == ["2026-11-01"]  # no staging left behind


def test_refuses_foreign_output_folder_and_missing_columns(spark: SparkSession, tmp_path: Path) -> None:
    preds, events = generate(4, timedelta(hours=24))
    pred_path, event_path = write_inputs(tmp_path, preds, events, partitioned=False)
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ModelopsError, match="refusing to replace"):
        run_feedback_join(pred_path, event_path, START, END, str(foreign), spark=spark)
    assert (foreign / "notes.txt").read_text() == "keep me"

    broken = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"feedback_token": ["a"], "ts": pa.array([START], FEEDBACK.field("ts").type)}), broken)
    with pytest.raises(ContractError, match=r"lack column\(s\) \['action'\]"):
        run_feedback_join(pred_path, str(broken), START, END, str(tmp_path / "o"), spark=spark)
