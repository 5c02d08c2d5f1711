"""The gateway's OpenAPI 3.1 document, built from the same schemas the gateway enforces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelops.records import ACTIONS

_TOKEN = {"type": "string", "minLength": 1, "maxLength": 2048,
          "description": "The feedback_token of the prediction answer."}
_TIMESTAMP = {"type": "number", "minimum": 1609459200, "maximum": 2524608000,
              "description": "When the user acted, epoch seconds.", "examples": [1764460800]}
ACTION_FEEDBACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["feedback_token", "action", "timestamp"],
    "properties": {
        "feedback_token": _TOKEN,
        "action": {"enum": list(ACTIONS), "examples": ["click"]},
        "timestamp": _TIMESTAMP,
    },
}
"""The action form as the reference recommender has always been checked (its 400 answers stay the same)."""
FEEDBACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["feedback_token", "timestamp"],
    "properties": {
        "feedback_token": _TOKEN,
        # No type here: the model's declaration judges the action (for the recommender exactly as before).
        "action": {"examples": ["click"],
                   "description": "A user action the model declares (the recommender: click, purchase, skip)."},
        "label": {"type": ["string", "integer", "boolean"], "examples": [1],
                  "description": "The ground truth of a binary (0/1, true/false, or one of its 2 classes) or "
                                 "multiclass (one of its classes) label."},
        "value": {"type": "number", "examples": [12.5],
                  "description": "The ground truth of a numeric label, a finite number."},
        "timestamp": {**_TIMESTAMP, "description": "When the user acted or the ground truth was observed, "
                                                   "epoch seconds."},
    },
}
"""Body of ``POST /v1/feedback``: exactly one of action, label, value, checked against the token's model
(:mod:`modelops.gateway.feedback.outcomes`; compiled by the same compiler as the request contract)."""

_ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string"}, "message": {"type": "string"},
        "field": {"type": "string"}, "rule": {"type": "string"}, "value": {},
    },
}
_REQUEST_ID = {"description": "Echoed from the request, or generated.", "schema": {"type": "string"}}


def _error(description: str, headers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    response["headers"] = {"X-Request-ID": _REQUEST_ID, **(headers or {})}
    return response


def _strip(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in {"$schema", "$id", "$defs"}}


def _query_parameters(request_schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The predict query options, from the contract's ``#/$defs/query`` (explain, top_k)."""
    query = request_schema.get("$defs", {}).get("query", {})
    return [{"name": name, "in": "query", "required": False, "description": spec.get("description", ""),
             "schema": {k: v for k, v in spec.items() if k not in {"description", "examples"}}}
            for name, spec in query.get("properties", {}).items()]


_CONTRIBUTION = {
    "type": "object", "required": ["feature", "value", "baseline", "contribution"],
    "properties": {"feature": {"type": "string"}, "value": {"type": ["number", "null"]},
                   "baseline": {"type": ["number", "null"]}, "contribution": {"type": "number"}},
}
_EXPLANATION = {
    "type": "object",
    "required": ["item_id", "score", "baseline_score", "feature_contributions", "other_features_contribution",
                 "top_reason"],
    "properties": {
        "item_id": {"type": "string"}, "score": {"type": "number"}, "baseline_score": {"type": "number"},
        "feature_contributions": {"type": "array", "items": _CONTRIBUTION,
                                  "description": "top_k features, largest |contribution| first."},
        "other_features_contribution": {"type": "number", "description": "The sum of the features not listed."},
        "top_reason": {"type": "string", "description": "<feature>=<value> (baseline <value>)"},
    },
}


def build_openapi(request_schema: Mapping[str, Any], *, max_body_bytes: int) -> dict[str, Any]:
    """The document served at ``/openapi.json``."""
    retry_after = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}}
    predict_ok = {
        "type": "object",
        "required": ["request_id", "model", "model_version", "model_id", "variant", "scores", "feedback_token"],
        "properties": {
            "request_id": {"type": "string"},
            "model": {"type": "string"},
            "model_version": {"type": "integer", "description": "Triton version that served."},
            "model_id": {"type": "string", "description": "<sha256[:12]>/<Triton version>."},
            "variant": {"enum": ["stable", "canary"]},
            "scores": {"type": "array", "items": {"type": "number"},
                       "description": "One score per requested item, in request order."},
            "feedback_token": {"type": "string"},
            "explanations": {"type": "array", "items": _EXPLANATION,
                             "description": "explain=true only: per item, baseline_score + the contributions + "
                                            "other_features_contribution = score (within 1e-4)."},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "modelops serving gateway", "version": "1",
                 "description": "Edge contract, sticky canary routing, feedback tokens, event logs."},
        "paths": {
            "/v1/models/{model}/predict": {"post": {
                "operationId": "predict",
                "parameters": [
                    {"name": "model", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"}},
                    {"name": "X-Request-ID", "in": "header", "required": False,
                     "schema": {"type": "string", "maxLength": 128}},
                    {"name": "Inference-Timeout", "in": "header", "required": False,
                     "description": "Milliseconds; lowers the deadline, never raises it past the maximum.",
                     "schema": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}},
                    *_query_parameters(request_schema),
                ],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/PredictRequest"}}}},
                "responses": {
                    "200": {"description": "Scores and a feedback token.",
                            "headers": {
                                "X-Request-ID": _REQUEST_ID,
                                "X-Model-Version": {"schema": {"type": "string"},
                                                    "description": "<sha256[:12]>/<Triton version>"},
                                "X-Inference-Latency": {"schema": {"type": "string"},
                                                        "description": "Triton round trip, milliseconds."},
                                "X-Delay-Origin": {"schema": {"enum": ["gateway", "feature_lookup", "triton_queue",
                                                                       "triton_compute"]},
                                                   "description": "Where most of the request's time went."},
                            },
                            "content": {"application/json": {"schema": predict_ok}}},
                    "400": _error("Contract violation (names field, rule and value) or malformed JSON."),
                    "404": _error("Unknown model (no routes document)."),
                    "413": _error(f"Body larger than {max_body_bytes} bytes."),
                    "415": _error("Content type is not application/json."),
                    "502": _error("Triton refused the request."),
                    "503": _error("Triton, the features or the event spool are unavailable.", retry_after),
                    "504": _error("Inference deadline passed."),
                },
            }},
            "/v1/feedback": {"post": {
                "operationId": "feedback",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Feedback"}}}},
                "responses": {
                    "202": {"description": "Durably recorded.", "headers": {"X-Request-ID": _REQUEST_ID},
                            "content": {"application/json": {"schema": {
                                "type": "object", "required": ["status"],
                                "properties": {"status": {"const": "accepted"}, "request_id": {"type": "string"}}}}}},
                    "400": _error("Malformed body or unknown action."),
                    "401": _error("Token signature fails."),
                    "410": _error("Token expired (older than 24 h)."),
                    "413": _error(f"Body larger than {max_body_bytes} bytes."),
                    "415": _error("Content type is not application/json."),
                    "503": _error("Event spool over its disk budget.", retry_after),
                },
            }},
            "/v1/routes": {"get": {"operationId": "routes", "responses": {"200": {
                "description": "The routes revision each model applied in this gateway process.",
                "content": {"application/json": {"schema": {"type": "object", "required": ["models"]}}}}}}},
            "/healthz": {"get": {"operationId": "health", "responses": {"200": {
                "description": "The process serves.",
                "content": {"application/json": {"schema": {"type": "object", "required": ["status"]}}}}}}},
            "/metrics": {"get": {"operationId": "metrics", "responses": {"200": {
                "description": "Prometheus text format.", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        },
        "components": {"schemas": {
            "PredictRequest": _strip(request_schema),
            "Feedback": FEEDBACK_SCHEMA,
            "Error": _ERROR,
        }},
    }


def _component(model: str) -> str:
    return "PredictRequest_" + "".join(c if c.isalnum() or c == "_" else "_" for c in model)


def add_model_paths(document: dict[str, Any], models: Mapping[str, Mapping[str, Any]], *,
                    max_body_bytes: int) -> dict[str, Any]:
    """``document`` with ``POST /v1/models/<name>/predict`` of each model served from its spec, its own schema.

    ``models``: model name -> the request contract of its stable version (a canary with another
    signature is judged by its own; :mod:`modelops.gateway.edge`).
    """
    paths, schemas = dict(document["paths"]), dict(document["components"]["schemas"])
    generic = document["paths"]["/v1/models/{model}/predict"]["post"]
    for name, schema in sorted(models.items()):
        component = _component(name)
        schemas[component] = _strip(schema)
        ok = {"type": "object",
              "required": ["predictions", "request_id", "model", "model_version", "model_id", "variant",
                           "feedback_token"],
              "properties": {"predictions": {"description": "MLflow's: one output as its rows, several as an "
                                                            "object of outputs."},
                             "request_id": {"type": "string"}, "model": {"const": name},
                             "model_version": {"type": "integer"}, "model_id": {"type": "string"},
                             "variant": {"enum": ["stable", "canary"]}, "feedback_token": {"type": "string"}}}
        responses = {code: answer for code, answer in generic["responses"].items() if code != "200"}
        responses["413"] = _error(f"Body larger than {max_body_bytes} bytes.")
        responses["200"] = {"description": "MLflow's predictions and a feedback token.",
                            "headers": {**generic["responses"]["200"]["headers"],
                                        "X-Feedback-Token": {"schema": {"type": "string"}}},
                            "content": {"application/json": {"schema": ok}}}
        paths[f"/v1/models/{name}/predict"] = {"post": {
            "operationId": f"predict_{component.removeprefix('PredictRequest_')}",
            "description": f"{schema.get('description', '')}",
            "parameters": [p for p in generic["parameters"] if p["in"] == "header"],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{component}"}}}},
            "responses": responses}}
    return {**document, "paths": paths, "components": {**document["components"], "schemas": schemas}}
