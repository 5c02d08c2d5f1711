"""The spec of each routed version, compiled for the edge before its routes are applied.

A mixin of :class:`modelops.gateway.app.Gateway` (through :class:`modelops.gateway.edge.EdgeServing`).
Before a new routes table is applied, the spec of every newly routed version is read once
(``triton/repository/<model>/<N>/model-spec.json``, written by :mod:`modelops.serving.spec_publish`)
and compiled (:func:`modelops.gateway.protocol.forms.edge_model`); a version without one was published by the
reference recommender's pipeline and is served, on the Open Inference Protocol, by the recommender's
spec (:func:`modelops.modelspec.recommender.recommender_spec`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from modelops.documents.routes import Routes, VersionRef, routed_versions
from modelops.errors import ContractError, ObjectStoreError
from modelops.gateway.protocol.forms import EdgeModel, edge_model
from modelops.modelspec.recommender import recommender_spec
from modelops.serving.spec_reconcile import read_spec

log = logging.getLogger(__name__)


class RoutedSpecs:
    """The compiled specs of the routed versions (the attributes are the Gateway's)."""

    store: Any
    routes: dict[str, Routes]
    m_routes_errors: Any

    def _init_edge(self) -> None:
        self.edge_models: dict[tuple[str, int], EdgeModel | None] = {}  # None: the recommender's pipeline
        self._recommender_edge: dict[str, EdgeModel] = {}

    def _with_specs(self, table: dict[str, Routes]) -> dict[str, Routes]:
        """``table`` once the spec of each newly routed version is compiled: the table to apply.

        Runs in the routes poller's thread, off the hot path, *before* the table is applied, so no
        request is routed to a version whose contract is not known yet (CI once saw a canary's first
        request judged by the recommender's contract in that gap). A model whose new version's spec
        cannot be read keeps its current routes, counted as a routes error, and is tried again at the
        next poll. A version's spec never changes (its bytes are part of its sha256): each is read once.
        """
        compiled = dict(self.edge_models)  # a superset for a moment: the old and the new versions
        out: dict[str, Routes] = {}
        for model, routes in table.items():
            try:
                for version in routed_versions(routes):
                    if (model, version) not in compiled:
                        compiled[(model, version)] = self._compile_spec(model, version)
            except (ObjectStoreError, ContractError) as exc:
                self.m_routes_errors.inc((("model", model),))
                log.warning("routes %s revision %d held back: a version's spec is unusable (%s)", model,
                            routes.revision, exc)
                if model in self.routes:
                    out[model] = self.routes[model]
                continue
            out[model] = routes
        self.edge_models = compiled  # one assignment, as the routes table
        return out

    def _compile_spec(self, model: str, version: int) -> EdgeModel | None:
        """The version's compiled spec; None for one published by the recommender's pipeline (no spec)."""
        spec = read_spec(self.store, model, version)
        if spec is None:  # the recommender's own spec serves it on the OIP path
            if model not in self._recommender_edge:
                self._recommender_edge[model] = edge_model(recommender_spec(model))
            return None
        log.info("spec of %s v%d compiled for the edge", model, version)
        return edge_model(spec)

    def _forget_unrouted(self, before: set[tuple[str, int]]) -> bool:
        """Drops the specs of versions no longer routed; whether the set changed since ``before``."""
        wanted = {(m, v) for m, r in self.routes.items() for v in routed_versions(r)}
        known = {k: v for k, v in self.edge_models.items() if k in wanted}
        self.edge_models = known
        return known.keys() != before

    def _edge_of(self, model: str, version: VersionRef) -> EdgeModel:
        """The version's compiled spec; the recommender's for a version published by its pipeline."""
        found = self.edge_models.get((model, version.version))
        if found is not None:
            return found
        edge = self._recommender_edge.get(model)
        if edge is None:  # routed after the last poll read it: built here, once
            edge = self._recommender_edge[model] = edge_model(recommender_spec(model))
        return edge

    def _tabular_schemas(self) -> dict[str, Mapping[str, Any]]:
        """Model -> the request contract of its stable version, for each model served in the tabular form."""
        out: dict[str, Mapping[str, Any]] = {}
        for model, routes in self.routes.items():
            found = self.edge_models.get((model, routes.stable.version))
            if found is not None and found.tabular:
                out[model] = found.schema
        return out

    def _spec_routed(self, routes: Routes) -> bool:
        """Whether the model is served from its spec in the tabular form (its stable version has a spec)."""
        found = self.edge_models.get((routes.model, routes.stable.version))
        return found is not None and found.tabular
