"""``POST /v1/feedback``: a user action or a delayed label, judged by the token's model version.

A mixin of :class:`modelops.gateway.app.Gateway`. The order of checks: content type (415) ->
JSON and the body's shape (400, :data:`~modelops.gateway.protocol.openapi.FEEDBACK_SCHEMA`) -> the token's
signature (401) -> the outcome against the declaration of the version the token names (400,
:mod:`modelops.gateway.feedback.outcomes`) -> the token's age against that version's validity (410,
:meth:`~modelops.modelspec.spec.Outcomes.validity_s`) -> spool budget (503) -> 202.

The version's declaration comes from its spec: the routed versions' specs are compiled already
(:mod:`modelops.gateway.edge`); a version no longer routed (feedback outlives a rollback) has its
``model-spec.json`` read once from the object store, off the event loop, and kept (a version's spec
never changes). A version without a spec (the reference recommender) takes click, purchase and skip
and is checked exactly as before labels existed (:data:`~modelops.gateway.protocol.openapi.ACTION_FEEDBACK_SCHEMA`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from modelops.errors import ContractError, ObjectStoreError
from modelops.gateway.feedback.outcomes import BadFeedback, Outcome, parse_outcome
from modelops.gateway.feedback.tokens import (
    TOKEN_TTL_S,
    TokenClaims,
    TokenExpired,
    TokenInvalid,
    check_age,
    verify_token,
)
from modelops.gateway.http import HTTPError, Receive, Send, error, respond_json
from modelops.gateway.logs.eventlog import feedback_record
from modelops.gateway.logs.spool import SpoolFull
from modelops.gateway.protocol.contract import Check, Violation, compile_schema
from modelops.gateway.protocol.forms import EdgeModel
from modelops.gateway.protocol.openapi import ACTION_FEEDBACK_SCHEMA, FEEDBACK_SCHEMA
from modelops.modelspec.spec import Outcomes
from modelops.serving.spec_reconcile import read_spec

log = logging.getLogger(__name__)

NO_SPEC = Outcomes()
"""The declaration of a version without a spec: the platform's actions, the global validity."""
STORE_RETRY_S = 2.0
"""After a failed spec read, the store is not asked again for this long (an outage must not slow every event)."""


class FeedbackServing:
    """The feedback endpoint (mixed into the Gateway; the attributes are the Gateway's)."""

    secret: bytes
    store: Any
    logs: Any
    edge_models: dict[tuple[str, int], EdgeModel | None]
    m_feedback: Any
    m_feedback_rejected: Any
    _access: Callable[..., None]
    _unavailable: Callable[[str, str], HTTPError]
    _read_json: Callable[..., Any]

    def _init_feedback(self) -> None:
        self.feedback_check: Check = compile_schema(FEEDBACK_SCHEMA)
        self.action_check: Check = compile_schema(ACTION_FEEDBACK_SCHEMA)
        self._declared: dict[tuple[str, int], Outcomes | None] = {}  # versions read from the store (None: no spec)
        self._store_failed_at = -math.inf  # monotonic time of the last failed spec read

    async def _feedback(self, headers: dict[str, str], request_id: str, receive: Receive, send: Send) -> None:
        try:
            document, _size = await self._read_json(headers, receive)
        except HTTPError:
            self.m_feedback_rejected.inc((("reason", "malformed"),))
            raise
        violation: Violation | None = self.feedback_check(document, "$")
        if violation is not None:
            self.m_feedback_rejected.inc((("reason", "malformed"),))
            raise HTTPError(400, violation.to_body())
        received_at = time.time()
        try:
            claims = verify_token(self.secret, document["feedback_token"], now=received_at, ttl_s=None)
        except TokenInvalid as exc:
            self.m_feedback_rejected.inc((("reason", "bad_signature"),))
            raise error(401, "token_invalid", str(exc)) from exc
        declared = await self._declared_outcomes(claims, labelled="label" in document or "value" in document)
        outcome = self._judge(document, declared, claims.model)
        try:
            check_age(claims, now=received_at, ttl_s=(declared or NO_SPEC).validity_s(TOKEN_TTL_S))
        except TokenExpired as exc:
            self.m_feedback_rejected.inc((("reason", "expired"),))
            raise error(410, "token_expired", str(exc)) from exc
        committer = self.logs.committers["feedback"]
        try:
            committer.check_budget()
            await committer.append(feedback_record(feedback_token=document["feedback_token"], action=outcome.action,
                                                   ts=float(document["timestamp"]), received_at=received_at,
                                                   label=outcome.label, value=outcome.value))
        except SpoolFull as exc:
            self.m_feedback_rejected.inc((("reason", "spool_full"),))
            raise self._unavailable("spool_full", str(exc)) from exc
        kind = outcome.action if outcome.action is not None else outcome.form  # "label" / "value": few series
        self.m_feedback.inc((("model", claims.model), ("version", str(claims.model_version)), ("action", kind)))
        await respond_json(send, 202, {"status": "accepted", "request_id": claims.request_id}, request_id)
        self._access(request_id, "POST", "/v1/feedback", 202, model=claims.model, version=claims.model_version,
                     action=kind, prediction_request_id=claims.request_id,
                     latency_ms=round((time.time() - received_at) * 1000, 3))

    def _judge(self, document: Mapping[str, Any], declared: Outcomes | None, model: str) -> Outcome:
        """The body's outcome under the version's declaration (None: no spec), or a counted 400."""
        violation: Violation | None = None
        if declared is None and "label" not in document and "value" not in document:
            violation = self.action_check(document, "$")  # the recommender's answers, byte for byte as before
        if violation is None:
            try:
                return parse_outcome(document, declared or NO_SPEC, model)
            except BadFeedback as exc:
                violation = exc.violation
        self.m_feedback_rejected.inc((("reason", "malformed"),))
        raise HTTPError(400, violation.to_body())

    async def _declared_outcomes(self, claims: TokenClaims, *, labelled: bool) -> Outcomes | None:
        """The outcomes the token's version declares; None for a version published without a spec.

        While the store cannot be read, an action is judged by the platform's own actions (click,
        purchase, skip: what a version without a spec takes) and accepted into the spool, as every
        event is during an outage (the outcome job counts only the actions a version declares); a
        label or value, whose type only the spec says, is refused with 503 and Retry-After.
        """
        key = (claims.model, claims.model_version)
        if key in self.edge_models:  # routed: compiled by the routes poller
            edge = self.edge_models[key]
            return None if edge is None else edge.spec.outcomes
        if key in self._declared:
            return self._declared[key]
        try:
            if time.monotonic() - self._store_failed_at < STORE_RETRY_S:  # do not ask a store that just failed
                raise ObjectStoreError(f"the object store failed less than {STORE_RETRY_S:g} s ago")
            spec = await asyncio.to_thread(read_spec, self.store, *key)
        except ObjectStoreError as exc:
            self._store_failed_at = time.monotonic()
            if not labelled:
                log.warning("spec of %s v%d unreadable (%s): the action is judged without it", *key, exc)
                return None  # not cached: the next event asks the store again
            # the event is not lost: the client retries after Retry-After
            raise self._unavailable("spec_unavailable", f"the spec of {key[0]} v{key[1]} could not be read: "
                                                        f"{exc}") from exc
        except ContractError as exc:
            log.warning("spec of %s v%d unusable for feedback: %s", *key, exc)
            raise self._unavailable("spec_unavailable", str(exc)) from exc
        declared = None if spec is None else spec.outcomes
        self._declared[key] = declared
        return declared
