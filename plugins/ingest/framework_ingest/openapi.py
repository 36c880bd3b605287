"""The OpenAPI 3.1 description of the ingest endpoint, built from the wire models.

Served at ``/openapi.json``, copied into ``docs/ingest-contract.md`` (a test keeps the
copy equal to this output) and fuzzed by schemathesis. This module owns the document
only; it must stay in step with the routes in :mod:`framework_ingest.app`.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from framework_ingest.limits import DEFAULT_BODIES, BodyLimits
from framework_ingest.models import (
    CONSUMER_NAME_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    BatchItemIn,
    BatchResponse,
    CursorIn,
    CursorList,
    EventPage,
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


_SIGNATURE_PARAM = {
    "name": "X-Framework-Signature",
    "in": "header",
    "required": True,
    "description": "`t=<unix seconds>,v1=<hex>`: hex = HMAC-SHA256(secret, `{t}.` + the exact "
    "body); several `v1=` entries allowed (rotation); each signature is accepted once",
    "schema": {"type": "string"},
}


# Open API 3.1 reads the schema of an event stream as the schema of one message.
_SSE_MESSAGE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The event's seq"},
        "data": {"type": "string", "description": "The Event as JSON"},
        "event": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _query_seq(name: str, description: str, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": 0 if maximum is None else 1}
    if maximum is not None:
        schema["maximum"] = maximum
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def build_openapi(
    bodies: BodyLimits = DEFAULT_BODIES, *, auth: bool, signed: bool = False
) -> dict[str, Any]:
    """The document for an app with these body limits (``auth``: whether a token is
    required; ``signed``: whether writes must carry ``X-Framework-Signature``)."""
    max_batch, max_body = bodies.max_batch, bodies.max_body
    _, defs = models_json_schema(
        [
            (m, "validation" if m in (ItemIn, BatchItemIn, CursorIn) else "serialization")
            for m in (
                ItemIn,
                BatchItemIn,
                ItemResult,
                BatchResponse,
                ItemOut,
                EventPage,
                CursorIn,
                CursorList,
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
    unavailable = {
        "503": _problem(
            "Storage busy or unreachable, or the server at its request limit", _RETRY_AFTER
        )
    }
    security: list[dict[str, list[str]]] = [{"bearer": []}] if auth else []
    write_guarded = dict(guarded)
    if signed:
        write_guarded["401"] = _problem(
            "No bearer token, or a signature missing, invalid, outside the skew or replayed",
            {
                "WWW-Authenticate": {
                    "description": "`Bearer` or `Signature`",
                    "schema": {"type": "string"},
                }
            },
        )
    max_record = bodies.max_record_body
    write_errors = {
        "400": _problem("Malformed JSON"),
        **write_guarded,
        "408": _problem("The body did not arrive in time; the connection is closed"),
        "413": _problem(f"Body over {max_record} bytes"),
        "415": _problem("Content-Type is not JSON"),
        "422": _problem("Invalid item; `errors` names the fields"),
        **unavailable,
    }
    signature_params = [_SIGNATURE_PARAM] if signed else []
    paths: dict[str, Any] = {
        "/v1/items": {
            "post": {
                "operationId": "postItem",
                "summary": "Upsert one item on its dedupe key",
                "security": security,
                "parameters": [
                    *signature_params,
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
                    },
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
                "parameters": signature_params,
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
                    "413": _problem(
                        f"Body over {max_body} bytes or over {max_batch} items (an element "
                        f"over {max_record} bytes is that element's 413 in the results)"
                    ),
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
                    "404": _problem("No item with this key (also: a key no item can have)"),
                    **unavailable,
                },
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "getEvents",
                "summary": "Events after a sequence number, oldest first (the outbox)",
                "security": security,
                "parameters": [
                    _query_seq("after", "Return events with seq > after (default 0)"),
                    _query_seq("limit", "At most this many (default 100)", maximum=1000),
                ],
                "responses": {
                    "200": _json("A page of events", "EventPage"),
                    **guarded,
                    "410": _problem(
                        "Events after `after` were purged; `oldest_after` says where to resume"
                    ),
                    "422": _problem("`after` or `limit` is not a number in range"),
                    **unavailable,
                },
            }
        },
        "/v1/events/stream": {
            "get": {
                "operationId": "streamEvents",
                "summary": "The events as Server-Sent Events (`id:` is seq), "
                "resuming after Last-Event-ID",
                "security": security,
                "parameters": [
                    _query_seq("after", "Start after this seq when no Last-Event-ID is sent"),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "The last seq received; the stream resumes after it",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "An endless stream: `id: <seq>` and "
                        "`data: <Event JSON>` per event",
                        "content": {"text/event-stream": {"schema": _SSE_MESSAGE}},
                    },
                    **guarded,
                    "410": _problem("Events after the resume point were purged"),
                    "422": _problem("`after` or Last-Event-ID is not a number in range"),
                    **unavailable,
                },
            }
        },
        "/v1/events/consumers": {
            "get": {
                "operationId": "getConsumers",
                "summary": "The consumer cursors (retention keeps events above the lowest)",
                "security": security,
                "responses": {"200": _json("The cursors", "CursorList"), **guarded, **unavailable},
            }
        },
        "/v1/events/consumers/{name}": {
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": CONSUMER_NAME_PATTERN},
                }
            ],
            "put": {
                "operationId": "putConsumer",
                "summary": "Set a consumer's cursor: events up to last_seq are processed",
                "security": security,
                "parameters": signature_params,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": _REF.format(model="CursorIn")}}
                    },
                },
                "responses": {
                    "200": _json("The cursor", "Cursor"),
                    **{k: v for k, v in write_errors.items() if k != "422"},
                    "422": _problem("Bad name, bad body, or last_seq beyond the last event"),
                },
            },
            "delete": {
                "operationId": "deleteConsumer",
                "summary": "Unregister a consumer (its cursor no longer holds events back)",
                "security": security,
                "responses": {
                    "204": {"description": "Unregistered"},
                    **guarded,
                    "404": _problem("No consumer of this name"),
                    **unavailable,
                },
            },
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
