"""What simulated users do: pure decisions, no I/O.

A user is ``u_<k>`` (zero-padded like the example feature tables), asks for a few items,
and reacts to the answer through its ``feedback_token``: a click with the click
probability of the version that served it, then, after a click, a purchase with the
purchase probability (so CTR = clicks / predictions and CVR = purchases / clicks per
version come out near the configured values); without a click, a skip with the skip
probability.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelops.errors import ConfigError


@dataclass(frozen=True)
class Behaviour:
    """Reaction probabilities of users to one model version."""

    click: float = 0.1
    purchase: float = 0.2
    skip: float = 0.1

    def __post_init__(self) -> None:
        for name in ("click", "purchase", "skip"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"traffic {name} probability {value}: must be in [0, 1] (example: 0.1)")


@dataclass(frozen=True)
class TrafficSpec:
    """A bounded run: rate, count, time, population and behaviour per version."""

    model: str
    rate: float = 20.0
    max_requests: int = 1000
    max_seconds: float = 60.0
    n_users: int = 1000
    n_items: int = 1000
    items_per_request: tuple[int, int] = (1, 10)
    id_width: int = 6
    default: Behaviour = Behaviour()
    per_version: Mapping[int, Behaviour] = field(default_factory=dict)
    concurrency: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.max_requests < 1 or self.max_seconds <= 0:
            raise ConfigError("traffic: rate, requests and seconds must be positive (example: --rate 20)")
        lo, hi = self.items_per_request
        if not 1 <= lo <= hi <= 50:
            raise ConfigError(f"traffic: items per request {lo}..{hi} must be within 1..50 (the request contract)")

    def behaviour(self, version: int) -> Behaviour:
        return self.per_version.get(version, self.default)


def make_request(rng: random.Random, spec: TrafficSpec, now: float) -> dict[str, Any]:
    """One request body that keeps the contract."""
    width = spec.id_width
    n = rng.randint(*spec.items_per_request)
    return {
        "user_id": f"u_{rng.randrange(spec.n_users):0{width}d}",
        "item_ids": [f"i_{rng.randrange(spec.n_items):0{width}d}" for _ in range(n)],
        "timestamp": int(now),
    }


def reactions(rng: random.Random, behaviour: Behaviour) -> list[str]:
    """The actions one user sends for one answer (possibly none)."""
    if rng.random() < behaviour.click:
        return ["click", "purchase"] if rng.random() < behaviour.purchase else ["click"]
    return ["skip"] if rng.random() < behaviour.skip else []


def parse_version_probabilities(items: list[str], what: str) -> dict[int, float]:
    """``["4=0.15", "5=0.2"]`` -> ``{4: 0.15, 5: 0.2}``.

    Raises:
        ConfigError: naming the bad item and an example.
    """
    out: dict[int, float] = {}
    for item in items:
        version, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(version)] = float(value)
        except ValueError:
            raise ConfigError(f"--version-{what} {item!r}: must be VERSION=PROBABILITY (example: 4=0.15)") from None
    return out
