"""The drift job's outputs: ``drift.json`` (schema_version 1) and a self-contained HTML page.

The page has no external scripts, styles or fonts: inline CSS and inline SVG only, so it
can be opened from an MLflow artifact, an e-mail attachment or the object store.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modelops.drift.stats import ColumnDrift, Curve, DriftComputation, DriftSummary, SideSummary, by_weighted_score

JSON_NAME = "drift.json"
HTML_NAME = "drift_report.html"
SCHEMA_VERSION = 1
_PLOT_POINTS = 400


# --------------------------------------------------------------------------------------------
# drift.json
# --------------------------------------------------------------------------------------------


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _side(side: SideSummary) -> dict[str, float | None]:
    return {"mean": _number(side.mean), "std": _number(side.std), "missing_rate": _number(side.missing_rate)}


def _column(column: ColumnDrift, *, feature: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": column.name,
        "ks": _number(column.ks),
        "p_value": _number(column.p_value),
        "drifted": column.drifted,
    }
    if feature:
        doc["sensitivity"] = column.sensitivity
        doc["weighted_score"] = _number(column.weighted_score)
    doc["baseline"] = _side(column.baseline)
    doc["current"] = _side(column.current)
    return doc


def to_json(summary: DriftSummary) -> dict[str, Any]:
    """The ``drift.json`` document; features in metadata order, the score without sensitivity."""
    return {
        "schema_version": SCHEMA_VERSION,
        "rows": {"baseline": summary.rows_baseline, "current": summary.rows_current},
        "sampled": summary.sampled,
        "threshold": summary.threshold,
        "drifted": summary.drifted,
        "features": [_column(f, feature=True) for f in summary.features],
        "score": _column(summary.score, feature=False),
        "top_causes": list(summary.top_causes),
    }


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:2rem;color:#1d2330}
h1{font-size:1.5rem;margin-bottom:.25rem}h2{font-size:1.15rem;margin-top:2rem}
.verdict{display:inline-block;padding:.4rem .8rem;border-radius:.3rem;font-weight:600;color:#fff}
.drifted{background:#c0392b}.stable{background:#27ae60}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #d5d9e0;padding:.25rem .5rem;text-align:right}
th{background:#f1f3f6}td.name,th.name{text-align:left}tr.hit td{background:#fdecea}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{border:1px solid #d5d9e0;padding:.5rem}
.muted{color:#687385;font-size:.85rem}code{background:#f1f3f6;padding:0 .2rem}
"""


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3):
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _feature_rows(columns: Sequence[ColumnDrift], causes: Sequence[str]) -> str:
    rows = []
    for rank, c in enumerate(columns, start=1):
        mark = ' class="hit"' if c.drifted else ""
        star = " ★" if c.name in causes else ""
        rows.append(
            f"<tr{mark}><td>{rank}</td><td class=name>{_esc(c.name)}{star}</td><td>{_fmt(c.ks)}</td>"
            f"<td>{_fmt(c.threshold, 3)}</td><td>{_fmt(c.p_value, 3)}</td>"
            f"<td>{'yes' if c.drifted else 'no'}</td>"
            f"<td>{_fmt(c.sensitivity, 2)}</td><td>{_fmt(c.weighted_score)}</td>"
            f"<td>{_fmt(c.baseline.mean)}</td><td>{_fmt(c.current.mean)}</td>"
            f"<td>{_fmt(c.baseline.std)}</td><td>{_fmt(c.current.std)}</td>"
            f"<td>{_fmt(c.baseline.missing_rate, 3)}</td><td>{_fmt(c.current.missing_rate, 3)}</td></tr>"
        )
    return "\n".join(rows)


_TABLE_HEAD = (
    "<tr><th>#</th><th class=name>feature</th><th>KS D</th><th>threshold</th><th>p-value</th><th>drifted</th>"
    "<th>sensitivity</th><th>weighted</th><th>mean (base)</th><th>mean (cur)</th><th>std (base)</th>"
    "<th>std (cur)</th><th>missing (base)</th><th>missing (cur)</th></tr>"
)


def ecdf_svg(name: str, curve: Curve, *, width: int = 420, height: int = 240) -> str:
    """Baseline (blue) and current (orange) ECDFs as one inline SVG.

    The x range is clipped to the central 99% of the pooled values so heavy tails stay readable.
    """
    x, fb, fc = curve.x, curve.baseline, curve.current
    if x.size == 0:
        return f"<div class=chart><b>{_esc(name)}</b><p class=muted>no values</p></div>"
    pooled = (fb + fc) / 2
    lo_i = int(np.searchsorted(pooled, 0.005, side="left"))
    hi_i = min(int(np.searchsorted(pooled, 0.995, side="left")), x.size - 1)
    lo_i = min(lo_i, hi_i)
    keep = np.unique(np.linspace(lo_i, hi_i, num=min(_PLOT_POINTS, hi_i - lo_i + 1)).astype(np.int64))
    xs, bs, cs = x[keep], fb[keep], fc[keep]
    x0, x1 = float(xs[0]), float(xs[-1])
    span = (x1 - x0) or 1.0
    pad_l, pad_b, pad_t, pad_r = 44, 28, 20, 10
    w, h = width - pad_l - pad_r, height - pad_b - pad_t

    def path(ys: np.ndarray[Any, Any]) -> str:
        px = pad_l + (xs - x0) / span * w
        py = pad_t + (1 - ys) * h
        parts = [f"M{pad_l:.1f},{pad_t + h:.1f}"]
        for a, b in zip(px.tolist(), py.tolist(), strict=True):
            parts.append(f"H{a:.1f}V{b:.1f}")
        parts.append(f"H{pad_l + w:.1f}")
        return "".join(parts)

    gap = int(np.argmax(np.abs(bs - cs)))
    gx = pad_l + (float(xs[gap]) - x0) / span * w
    return (
        f'<div class=chart><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="ECDF of {_esc(name)}">'
        f'<text x="{pad_l}" y="14" font-size="12" font-weight="600">{_esc(name)}</text>'
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="none" stroke="#d5d9e0"/>'
        f'<line x1="{gx:.1f}" x2="{gx:.1f}" y1="{pad_t}" y2="{pad_t + h}" '
        'stroke="#999" stroke-dasharray="3,3"/>'
        f'<path d="{path(bs)}" fill="none" stroke="#2e6fd8" stroke-width="1.5"/>'
        f'<path d="{path(cs)}" fill="none" stroke="#e67e22" stroke-width="1.5"/>'
        f'<text x="{pad_l - 4}" y="{pad_t + 4}" font-size="10" text-anchor="end">1</text>'
        f'<text x="{pad_l - 4}" y="{pad_t + h}" font-size="10" text-anchor="end">0</text>'
        f'<text x="{pad_l}" y="{height - 8}" font-size="10">{_esc(_fmt(x0))}</text>'
        f'<text x="{pad_l + w}" y="{height - 8}" font-size="10" text-anchor="end">{_esc(_fmt(x1))}</text>'
        f'<text x="{pad_l + w - 4}" y="{pad_t + h - 20}" font-size="10" text-anchor="end" '
        'fill="#2e6fd8">baseline</text>'
        f'<text x="{pad_l + w - 4}" y="{pad_t + h - 8}" font-size="10" text-anchor="end" '
        'fill="#e67e22">current</text>'
        "</svg></div>"
    )


def _section_body(content: Any) -> str:
    if isinstance(content, Mapping):
        rows = "".join(
            f"<tr><th class=name>{_esc(k)}</th><td class=name>{_cell(v)}</td></tr>"
            for k, v in content.items()
        )
        return f"<table>{rows}</table>"
    if isinstance(content, Sequence) and not isinstance(content, str | bytes):
        if content and all(isinstance(item, Mapping) for item in content):
            keys: list[str] = []
            for item in content:
                keys.extend(str(k) for k in item if str(k) not in keys)
            head = "".join(f"<th class=name>{_esc(k)}</th>" for k in keys)
            body = "".join(
                "<tr>" + "".join(f"<td class=name>{_cell(_lookup(item, k))}</td>" for k in keys) + "</tr>"
                for item in content
            )
            return f"<table><tr>{head}</tr>{body}</table>"
        return "<ul>" + "".join(f"<li>{_cell(item)}</li>" for item in content) + "</ul>"
    return f"<p>{_cell(content)}</p>"


def _lookup(item: Mapping[Any, Any], key: str) -> Any:
    for k, v in item.items():
        if str(k) == key:
            return v
    return ""


def _cell(value: Any) -> str:
    if isinstance(value, Mapping | list | tuple):
        return f"<code>{_esc(json.dumps(value, default=str, sort_keys=True))}</code>"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _esc(value)


def render_html(
    computation: DriftComputation, extra_sections: Mapping[str, Any] | None = None, *,
    baseline: str = "", current: str = "", charts: int = 3,
) -> str:
    """The report page: verdict, top causes, ECDF overlays, all features by weighted score, extras.

    Args:
        computation: the job's numbers.
        extra_sections: title -> content; content is text, a mapping (rendered as a two-column
            table), a list of mappings (a table) or a list of values (a bullet list).
        baseline: where the baseline came from (shown as is).
        current: where the current data came from.
        charts: how many drifted features get an ECDF overlay beside the score.
    """
    s = computation.summary
    causes = s.top_causes
    verdict = "DRIFT DETECTED" if s.drifted else "NO DRIFT"
    drifted = [f for f in by_weighted_score(s.features) if f.drifted]
    plotted = [s.score.name, *[f.name for f in drifted[:charts]]]
    charts_html = "".join(ecdf_svg(n, computation.curves[n]) for n in plotted if n in computation.curves)
    cause_items = "".join(
        f"<li><b>{_esc(c.name)}</b>: D={_fmt(c.ks)} × sensitivity {_fmt(c.sensitivity, 2)} = "
        f"{_fmt(c.weighted_score)} (threshold {_fmt(c.threshold, 3)})</li>"
        for name in causes for c in s.features if c.name == name
    ) or "<li>none</li>"
    score = s.score
    extras = "".join(
        f"<h2>{_esc(title)}</h2>{_section_body(content)}" for title, content in (extra_sections or {}).items()
    )
    sampled = " (uniform seeded samples of the larger side(s))" if s.sampled else ""
    n_drifted = sum(f.drifted for f in s.features)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>modelops drift report</title>
<style>{_CSS}</style></head><body>
<h1>Drift report</h1>
<p class=muted>baseline <code>{_esc(baseline)}</code> ({s.rows_baseline} rows) vs current
<code>{_esc(current)}</code> ({s.rows_current} rows){sampled}; two-sample Kolmogorov–Smirnov,
default threshold {_fmt(s.threshold, 3)}.</p>
<p><span class="verdict {'drifted' if s.drifted else 'stable'}" id=verdict>{verdict}</span>
&nbsp;{n_drifted} of {len(s.features)} features drifted; score D={_fmt(score.ks)}
({'drifted' if score.drifted else 'not drifted'}).</p>
<h2>Top causes</h2><ol id=top-causes>{cause_items}</ol>
<h2>ECDF: baseline vs current</h2><div class=charts>{charts_html}</div>
<h2>Score</h2><table>{_TABLE_HEAD}{_feature_rows([score], ())}</table>
<h2>All features, by weighted score (D × sensitivity)</h2>
<table id=features>{_TABLE_HEAD}{_feature_rows(by_weighted_score(s.features), causes)}</table>
{extras}
<p class=muted>p-values are asymptotic and reported only; a column drifts when D exceeds its threshold.</p>
</body></html>
"""


# --------------------------------------------------------------------------------------------
# writing (local directory or object store)
# --------------------------------------------------------------------------------------------


def _split_s3(uri: str) -> tuple[str, str]:
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def write_outputs(out_dir: str, document: Mapping[str, Any], page: str) -> tuple[str, str]:
    """Write ``drift.json`` and ``drift_report.html`` into ``out_dir``; return both locations.

    ``out_dir`` is a local directory (created; files replaced atomically) or an
    ``s3://``/``s3a://`` prefix in the configured object store.
    """
    payload = json.dumps(document, indent=2, allow_nan=False).encode()
    if out_dir.startswith(("s3://", "s3a://")):
        from modelops.objectstore import ObjectStore

        bucket, prefix = _split_s3(out_dir)
        store = ObjectStore.from_settings(bucket=bucket)
        keys = [f"{prefix}/{name}" if prefix else name for name in (JSON_NAME, HTML_NAME)]
        store.put_bytes(keys[0], payload, content_type="application/json")
        store.put_bytes(keys[1], page.encode(), content_type="text/html; charset=utf-8")
        scheme = out_dir.split("://", 1)[0]
        return f"{scheme}://{bucket}/{keys[0]}", f"{scheme}://{bucket}/{keys[1]}"
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / JSON_NAME, directory / HTML_NAME)
    for path, data in zip(paths, (payload, page.encode()), strict=True):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; reports are meant to be read
        os.replace(tmp, path)
    return str(paths[0]), str(paths[1])
