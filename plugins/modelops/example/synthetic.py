"""A deterministic synthetic recommendation world (pure numpy/pandas, seeded).

Users and items carry the 128 features of the recommender's ``examples/recommender/features.yaml`` (64 ``user_*``,
64 ``item_*``) with realistic shapes: skewed counts, rates in [0, 1], ratings, and
embeddings ~ N(0, 1) clipped to [-10, 10]. Requests are ``{user_id, item_ids (1–50),
timestamp}``. A hidden ground truth gives the click probability of a (user, item) pair:
a sigmoid of the scaled dot product of the two embeddings plus a few named features.
The same seed always gives the same world.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from modelops.features import Feature

USER_PREFIX = "user_"
ITEM_PREFIX = "item_"
EMBEDDING_CLIP = 10.0
MAX_ITEMS_PER_REQUEST = 50

# Rates with a known typical level (Beta(a, b)); other [0, 1] features use Beta(2, 3).
_BETA: dict[str, tuple[float, float]] = {
    "user_ctr_30d": (2.0, 30.0),  # mean ~6 %
    "user_cvr_30d": (1.0, 60.0),
    "item_ctr_7d": (2.0, 40.0),
    "item_cvr_7d": (1.0, 80.0),
    "item_discount": (1.0, 6.0),
    "user_returns_rate": (1.0, 12.0),
    "item_return_rate": (1.0, 15.0),
}


@dataclass(frozen=True)
class WorldSpec:
    """The size and time span of a synthetic world."""

    seed: int = 7
    n_users: int = 5000
    n_items: int = 2000
    n_requests: int = 4000
    start: datetime = datetime(2026, 11, 1, tzinfo=UTC)
    days: int = 7
    mean_items_per_request: float = 12.0


def user_ids(n: int) -> NDArray[Any]:
    """``u_000000`` … (matches the request contract's user_id pattern)."""
    return np.array([f"u_{i:06d}" for i in range(n)], dtype=object)


def item_ids(n: int) -> NDArray[Any]:
    """``i_000000`` … (1–32 characters, as the request contract requires)."""
    return np.array([f"i_{i:06d}" for i in range(n)], dtype=object)


def _column(feature: Feature, n: int, rng: np.random.Generator) -> NDArray[Any]:
    lo, hi = feature.min, feature.max
    if "_emb_" in feature.name:
        values = rng.normal(0.0, 1.0, n)
    elif feature.name in _BETA or (lo == 0.0 and hi == 1.0):
        a, b = _BETA.get(feature.name, (2.0, 3.0))
        values = rng.beta(a, b, n)
    elif hi - lo <= 10.0:  # ratings, depths: bunched towards the upper middle
        values = lo + (hi - lo) * rng.beta(5.0, 2.0, n)
    else:  # counts, prices, lengths: log-normal, median 2 % of the range, whole numbers
        values = np.floor(lo + np.exp(rng.normal(np.log(0.02 * (hi - lo) + 1.0), 1.0, n)))
    return np.clip(values, lo, hi)


def feature_table(
    features: Sequence[Feature], prefix: str, ids: NDArray[Any], key: str, rng: np.random.Generator
) -> pd.DataFrame:
    """A table of ``key`` plus every feature named ``prefix*``, in metadata order (float64)."""
    columns: dict[str, NDArray[Any]] = {key: ids}
    for feature in features:
        if feature.name.startswith(prefix):
            columns[feature.name] = _column(feature, len(ids), rng).astype(np.float64)
    return pd.DataFrame(columns)


def generate_tables(features: Sequence[Feature], spec: WorldSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``users`` and ``items`` feature tables of the world."""
    rng = np.random.default_rng([spec.seed, 1])
    users = feature_table(features, USER_PREFIX, user_ids(spec.n_users), "user_id", rng)
    items = feature_table(features, ITEM_PREFIX, item_ids(spec.n_items), "item_id", rng)
    return users, items


def _zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> NDArray[Any]:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    rng.shuffle(weights)
    return np.asarray(weights / weights.sum())


def generate_requests(spec: WorldSpec, *, unknown_share: float = 0.0) -> pd.DataFrame:
    """Requests ``user_id``, ``item_ids`` (list of 1–50 strings), ``timestamp`` (epoch seconds).

    Users and items are drawn with Zipf-like popularity; ``unknown_share`` of the
    users and of the items are ids absent from the feature tables (cold start).
    """
    rng = np.random.default_rng([spec.seed, 2])
    users = user_ids(spec.n_users)
    items = item_ids(spec.n_items)
    u = rng.choice(spec.n_users, size=spec.n_requests, p=_zipf_weights(spec.n_users, 0.8, rng))
    counts = np.clip(
        rng.poisson(spec.mean_items_per_request - 1.0, spec.n_requests) + 1, 1, MAX_ITEMS_PER_REQUEST
    )
    item_p = _zipf_weights(spec.n_items, 1.0, rng)
    start = int(spec.start.timestamp())
    stamps = np.sort(rng.integers(start, start + spec.days * 86400, spec.n_requests))
    request_users: list[str] = []
    request_items: list[list[str]] = []
    for i in range(spec.n_requests):
        uid = str(users[u[i]])
        if unknown_share and rng.random() < unknown_share:
            uid = f"u_new_{i:06d}"
        picked = rng.choice(spec.n_items, size=int(counts[i]), replace=False, p=item_p)
        ids = [
            str(items[j]) if not (unknown_share and rng.random() < unknown_share) else f"i_new_{i}_{j}"
            for j in picked
        ]
        request_users.append(uid)
        request_items.append(ids)
    return pd.DataFrame(
        {"user_id": request_users, "item_ids": request_items, "timestamp": stamps.astype(np.int64)}
    )


def explode_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per (request, item): ``request_index``, ``user_id``, ``item_id``, ``timestamp``."""
    lengths = requests["item_ids"].map(len).to_numpy()
    index = np.repeat(np.arange(len(requests)), lengths)
    return pd.DataFrame(
        {
            "request_index": index,
            "user_id": requests["user_id"].to_numpy()[index],
            "item_id": np.concatenate([np.asarray(x, dtype=object) for x in requests["item_ids"]])
            if len(index)
            else np.array([], dtype=object),
            "timestamp": requests["timestamp"].to_numpy()[index],
        }
    )


def _z(x: NDArray[Any], mean: float, std: float) -> NDArray[Any]:
    return (x - mean) / std


def true_click_logit(matrix: NDArray[Any], names: Sequence[str]) -> NDArray[Any]:
    """The hidden ground truth (logit) for rows of the 128-feature matrix (NaN rows count as 0).

    ``-2.6 + 1.4·<u_emb, i_emb>/√d + 0.5·z(user_ctr_30d) + 0.5·z(item_ctr_7d)
    + 0.4·(item_rating − 3.5) − 0.3·z(log1p item_price) + 1.5·user_discount_affinity·item_discount``
    """
    col = {name: i for i, name in enumerate(names)}
    x = np.nan_to_num(matrix.astype(np.float64))
    u_emb = [col[n] for n in names if n.startswith("user_emb_")]
    i_emb = [col[n] for n in names if n.startswith("item_emb_")]
    dim = min(len(u_emb), len(i_emb))
    dot = np.einsum("ij,ij->i", x[:, u_emb[:dim]], x[:, i_emb[:dim]]) / np.sqrt(max(dim, 1))
    logit = -2.6 + 1.4 * dot
    if "user_ctr_30d" in col:
        logit += 0.5 * _z(x[:, col["user_ctr_30d"]], 0.0625, 0.04)
    if "item_ctr_7d" in col:
        logit += 0.5 * _z(x[:, col["item_ctr_7d"]], 0.047, 0.032)
    if "item_rating" in col:
        logit += 0.4 * (x[:, col["item_rating"]] - 3.5)
    if "item_price" in col:
        logit -= 0.3 * _z(np.log1p(x[:, col["item_price"]]), 4.6, 1.0)
    if "user_discount_affinity" in col and "item_discount" in col:
        logit += 1.5 * x[:, col["user_discount_affinity"]] * x[:, col["item_discount"]]
    return np.asarray(logit)


def true_click_probability(matrix: NDArray[Any], names: Sequence[str]) -> NDArray[Any]:
    """The ground-truth click probability: ``sigmoid(true_click_logit)``."""
    return np.asarray(1.0 / (1.0 + np.exp(-true_click_logit(matrix, names))))


def draw_clicks(probability: NDArray[Any], seed: int) -> NDArray[Any]:
    """Bernoulli labels (int8) for the given click probabilities."""
    rng = np.random.default_rng([seed, 3])
    return (rng.random(len(probability)) < probability).astype(np.int8)
