"""The outcome job's pure parts: metric definitions against sklearn, documents, declarations, pushes, old records."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from modelops.feedback.declared import Declaration, declarations, fixed, spec_location
from modelops.feedback.outcome_metrics import (
    DELAY_QUANTILES,
    OutcomeSums,
    auc_sum,
    binary_log_loss,
    covered_days,
    delay_percentiles,
    outcome_document,
    performance,
    quantile_from_ranks,
    version_entry,
)
from modelops.gateway.logs.eventlog import convert_feedback, convert_predictions, feedback_record, to_us
from modelops.modelspec.spec import Label, ModelSpec, Outcomes
from modelops.observability.pushed import PUSHED_METRICS, outcome_groups
from modelops.records import ACTIONS, FEEDBACK, PREDICTIONS
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_reconcile import spec_key


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_binary_metrics_from_sums_equal_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(300), 1)  # many ties
    p[:3] = [0.0, 1.0, 0.5]  # clipped log loss; 0.5 is class 0
    y = rng.random(300) < p
    sums = OutcomeSums("m", 1, "2026-11-01", impressions=400, labelled=300, scored=300, positives=int(y.sum()),
                       correct=int(((p > 0.5) == y).sum()), log_loss_sum=float(binary_log_loss(p, y).sum()),
                       squared_sum=float(((p - y) ** 2).sum()), auc_sum=auc_sum(p, y))
    got = performance("binary", sums)
    assert got == pytest.approx({"auc": roc_auc_score(y, p), "log_loss": log_loss(y, p),
                                 "accuracy": float(((p > 0.5) == y).mean()), "brier": brier_score_loss(y, p)},
                                rel=1e-12)


def test_performance_without_rows_or_one_class_is_none() -> None:
    empty = OutcomeSums("m", 1, "2026-11-01", impressions=5)
    assert performance("binary", empty) == {"auc": None, "log_loss": None, "accuracy": None, "brier": None}
    assert performance("numeric", empty) == {"rmse": None, "mae": None}
    one_class = OutcomeSums("m", 1, "d", impressions=5, scored=2, positives=2, correct=2, auc_sum=0.0)
    assert performance("binary", one_class)["auc"] is None
    regression = OutcomeSums("m", 1, "d", impressions=4, scored=4, squared_sum=16.0, absolute_sum=6.0)
    assert performance("numeric", regression) == {"rmse": 2.0, "mae": 1.5}


def test_delay_percentiles_interpolate_linearly() -> None:
    assert delay_percentiles([10.0, 20.0, 30.0, 40.0]) == (25.0, pytest.approx(37.0))
    assert delay_percentiles([]) == (None, None)


@pytest.mark.parametrize("n", [1, 2, 5, 10, 11, 1000])
def test_quantiles_from_their_two_ranks_equal_numpy(n: int) -> None:
    values = np.sort(np.random.default_rng(n).exponential(3600.0, size=n))
    for q in DELAY_QUANTILES:
        h = q * (n - 1)
        ranks = {math.floor(h): float(values[math.floor(h)]), math.ceil(h): float(values[math.ceil(h)])}
        assert quantile_from_ranks(ranks, n, q) == pytest.approx(float(np.percentile(values, 100 * q)), rel=1e-12)
    assert quantile_from_ranks({}, 0, 0.5) is None


def test_covered_days_end_with_the_day() -> None:
    assert covered_days("2026-11-07", 7) == (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 8, tzinfo=UTC))
    with pytest.raises(ValueError, match="outcome days must be >= 1"):
        covered_days("2026-11-07", 0)
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        covered_days("07/11/2026", 1)


def test_version_entry_and_document() -> None:
    sums = OutcomeSums("reco", 7, "2026-11-01", impressions=10, acted={"click": 4, "purchase": 2, "skip": 1},
                       converted=1)
    entry = version_entry(sums, ACTIONS, None)
    assert entry["actions"]["click"] == {"count": 4, "rate": 0.4} and (entry["ctr"], entry["cvr"]) == (0.4, 0.25)
    assert "label" not in entry
    labelled = OutcomeSums("churn", 2, "2026-11-01", impressions=10, labelled=4, scored=4, positives=2, correct=3,
                           log_loss_sum=2.0, squared_sum=0.5, auc_sum=3.0, delay_p50_s=60.0, delay_p90_s=600.0,
                           rejected={"duplicate": 1})
    label = version_entry(labelled, (), "binary")["label"]
    assert label["coverage"] == 0.4 and label["metrics"] == {"auc": 0.75, "log_loss": 0.5, "accuracy": 0.75,
                                                             "brier": 0.125}
    assert label["rejected"] == {"before_prediction": 0, "duplicate": 1, "not_declared": 0}
    doc = outcome_document(model="churn", day="2026-11-01", entries=[version_entry(labelled, (), "binary"), entry],
                           start=datetime(2026, 11, 1, tzinfo=UTC), end=datetime(2026, 11, 8, tzinfo=UTC),
                           window_hours=24.0)
    assert [v["model_version"] for v in doc["versions"]] == [2, 7] and doc["run"]["end"] == "2026-11-08T00:00:00Z"
    groups = outcome_groups([doc])
    assert [dict(g.grouping) for g in groups] == [{"model": "churn", "version": v} for v in ("2", "7")]
    names = {m.name for g in groups for m in g.registry.collect()}
    assert names <= PUSHED_METRICS
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in groups[0].registry.collect()
               for s in m.samples}
    assert samples[("modelops_outcome_performance", (("day", "2026-11-01"), ("metric", "auc")))] == 0.75


def test_declarations_from_specs_and_the_spec_layout() -> None:
    spec = ModelSpec.from_dict({"name": "tiers", "flavor": "onnx",
                                "inputs": [{"name": "x", "dtype": "FP32", "shape": [-1, 2]}],
                                "outputs": [{"name": "y", "dtype": "FP32", "shape": [-1, 3]}],
                                "outcomes": {"label": {"kind": "multiclass", "classes": ["a", "b", "c"]}}})
    found = declarations([("tiers", 1), ("reco", 7), (None, 3)], fixed({("tiers", 1): spec}))
    assert found == {("tiers", 1): Declaration((), "multiclass", ("a", "b", "c")), ("reco", 7): Declaration(ACTIONS)}
    assert Declaration.of(Outcomes(actions=("open",), label=Label(kind="numeric"))) == Declaration(("open",), "numeric")
    assert spec_location("s3://modelops/" + REPOSITORY_PREFIX.rstrip("/"), "tiers", 4) == \
        "s3://modelops/" + spec_key("tiers", 4)


def test_records_spooled_before_labels_convert_with_null_labels() -> None:
    ts = datetime(2026, 11, 1, 10, tzinfo=UTC).timestamp()
    old = ["tok", "click", to_us(ts), to_us(ts + 1)]  # a segment written by the gateway before labels
    new = feedback_record(feedback_token="tok2", action=None, ts=ts, received_at=ts + 2, label="1")
    (table,) = [pq.read_table(pa.BufferReader(data)) for data in convert_feedback([old, new]).values()]
    assert table.schema.equals(FEEDBACK)
    assert table.to_pydict()["label"] == [None, "1"] and table.to_pydict()["action"] == ["click", None]
    prediction = ["r", "t", to_us(ts), "m", 1, "s", "u", 1, 0.5, 0.5, 0.0, 1.0, "none"]
    (preds,) = [pq.read_table(pa.BufferReader(d)) for d in convert_predictions([prediction]).values()]
    assert preds.schema.equals(PREDICTIONS) and preds.to_pydict()["prediction"] == [None]
    assert not math.isnan(preds.to_pydict()["score_mean"][0])
