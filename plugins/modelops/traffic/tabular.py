"""Traffic for a model of the tabular form: rows of a frame sent in MLflow's ``dataframe_split`` body.

The recommender's generated traffic (:mod:`modelops.traffic.simulation`) sends ids and lets the
gateway look the features up; a model published from its spec takes its features inline. These
bodies send random rows of an evaluation frame (a canary's traffic in the demo and the tests), with
the runner's open-loop schedule, bounds and report (:func:`modelops.traffic.runner.run_traffic`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from modelops.errors import ConfigError
from modelops.traffic.runner import Bodies
from modelops.traffic.simulation import Behaviour, TrafficSpec

SILENT = Behaviour(click=0.0, purchase=0.0, skip=0.0)
"""No feedback actions: a tabular model declares its own outcomes (or none)."""


def tabular_bodies(columns: Sequence[str], rows: Sequence[Sequence[Any]],
                   rows_per_request: tuple[int, int] = (1, 5)) -> Bodies:
    """Bodies of ``lo..hi`` random rows each (``{"dataframe_split": {"columns", "data"}}``).

    Raises:
        ConfigError: no rows, a row of another width than ``columns``, a value that is not JSON
            (NaN or infinity), or a bad row count.
    """
    lo, hi = rows_per_request
    if not rows or not 1 <= lo <= hi:
        raise ConfigError(f"tabular traffic: needs rows and 1 <= lo <= hi rows per request (got {len(rows)} rows, "
                          f"{lo}..{hi}; example: (1, 5))")
    width = len(columns)
    data = [list(r) for r in rows]
    for i, row in enumerate(data):
        if len(row) != width:
            raise ConfigError(f"tabular traffic: row {i} has {len(row)} values for {width} columns")
        if any(isinstance(v, float) and not math.isfinite(v) for v in row):
            raise ConfigError(f"tabular traffic: row {i} holds NaN or infinity, which JSON cannot carry")
    names = list(columns)

    def body(rng: random.Random, now: float) -> Mapping[str, Any]:
        picked = [data[rng.randrange(len(data))] for _ in range(rng.randint(lo, hi))]
        return {"dataframe_split": {"columns": names, "data": picked}}

    return body


def tabular_spec(model: str, *, rate: float, seconds: float, concurrency: int = 8, seed: int = 0) -> TrafficSpec:
    """A bounded run of ``rate`` requests/s for ``seconds`` to ``model`` that posts no feedback."""
    return TrafficSpec(model=model, rate=rate, max_requests=max(1, int(rate * seconds)), max_seconds=seconds,
                       default=SILENT, concurrency=concurrency, seed=seed)
