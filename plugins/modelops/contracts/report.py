"""A self-contained HTML page for a validation result (the "Data Docs" stored in MLflow).

GX's own page renderer (``ValidationResultsPageRenderer`` + ``DefaultJinjaPageView``)
works in an ephemeral context, but its page loads Bootstrap, jQuery and Vega from
CDNs, so it is unstyled offline and not self-contained. This page has inline CSS and
no scripts: failed expectations first, then all of them.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable

from modelops.contracts.validation import ExpectationOutcome, ValidationReport

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1d232a}
h1{font-size:1.4rem;margin-bottom:.2rem} h2{font-size:1.1rem;margin-top:2rem}
.verdict{display:inline-block;padding:.2rem .6rem;border-radius:.3rem;font-weight:600;color:#fff}
.pass{background:#2e7d32} .fail{background:#c62828}
table{border-collapse:collapse;width:100%;font-size:.85rem;margin-top:.5rem}
th,td{border-bottom:1px solid #dde1e6;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f5f7;position:sticky;top:0} tr.failed td{background:#fdecea}
td.num{text-align:right;font-variant-numeric:tabular-nums} code{font-size:.8rem;word-break:break-all}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;font-size:.9rem} dt{color:#5f6b7a}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _rows(outcomes: Iterable[ExpectationOutcome]) -> str:
    out: list[str] = []
    for o in outcomes:
        kwargs = {k: v for k, v in o.kwargs.items() if k != "column"}
        detail = ", ".join(o.examples) or (o.observed_value or "")
        if o.exception:
            detail = f"error: {o.exception}"
        out.append(
            f'<tr class="{"passed" if o.success else "failed"}">'
            f"<td>{_e(o.expectation)}</td><td>{_e(o.column or '')}</td>"
            f"<td>{'✔' if o.success else '✘'}</td>"
            f'<td class="num">{"" if o.unexpected_count is None else o.unexpected_count}</td>'
            f'<td class="num">{"" if o.unexpected_percent is None else f"{o.unexpected_percent:.3g}"}</td>'
            f"<td><code>{_e(detail)}</code></td>"
            f"<td><code>{_e(json.dumps(kwargs, default=str))}</code></td></tr>"
        )
    return "\n".join(out)


def _table(outcomes: Iterable[ExpectationOutcome]) -> str:
    return (
        "<table><thead><tr><th>expectation</th><th>column</th><th>ok</th><th>unexpected</th>"
        "<th>unexpected %</th><th>examples / observed</th><th>arguments</th></tr></thead>"
        f"<tbody>{_rows(outcomes)}</tbody></table>"
    )


def render_html(report: ValidationReport, *, title: str | None = None) -> str:
    """The whole page as one string (inline CSS, no external resources, no scripts)."""
    title = title or f"Validation of suite {report.suite}"
    stats = report.statistics
    facts = {
        "suite": report.suite,
        "engine": report.engine,
        "rows": "" if report.row_count is None else report.row_count,
        "expectations": stats.get("evaluated_expectations", len(report.outcomes)),
        "passed": stats.get("successful_expectations", ""),
        "failed": stats.get("unsuccessful_expectations", len(report.failed)),
        "success %": stats.get("success_percent", ""),
    }
    verdict = (
        '<span class="verdict pass">PASSED</span>'
        if report.success
        else '<span class="verdict fail">FAILED</span>'
    )
    failed = report.failed
    failed_section = f"<h2>Failed expectations ({len(failed)})</h2>{_table(failed)}" if failed else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{verdict}"
        "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts.items()) + "</dl>"
        f"{failed_section}<h2>All expectations ({len(report.outcomes)})</h2>{_table(report.outcomes)}"
        "</body></html>"
    )
