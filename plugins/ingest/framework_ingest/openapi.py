"""The OpenAPI 3.1 description of the ingest endpoint, built from the wire models.

Served at ``/openapi.json``, copied into ``docs/ingest-contract.md`` (a test keeps the
copy equal to this output) and fuzzed by schemathesis. This module owns the document
only; it must stay in step with the routes in :mod:`framework_ingest.app`.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from framework_ingest.models import (
    IDEMPOTENCY_KEY_PATTERN,
    BatchItemIn,
    BatchResponse,
    Health,
    ItemIn,
    ItemOut,
    ItemResult,
    Problem,
    Stats,
)

_REF = "#/components/schemas/{model}"


def _problem(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        },
    }
    if headers:
        out["headers"] = headers
    return out


def _json(description: str, model: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}},
    }
    if headers:
        out["headers"] = headers
    return out


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "string"}}}
_REPLAYED = {
    "Idempotent-Replayed": {
        "description": "`true` when this is the stored answer to an earlier request",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def build_openapi(*, max_batch: int, max_body: int, auth: bool) -> dict[str, Any]:
    """The document for an app with these limits (``auth``: whether a token is required)."""
    _, defs = models_json_schema(
        [
            (m, "validation" if m in (ItemIn, BatchItemIn) else "serialization")
            for m in (
                ItemIn,
                BatchItemIn,
                ItemResult,
                BatchResponse,
                ItemOut,
                Stats,
                Health,
                Problem,
            )
        ],
        ref_template=_REF,
    )
    schemas = defs["$defs"]
    guarded = {
        "401": _problem(
            "No bearer token",
            {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
        ),
        "403": _problem("Wrong bearer token"),
    }
    unavailable = {"503": _problem("Storage busy or unreachable", _RETRY_AFTER)}
    security: list[dict[str, list[str]]] = [{"bearer": []}] if auth else []
    write_errors = {
        "400": _problem("Malformed JSON"),
        **guarded,
        "413": _problem(f"Body over {max_body} bytes"),
        "422": _problem("Invalid item; `errors` names the fields"),
        **unavailable,
    }
    paths: dict[str, Any] = {
        "/v1/items": {
            "post": {
                "operationId": "postItem",
                "summary": "Upsert one item on its dedupe key",
                "security": security,
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "Names one delivery of one version, e.g. "
                        "`<dedupe_key>@<content_hash>`; replays answer the stored response",
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 255,
                            "pattern": IDEMPOTENCY_KEY_PATTERN,
                        },
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": _REF.format(model="ItemIn")}}
                    },
                },
                "responses": {
                    "201": _json(
                        "Accepted: a new key",
                        "ItemResult",
                        {
                            "Location": {"description": "The item", "schema": {"type": "string"}},
                            **_REPLAYED,
                        },
                    ),
                    "200": _json(
                        "Duplicate (same hash) or updated (new hash)", "ItemResult", _REPLAYED
                    ),
                    **write_errors,
                    "409": _problem("The same Idempotency-Key is in flight; retry"),
                },
            }
        },
        "/v1/items/batch": {
            "post": {
                "operationId": "postBatch",
                "summary": "Upsert up to max_batch items; one result per element, in order",
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "array",
                                "maxItems": max_batch,
                                "items": {"$ref": _REF.format(model="BatchItemIn")},
                            }
                        }
                    },
                },
                "responses": {
                    "200": _json("One result per element, in order", "BatchResponse"),
                    **write_errors,
                    "413": _problem(f"Body over {max_body} bytes or over {max_batch} items"),
                },
            }
        },
        "/v1/items/{dedupe_key}": {
            "get": {
                "operationId": "getItem",
                "summary": "One stored item and its downstream status",
                "security": security,
                "parameters": [
                    {
                        "name": "dedupe_key",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1},
                    }
                ],
                "responses": {
                    "200": _json("The item", "ItemOut"),
                    **guarded,
                    "404": _problem("No item with this key"),
                    **unavailable,
                },
            }
        },
        "/v1/stats": {
            "get": {
                "operationId": "getStats",
                "summary": "Counts by downstream status and by source type",
                "security": security,
                "responses": {"200": _json("Counts", "Stats"), **guarded, **unavailable},
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness and database reachability (no auth)",
                "security": [],
                "responses": {"200": _json("Healthy", "Health"), **unavailable},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "framework ingest endpoint",
            "version": "1",
            "description": "The one door through which harvested items enter. "
            "Errors are application/problem+json (RFC 9457).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
