"""The outcome job against sklearn.metrics on the same joined rows, over three days of simulated time.

A binary classifier (two versions), a regressor, a multiclass classifier and a recommender without a
spec serve predictions for three days; labels arrive with delays of hours to days (some duplicated,
some dated before their prediction, some of the wrong form, some for predictions outside the run), and
actions come back for the recommender. The test joins the raw rows itself (the rules of
:mod:`modelops.feedback.outcome_metrics`) and computes every metric with ``sklearn.metrics`` and numpy;
the job's documents must give the same numbers. Then late labels for the first day arrive: the rerun
changes that day's numbers (and the same logs give the same documents again).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import (
    accuracy_score,
    brier_score_loss,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    roc_auc_score,
)

from modelops.feedback.declared import fixed
from modelops.feedback.job import run_feedback_join
from modelops.feedback.outcome_job import run_outcomes
from modelops.modelspec.spec import ModelSpec
from modelops.records import FEEDBACK, PREDICTIONS, partition_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

START = datetime(2026, 11, 1, tzinfo=UTC)
END = START + timedelta(days=3)
DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
CLASSES = ("low", "mid", "high")
BINARY = (("churn", 1), ("churn", 2))
NUMERIC, MULTI, RECO = ("price", 3), ("tiers", 1), ("reco", 7)


def _spec(name: str, outputs: list[int], label: dict[str, Any]) -> ModelSpec:
    return ModelSpec.from_dict({"name": name, "flavor": "onnx",
                                "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 4]}],
                                "outputs": [{"name": "out", "dtype": "FP32", "shape": outputs}],
                                "outcomes": {"label": label}})


SPECS = {
    **{v: _spec("churn", [-1, 2], {"kind": "binary", "delay_s": 86400}) for v in BINARY},
    NUMERIC: _spec("price", [-1, 1], {"kind": "numeric", "delay_s": 3600}),
    MULTI: _spec("tiers", [-1, 3], {"kind": "multiclass", "classes": list(CLASSES)}),
}


@dataclass
class World:
    """The raw rows of both logs, as the gateway would have written them."""

    preds: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def predict(self, token: str, ts: datetime, version: tuple[str, int], prediction: float | None = None,
                probabilities: list[float] | None = None) -> None:
        self.preds.append({name: None for name in PREDICTIONS.names} | {
            "request_id": token, "feedback_token": token, "ts": ts, "model": version[0], "model_version": version[1],
            "n_items": 1, "prediction": prediction, "probabilities": probabilities})

    def send(self, token: str, ts: datetime, *, action: str | None = None, label: str | None = None,
             value: float | None = None, received: datetime | None = None) -> None:
        self.events.append({"feedback_token": token, "action": action, "ts": ts, "label": label, "value": value,
                            "received_at": received or ts + timedelta(seconds=1)})


def simulate(seed: int) -> World:
    rng = np.random.default_rng(seed)
    world = World()
    span = int((END - START).total_seconds())

    def when(lo: datetime, hi_s: float) -> datetime:
        return lo + timedelta(microseconds=int(rng.uniform(0, hi_s) * 1e6))

    for i in range(900):
        version = BINARY[i % 2]
        ts = when(START - timedelta(hours=6), span + 12 * 3600)  # some before and after the run
        p = float(np.round(rng.beta(2, 2 + version[1]), 2))  # rounded: ties between scores
        world.predict(f"b{i}", ts, version, prediction=p if rng.random() > 0.05 else None)  # 5 %: several rows
        y = int(rng.random() < p)
        r = rng.random()
        delay = timedelta(seconds=float(rng.exponential(86400)))
        if r < 0.70:
            world.send(f"b{i}", ts + delay, label=str(y) if rng.random() < 0.9 else None,
                       value=None, received=ts + delay + timedelta(seconds=2))
            if world.events[-1]["label"] is None:
                world.events[-1]["value"] = float(y)  # a value for a binary label: not declared
        elif r < 0.75:
            world.send(f"b{i}", ts - timedelta(minutes=5), label=str(y))  # before its prediction
        if r < 0.10:  # a second label later: the first one counts
            world.send(f"b{i}", ts + delay + timedelta(hours=3), label=str(1 - y))
    for i in range(400):
        ts = when(START, span)
        truth = float(rng.normal(100, 20))
        pred = truth + float(rng.normal(0, 8))
        world.predict(f"n{i}", ts, NUMERIC, prediction=pred)
        if rng.random() < 0.8:
            world.send(f"n{i}", ts + timedelta(seconds=float(rng.exponential(3600))), value=truth)
    for i in range(300):
        ts = when(START, span)
        probs = [float(x) for x in rng.dirichlet([2.0, 1.0, 1.0])]
        world.predict(f"m{i}", ts, MULTI, probabilities=probs)
        if rng.random() < 0.7:
            world.send(f"m{i}", ts + timedelta(hours=float(rng.uniform(0, 30))),
                       label=CLASSES[int(rng.choice(3, p=probs))])
    for i in range(500):
        ts = when(START, span)
        world.predict(f"r{i}", ts, RECO)
        for action, share in (("click", 0.4), ("purchase", 0.15), ("skip", 0.3)):
            if rng.random() < share:
                late = rng.random() < 0.1  # outside the 24 h window
                world.send(f"r{i}", ts + timedelta(hours=float(rng.uniform(24.5, 30) if late else rng.uniform(0, 23))),
                           action=action)
    world.send("nobody", START + timedelta(hours=1), label="1")  # a token of no prediction
    return world


def write(world: World, root: Path, cutoff: datetime) -> tuple[str, list[str]]:
    """The prediction log as a dt=/hour= tree; events received before ``cutoff`` in two files: old and new schema."""
    for folder, rows in _by_hour(world.preds, root / "predictions").items():
        Path(folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=PREDICTIONS), Path(folder) / "part-0.parquet")
    events = [e for e in world.events if e["received_at"] < cutoff]
    old = [e for e in events if e["label"] is None and e["value"] is None][:40]  # written before labels existed
    new = [e for e in events if not any(e is o for o in old)]
    legacy = pa.schema([f for f in FEEDBACK if f.name not in ("label", "value")])
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{k: e[k] for k in legacy.names} for e in old], schema=legacy),
                   root / "events-old.parquet")
    pq.write_table(pa.Table.from_pylist(new, schema=FEEDBACK), root / "events-new.parquet")
    return str(root / "predictions"), [str(root / "events-old.parquet"), str(root / "events-new.parquet")]


def _by_hour(rows: list[dict[str, Any]], root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(partition_path(str(root), row["ts"]), []).append(row)
    return out


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from modelops.spark import spark_session

    session = spark_session("test-outcome-job", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def oracle(world: World, cutoff: datetime) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (model, version, day): the joined label rows, judged by sklearn.metrics and numpy."""
    preds = {p["feedback_token"]: p for p in world.preds if START <= p["ts"] < END}
    first: dict[str, dict[str, Any]] = {}
    for e in sorted((e for e in world.events if e["received_at"] < cutoff and e["action"] is None),
                    key=lambda e: (e["ts"], e["received_at"])):
        p = preds.get(e["feedback_token"])
        if p is None or e["ts"] < p["ts"] or e["feedback_token"] in first:
            continue
        kind = SPECS[(p["model"], p["model_version"])].outcomes.label.kind  # type: ignore[union-attr]
        if (kind == "numeric") != (e["value"] is not None):
            continue  # the wrong form for the declared label
        first[e["feedback_token"]] = e
    groups: dict[tuple[str, int, str], dict[str, Any]] = {}
    for p in preds.values():
        key = (p["model"], p["model_version"], p["ts"].date().isoformat())
        group = groups.setdefault(key, {"impressions": 0, "rows": []})
        group["impressions"] += 1
        if p["feedback_token"] in first:
            group["rows"].append((p, first[p["feedback_token"]]))
    out = {}
    for key, group in groups.items():
        rows = group["rows"]
        delays = [(e["ts"] - p["ts"]).total_seconds() for p, e in rows]
        result: dict[str, Any] = {"impressions": group["impressions"], "labelled": len(rows),
                                  "coverage": len(rows) / group["impressions"],
                                  "delay": np.percentile(delays, [50, 90]).tolist() if delays else [None, None]}
        if key[0] == "churn":
            scored = [(p["prediction"], int(e["label"])) for p, e in rows if p["prediction"] is not None]
            prob, y = np.array([s[0] for s in scored]), np.array([s[1] for s in scored])
            result["metrics"] = {"auc": roc_auc_score(y, prob), "log_loss": log_loss(y, prob, labels=[0, 1]),
                                 "accuracy": accuracy_score(y, (prob > 0.5).astype(int)),
                                 "brier": brier_score_loss(y, prob)}
            result["scored"] = len(scored)
        elif key[0] == "price":
            truth, pred = np.array([e["value"] for _, e in rows]), np.array([p["prediction"] for p, _ in rows])
            result["metrics"] = {"rmse": math.sqrt(mean_squared_error(truth, pred)),
                                 "mae": mean_absolute_error(truth, pred)}
        elif key[0] == "tiers":
            probs = np.array([p["probabilities"] for p, _ in rows])
            y = np.array([CLASSES.index(e["label"]) for _, e in rows])
            result["metrics"] = {"accuracy": accuracy_score(y, probs.argmax(axis=1)),
                                 "log_loss": log_loss(y, probs, labels=[0, 1, 2])}
        out[key] = result
    return out


def documents(out: Path) -> dict[tuple[str, int, str], dict[str, Any]]:
    found = {}
    for path in sorted(out.glob("dt=*/*.json")):
        doc = json.loads(path.read_text())
        assert path.parent.name == f"dt={doc['day']}" and path.stem == doc["model"]
        for entry in doc["versions"]:
            found[(doc["model"], entry["model_version"], doc["day"])] = entry
    return found


Keyed = dict[tuple[str, int, str], dict[str, Any]]


def check(found: Keyed, expected: Keyed) -> None:
    assert set(found) == set(expected)
    for key, want in expected.items():
        got = found[key]
        assert got["impressions"] == want["impressions"], key
        if key[0] == "reco":
            assert "label" not in got and set(got["actions"]) == {"click", "purchase", "skip"}
            continue
        label = got["label"]
        assert (label["labelled"], label["coverage"]) == (want["labelled"], pytest.approx(want["coverage"])), key
        assert [label["delay_p50_s"], label["delay_p90_s"]] == pytest.approx(want["delay"], rel=1e-9), key
        if "scored" in want:
            assert label["scored"] == want["scored"], key
        assert label["metrics"] == pytest.approx(want["metrics"], rel=1e-9, abs=1e-12), key


def test_realized_performance_equals_sklearn_and_late_labels_update_earlier_days(spark: SparkSession,
                                                                                 tmp_path: Path) -> None:
    world = simulate(11)
    first_cutoff = END + timedelta(hours=6)
    preds, events = write(world, tmp_path / "logs1", first_cutoff)
    out = tmp_path / "outcomes"
    result = run_outcomes(preds, events, START, END, str(out), specs=fixed(SPECS), spark=spark)
    before = documents(out)
    expected = oracle(world, first_cutoff)
    check(before, expected)
    assert {k[0] for k in before} == {"churn", "price", "tiers", "reco"} and len(result.documents) == 12
    churn = before[("churn", 1, DAYS[1])]["label"]["rejected"]
    assert churn["before_prediction"] > 0 and churn["duplicate"] > 0 and churn["not_declared"] > 0

    # The recommender's action rates are the CTR join's numbers for the same day and events.
    day = START + timedelta(days=1)
    join = run_feedback_join(preds, events, day, day + timedelta(days=1), str(tmp_path / "ctr"), spark=spark)
    reco = next(r for r in join.rows if (r.model, r.model_version) == RECO)
    entry = before[(*RECO, DAYS[1])]
    assert (entry["ctr"], entry["cvr"], entry["actions"]["click"]["count"]) == (reco.ctr, reco.cvr, reco.clicked)
    assert entry["actions"]["skip"]["count"] == reco.skipped

    # Late labels of the first day's predictions arrive; the rerun over all labels so far moves that day.
    late = [p for p in world.preds if p["model"] == "churn" and p["ts"].date().isoformat() == DAYS[0]
            and p["prediction"] is not None and not any(e["feedback_token"] == p["feedback_token"]
                                                        for e in world.events)][:25]
    assert len(late) == 25
    for p in late:
        world.send(p["feedback_token"], END + timedelta(days=2), label="1",
                   received=END + timedelta(days=2, seconds=5))
    second_cutoff = END + timedelta(days=3)
    preds, events = write(world, tmp_path / "logs2", second_cutoff)
    run_outcomes(preds, events, START, END, str(out), specs=fixed(SPECS), spark=spark)
    after = documents(out)
    check(after, oracle(world, second_cutoff))
    for version in BINARY:
        key = (*version, DAYS[0])
        assert after[key]["label"]["labelled"] > before[key]["label"]["labelled"]
        assert after[key]["label"]["metrics"] != before[key]["label"]["metrics"]
    assert after[(*NUMERIC, DAYS[0])] == before[(*NUMERIC, DAYS[0])]

    texts = {p: p.read_text() for p in out.glob("dt=*/*.json")}
    run_outcomes(preds, events, START, END, str(out), specs=fixed(SPECS), spark=spark)
    assert {p: p.read_text() for p in out.glob("dt=*/*.json")} == texts  # a rerun: the same documents
