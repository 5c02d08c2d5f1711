"""A small parser of the Prometheus text exposition format (version 0.0.4).

The canary needs only samples: name, labels, value. Comments (``# HELP``, ``# TYPE``) and
timestamps are skipped; label values are unescaped (``\\\\``, ``\\"``, ``\\n``); ``NaN``,
``+Inf`` and ``-Inf`` are read as floats.

Why not ``prometheus_client.parser`` (a dependency now): tried, and it does not meet the
need. It renames every sample of a ``counter`` family that lacks the ``_total`` suffix —
all of Triton's (``nv_inference_request_success`` becomes ``..._success_total``) — so the
scrape source would name series differently from what Prometheus stores and the PromQL
source queries; its errors carry no line number; and it took 4.0x as long on the
gateway's and Triton's captured documents (96 samples: 1.49 ms against 0.37 ms, best of 5 × 50;
2026-12-02). tests/unit/test_canary_sources.py fails three cases with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from modelops.errors import ContractError

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

_SPECIAL = {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf}


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels sorted by name, value."""

    name: str
    labels: Labels
    value: float

    @property
    def key(self) -> SeriesKey:
        return self.name, self.labels

    def label(self, name: str, default: str = "") -> str:
        return next((v for k, v in self.labels if k == name), default)


def _value(raw: str, line_no: int) -> float:
    if raw in _SPECIAL:
        return _SPECIAL[raw]
    try:
        return float(raw)
    except ValueError as exc:
        raise ContractError(f"metrics line {line_no}: value {raw!r} is not a number (example: 12 or 1.5e-3)") from exc


def _labels(text: str, start: int, line_no: int) -> tuple[Labels, int]:
    """Parse ``{a="x",b="y"}`` starting at the ``{``; return the labels and the index after ``}``."""
    pairs: list[tuple[str, str]] = []
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] in " ,":
            i += 1
        if i < n and text[i] == "}":
            return tuple(sorted(pairs)), i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            raise ContractError(f"metrics line {line_no}: bad label set {text[start:]!r} "
                                '(example: {model="rec",version="3"})')
        name = text[i:eq].strip()
        i = eq + 2
        chars: list[str] = []
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                nxt = text[i + 1]
                chars.append("\n" if nxt == "n" else nxt)
                i += 2
            else:
                chars.append(text[i])
                i += 1
        if i >= n:
            raise ContractError(f"metrics line {line_no}: unterminated label value in {text!r}")
        pairs.append((name, "".join(chars)))
        i += 1


def parse(text: str) -> Iterator[Sample]:
    """Yield every sample of a ``/metrics`` document.

    Raises:
        ContractError: a line is not in the text format (names the line number).
    """
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name = line[:brace]
            labels, end = _labels(line, brace, line_no)
            rest = line[end:].split()
        else:
            name, *rest = line.split()
            labels = ()
        if not name or not rest:
            raise ContractError(f"metrics line {line_no}: expected 'name{{labels}} value', got {raw!r}")
        yield Sample(name, labels, _value(rest[0], line_no))


def parse_series(text: str) -> dict[SeriesKey, float]:
    """All samples of a document keyed by (name, labels)."""
    return {s.key: s.value for s in parse(text)}
