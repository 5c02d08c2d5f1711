"""The shadow phase's measurement: the gateways' shadow series over a window, from either metrics source.

The gateway counts its mirrored calls per model and shadow version (:mod:`modelops.gateway.shadow.mirror`);
this module reads them over the same window the canary measures (between the same two markers):
with :class:`~modelops.canary.sources.ScrapeSource` from the two snapshots (the series are kept by
its scrape, differenced with its counter-reset handling), with
:class:`~modelops.canary.sources.PrometheusSource` by PromQL ``increase()`` over the window.

=================================================================  ===========================================
``modelops_gateway_shadow_mirrored_total``                         mirrored calls started
``modelops_gateway_shadow_dropped_total``                          not mirrored (budget, signature)
``modelops_gateway_shadow_answers_total{outcome}``                 ok / upstream, timeout, mismatch (errors)
``modelops_gateway_shadow_call_seconds_bucket{role}``              call time, candidate and stable
``modelops_gateway_shadow_divergence_bucket{measure}``             |Δ| (abs) and relative |Δ| (rel)
``modelops_gateway_shadow_compared_total{measure}``                ranked requests (topk), rows (class)
``modelops_gateway_shadow_disagreements_total{measure}``           those whose order or class changed
=================================================================  ===========================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from modelops.canary.measurement import Buckets, ShadowWindow
from modelops.canary.sources import SHADOW_PREFIX, PrometheusSource, ScrapeSource, Series, Snapshot, deltas

MIRRORED = f"{SHADOW_PREFIX}mirrored_total"  # every name under the prefix the scrape keeps
DROPPED = "modelops_gateway_shadow_dropped_total"
ANSWERS = "modelops_gateway_shadow_answers_total"
CALL = "modelops_gateway_shadow_call_seconds"
DIVERGENCE = "modelops_gateway_shadow_divergence"
COMPARED = "modelops_gateway_shadow_compared_total"
DISAGREEMENTS = "modelops_gateway_shadow_disagreements_total"
NAMES = frozenset({MIRRORED, DROPPED, ANSWERS, f"{CALL}_bucket", f"{CALL}_count", f"{DIVERGENCE}_bucket",
                   f"{DIVERGENCE}_count", COMPARED, DISAGREEMENTS})
"""The series the canary's scrape keeps for the shadow phase (added to :mod:`modelops.canary.sources`' own)."""
ERROR_OUTCOMES = ("upstream", "timeout", "mismatch")

Row = tuple[Mapping[str, str], float]


def _bound(le: str) -> float:
    return math.inf if le in {"+Inf", "Inf"} else float(le)


def window_of(rows: Mapping[str, Sequence[Row]]) -> ShadowWindow:
    """A shadow window from rows by series name (labels without model/version, value over the window)."""
    def total(name: str, **want: str) -> float:
        return sum(v for labels, v in rows.get(name, ()) if all(labels.get(k) == x for k, x in want.items()))

    def buckets(name: str, label: str, value: str) -> Buckets:
        acc: dict[float, float] = {}
        for labels, v in rows.get(f"{name}_bucket", ()):
            if labels.get(label) == value:
                bound = _bound(labels.get("le", "+Inf"))
                acc[bound] = acc.get(bound, 0.0) + v
        return tuple(sorted(acc.items()))

    return ShadowWindow(
        mirrored=total(MIRRORED), dropped=total(DROPPED), answered=total(ANSWERS, outcome="ok"),
        errors=sum(total(ANSWERS, outcome=o) for o in ERROR_OUTCOMES),
        candidate_buckets=buckets(CALL, "role", "candidate"), stable_buckets=buckets(CALL, "role", "stable"),
        abs_buckets=buckets(DIVERGENCE, "measure", "abs"), rel_buckets=buckets(DIVERGENCE, "measure", "rel"),
        topk_compared=total(COMPARED, measure="topk"), topk_changed=total(DISAGREEMENTS, measure="topk"),
        class_compared=total(COMPARED, measure="class"), class_changed=total(DISAGREEMENTS, measure="class"))


def from_series(gateway: Iterable[Series], model: str, version: int) -> ShadowWindow:
    """The shadow window of ``version`` from per-gateway counter deltas (summed over the gateways)."""
    rows: dict[str, list[Row]] = {}
    for series in gateway:
        for (name, labels), value in series.items():
            got = dict(labels)
            if name in NAMES and got.get("model") == model and got.get("version") == str(version):
                rows.setdefault(name, []).append((got, value))
    return window_of(rows)


def promql(model: str, version: int, range_s: str) -> dict[str, str]:
    """The PromQL of one shadow window by series name (``range_s``: a PromQL duration, e.g. ``5s``)."""
    sel = f'model="{model}",version="{version}"'
    r = f"[{range_s}]"
    return {MIRRORED: f"sum(increase({MIRRORED}{{{sel}}}{r}))",
            DROPPED: f"sum(increase({DROPPED}{{{sel}}}{r}))",
            ANSWERS: f"sum by (outcome) (increase({ANSWERS}{{{sel}}}{r}))",
            f"{CALL}_bucket": f"sum by (role, le) (increase({CALL}_bucket{{{sel}}}{r}))",
            f"{DIVERGENCE}_bucket": f"sum by (measure, le) (increase({DIVERGENCE}_bucket{{{sel}}}{r}))",
            COMPARED: f"sum by (measure) (increase({COMPARED}{{{sel}}}{r}))",
            DISAGREEMENTS: f"sum by (measure) (increase({DISAGREEMENTS}{{{sel}}}{r}))"}


def measure_shadow(source: Any, model: str, version: int, opened: Mapping[str, Any],
                   closed: Mapping[str, Any]) -> ShadowWindow | None:
    """The shadow window of ``version`` between two markers of ``source``; None when it cannot be read
    (a target unreachable: the canary's own measurement lists it, and the window is inconclusive)."""
    if isinstance(source, ScrapeSource):
        before, after = Snapshot.from_dict(opened), Snapshot.from_dict(closed)
        gateway: list[Series] = []
        for url in source.gateway_urls:
            earlier, later = before.targets.get(url), after.targets.get(url)
            if earlier is None or later is None:
                return None
            gateway.append(deltas(earlier, later))
        return from_series(gateway, model, version)
    if isinstance(source, PrometheusSource):
        from modelops.canary.sources import _duration

        at = float(closed["at"])
        range_s = _duration(max(0.001, round(at - float(opened["at"]), 3)))
        try:
            rows = {name: [(labels, value) for labels, value in source._query(q, at)]
                    for name, q in promql(model, version, range_s).items()}
        except (ConnectionError, KeyError, TypeError, ValueError):
            return None
        return window_of(rows)
    return None
