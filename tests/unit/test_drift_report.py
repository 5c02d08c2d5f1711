"""drift.json and the HTML report (modelops.drift.report), from hand-made drift numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from modelops.drift import report, stats
from modelops.drift.stats import Curve, DriftComputation, DriftSummary, Moments

SIDE_KEYS = {"mean", "std", "missing_rate"}
FEATURE_KEYS = {"name", "ks", "p_value", "drifted", "sensitivity", "weighted_score", "baseline", "current"}


def _column(name: str, ks: float | None, sensitivity: float | None, *, missing: int = 0) -> stats.ColumnDrift:
    base = Moments(1000, 1000, 1.0, 250.0)
    cur = Moments(1000, 1000 - missing, 1.5 if ks and ks > 0.05 else 1.0, 300.0)
    if missing == 1000:
        cur = Moments(1000, 0, 0.0, 0.0)
    return stats.column_drift(name, ks, base, cur, threshold=0.05, sensitivity=sensitivity)


def _curve(shift: float) -> Curve:
    x = np.linspace(-3, 3, 500)
    base = np.clip((x + 3) / 6, 0, 1)
    return Curve(x, base, np.clip((x + 3 - shift) / 6, 0, 1))


def _computation(*, drift: bool = True) -> DriftComputation:
    features = (
        _column("calm_a", 0.01, 0.5),
        _column("moved_b", 0.30 if drift else 0.02, 0.5),     # weighted 0.15
        _column("moved_c", 0.20 if drift else 0.03, 0.9),     # weighted 0.18
        _column("moved_d", 0.10 if drift else 0.01, 0.2),     # weighted 0.02
        _column("moved_e", 0.08 if drift else 0.01, 0.1),     # weighted 0.008 -> not in the top 3
        _column("empty_f", None, 0.4, missing=1000),
    )
    summary = DriftSummary(1000, 1000, True, 0.05, _column("score", 0.12 if drift else 0.01, None), features)
    curves = {c.name: _curve(c.ks or 0.0) for c in (summary.score, *features) if c.ks is not None}
    return DriftComputation(summary, curves)


def test_json_has_exactly_the_documented_shape() -> None:
    doc = report.to_json(_computation().summary)
    assert set(doc) == {"schema_version", "rows", "sampled", "threshold", "drifted", "features", "score", "top_causes"}
    assert doc["schema_version"] == 1 and doc["rows"] == {"baseline": 1000, "current": 1000}
    assert doc["sampled"] is True and doc["threshold"] == 0.05 and doc["drifted"] is True
    assert [f["name"] for f in doc["features"]] == ["calm_a", "moved_b", "moved_c", "moved_d", "moved_e", "empty_f"]
    for feature in doc["features"]:
        assert set(feature) == FEATURE_KEYS
        assert set(feature["baseline"]) == SIDE_KEYS and set(feature["current"]) == SIDE_KEYS
    assert set(doc["score"]) == FEATURE_KEYS - {"sensitivity", "weighted_score"}
    assert doc["top_causes"] == ["moved_c", "moved_b", "moved_d"]
    moved_c = doc["features"][2]
    assert moved_c["weighted_score"] == pytest.approx(0.18) and moved_c["drifted"] is True
    empty = doc["features"][5]
    assert empty["ks"] is None and empty["p_value"] is None and empty["drifted"] is False
    assert empty["current"] == {"mean": None, "std": None, "missing_rate": 1.0}
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN or infinity


def test_json_verdict_without_drift() -> None:
    doc = report.to_json(_computation(drift=False).summary)
    assert doc["drifted"] is False and doc["top_causes"] == []


def test_html_is_self_contained_with_verdict_causes_table_and_charts() -> None:
    page = report.render_html(_computation(), baseline="/data/base", current="/data/cur")
    assert "DRIFT DETECTED" in page
    causes = re.search(r"<ol id=top-causes>(.*?)</ol>", page, re.S)
    assert causes is not None
    assert [m for m in re.findall(r"<b>([a-z_]+)</b>", causes.group(1))] == ["moved_c", "moved_b", "moved_d"]
    table = re.search(r"<table id=features>(.*?)</table>", page, re.S)
    assert table is not None
    order = re.findall(r"<td class=name>([a-z_]+)", table.group(1))
    assert order == ["moved_c", "moved_b", "moved_d", "moved_e", "calm_a", "empty_f"]
    # ECDF overlays: the score and the three top drifted features, inline SVG
    assert page.count("<svg") == 4
    assert 'aria-label="ECDF of score"' in page and 'aria-label="ECDF of moved_c"' in page
    # nothing is fetched from elsewhere
    for pattern in (r"<script", r"<link", r"\bsrc=", r"@import", r"url\(", r"https?://(?!www\.w3\.org/2000/svg)"):
        assert not re.search(pattern, page), pattern


def test_html_without_drift_says_so() -> None:
    page = report.render_html(_computation(drift=False))
    assert "NO DRIFT" in page and "DRIFT DETECTED" not in page
    assert "<ol id=top-causes><li>none</li></ol>" in page
    assert page.count("<svg") == 1  # only the score


def test_extra_sections_are_rendered_and_escaped() -> None:
    extras = {
        "Feature contract (GX)": {"success": False, "evaluated": 130, "failed": 2},
        "Failed expectations": [
            {"expectation": "expect_column_values_to_not_be_null", "column": "item_price", "unexpected": 12},
            {"expectation": "expect_column_values_to_be_between", "column": "user_age_days"},
        ],
        "Notes <script>alert(1)</script>": "checked <b>at</b> 02:00",
        "Runs": ["run-1", "run-2"],
    }
    page = report.render_html(_computation(), extras)
    assert "<h2>Feature contract (GX)</h2>" in page
    assert "<th class=name>evaluated</th><td class=name>130</td>" in page
    assert "<td class=name>no</td>" in page  # booleans read as yes/no
    assert "<th class=name>unexpected</th>" in page and "<td class=name>item_price</td>" in page
    assert "<li>run-2</li>" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "checked &lt;b&gt;at&lt;/b&gt; 02:00" in page


def test_write_outputs_replaces_both_files(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "dt=2026-11-28"
    first = report.write_outputs(str(out), {"schema_version": 1, "drifted": True}, "<html>1</html>")
    assert first == (str(out / "drift.json"), str(out / "drift_report.html"))
    second = report.write_outputs(str(out), {"schema_version": 1, "drifted": False}, "<html>2</html>")
    assert first == second
    assert json.loads((out / "drift.json").read_text())["drifted"] is False
    assert (out / "drift_report.html").read_text() == "<html>2</html>"
    assert sorted(p.name for p in out.iterdir()) == ["drift.json", "drift_report.html"]  # no temp files left


def test_ecdf_svg_handles_an_empty_curve() -> None:
    empty = Curve(np.empty(0), np.empty(0), np.empty(0))
    assert "no values" in report.ecdf_svg("x", empty)
