"""Notification messages: pure formatting, one place for every event the platform announces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["info", "success", "warning", "failure"]


@dataclass(frozen=True)
class Message:
    """One notification. ``key`` identifies the event so it is sent once, not once per interval."""

    title: str
    body: str
    severity: Severity = "info"
    key: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        lines = [self.body]
        if self.facts:
            width = max(len(k) for k in self.facts)
            lines += ["", *(f"{k.ljust(width)}  {v}" for k, v in self.facts.items())]
        return "\n".join(lines)


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A plain-text table for message bodies and task logs."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
