"""Which routed models the precompute job scores: the feature-lookup ones, never a model published from its spec."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from modelops.documents.routes import Routes, VersionRef, routes_key, serialize_routes
from modelops.errors import ContractError
from modelops.jobs.precompute_tasks import champions
from modelops.serving.repository import REPOSITORY_PREFIX
from modelops.serving.spec_files import SPEC_FILE, spec_bytes
from tests.unit.test_serving_reconcile import _Bucket
from tests.unit.test_spec_files import SPEC


class _Store(_Bucket):
    def exists(self, key: str) -> bool:
        return key in self.objects


def _route(store: _Store, model: str, stable: int) -> None:
    routes = Routes(model, 1, VersionRef(stable, f"{stable:064x}"), None, 0.0, datetime.now(UTC).isoformat(), "tests")
    store.put_bytes(routes_key(model), serialize_routes(routes))


def test_a_model_published_from_its_spec_is_not_precomputed() -> None:
    store = _Store()
    _route(store, "recommender", 2)
    _route(store, "cancer", 1)
    store.put_bytes(f"{REPOSITORY_PREFIX}cancer/1/{SPEC_FILE}", spec_bytes(SPEC))
    assert [(c.model, c.version) for c in champions(store)] == [("recommender", 2)]  # type: ignore[arg-type]
    with pytest.raises(ContractError, match=r"model=.cancer.: version 1 is published from its spec .* always "
                                            "answered online"):
        champions(store, ["cancer"])  # type: ignore[arg-type]
