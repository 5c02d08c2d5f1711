"""The traffic generator's pure parts: valid requests, reaction rates, option parsing."""

from __future__ import annotations

import random

import pytest

from modelops.errors import ConfigError
from modelops.gateway.protocol.contract import compile_contract
from modelops.modelspec.recommender import recommender_contract
from modelops.traffic.simulation import (
    Behaviour,
    TrafficSpec,
    make_request,
    parse_version_probabilities,
    reactions,
)


def test_requests_keep_the_contract() -> None:
    contract = compile_contract(recommender_contract())
    spec = TrafficSpec(model="m", items_per_request=(1, 50))
    rng = random.Random(1)
    for _ in range(500):
        assert contract.validate(make_request(rng, spec, 1_764_460_800.0)) is None


def test_reaction_rates_match_the_behaviour() -> None:
    rng = random.Random(2)
    behaviour = Behaviour(click=0.2, purchase=0.25, skip=0.5)
    n = 20000
    actions = [a for _ in range(n) for a in reactions(rng, behaviour)]
    clicks, purchases, skips = actions.count("click"), actions.count("purchase"), actions.count("skip")
    assert clicks / n == pytest.approx(0.2, abs=0.015)
    assert purchases / clicks == pytest.approx(0.25, abs=0.03)
    assert skips / (n - clicks) == pytest.approx(0.5, abs=0.02)


def test_per_version_behaviour_and_parsing() -> None:
    spec = TrafficSpec(model="m", per_version={4: Behaviour(click=0.3)})
    assert spec.behaviour(4).click == 0.3 and spec.behaviour(3) == Behaviour()
    assert parse_version_probabilities(["4=0.15", "5=0.2"], "click") == {4: 0.15, 5: 0.2}
    with pytest.raises(ConfigError, match=r"4:0\.1"):
        parse_version_probabilities(["4:0.1"], "click")
    with pytest.raises(ConfigError):
        Behaviour(click=1.5)
    with pytest.raises(ConfigError):
        TrafficSpec(model="m", items_per_request=(0, 60))
