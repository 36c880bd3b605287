"""The ASGI app of the ingest endpoint (Starlette): routes, framing, limits, errors.

Routes: ``POST /v1/items``, ``POST /v1/items/batch``, ``GET /v1/items/{dedupe_key}``,
``GET /v1/stats``, ``GET /healthz``, ``GET /openapi.json``. Every error is problem+json.
Order of checks on a write: auth (401/403) -> body size (413) -> JSON (400) -> shape
(422, naming the field) -> storage. Plain Starlette routes rather than FastAPI's
dependency machinery: the batch route validates each element on its own (an invalid
element must not fail its neighbours), and the per-request overhead is the cost that
bounds single-item throughput. The OpenAPI document comes from the same pydantic models
(:mod:`framework_ingest.openapi`). This module owns HTTP; storage is the store's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from framework_ingest.auth import BearerAuth
from framework_ingest.db import Backend, open_backend
from framework_ingest.errors import BackendUnavailable
from framework_ingest.models import IDEMPOTENCY_KEY_PATTERN
from framework_ingest.openapi import build_openapi
from framework_ingest.problems import PROBLEM_MEDIA_TYPE, ProblemError, problem
from framework_ingest.store import IngestStore
from framework_ingest.validate import ItemInvalid, Prepared, parse_json, prepare

log = logging.getLogger("framework_ingest")

DEFAULT_MAX_BATCH = 500
DEFAULT_MAX_BODY = 16 * 1024 * 1024
RETRY_AFTER_SECONDS = 1


@dataclass
class IngestConfig:
    store: IngestStore
    auth: BearerAuth
    max_batch: int
    max_body: int
    openapi: dict[str, Any]


def _config(request: Request) -> IngestConfig:
    config: IngestConfig = request.app.state.ingest
    return config


def problem_response(
    body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        dict(body), status_code=int(body["status"]), headers=headers, media_type=PROBLEM_MEDIA_TYPE
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProblemError(413, "too-large", f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # chunked bodies carry no length up front
            raise ProblemError(413, "too-large", f"the body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if len(key) > 255 or _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise ProblemError(
            422,
            "validation",
            "Idempotency-Key: 1 to 255 printable ASCII characters without spaces",
            [{"field": "Idempotency-Key", "message": "1 to 255 printable ASCII characters"}],
        )
    return key


async def post_item(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    idempotency_key = _idempotency_key(request)
    obj = parse_json(await _read_body(request, config.max_body))
    try:
        prepared = prepare(obj, idempotency_key=idempotency_key)
    except ItemInvalid as exc:
        return problem_response(exc.problem)
    outcome = await run_in_threadpool(config.store.put, prepared)
    headers: dict[str, str] = {}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    if outcome.status_code >= 400:
        return problem_response(outcome.body, headers)
    if outcome.status_code == 201:
        headers["Location"] = "/v1/items/" + quote(prepared.item.dedupe_key, safe=":")
    return JSONResponse(outcome.body, status_code=outcome.status_code, headers=headers)


async def post_batch(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    obj = parse_json(await _read_body(request, config.max_body))
    if not isinstance(obj, list):
        raise ProblemError(
            422,
            "validation",
            "the body must be a JSON array of items",
            [{"field": "", "message": "expected a JSON array"}],
        )
    if len(obj) > config.max_batch:
        raise ProblemError(
            413,
            "batch-too-large",
            f"{len(obj)} items; at most {config.max_batch} per batch",
        )
    entries: list[Prepared | ItemInvalid] = []
    for element in obj:
        try:
            entries.append(prepare(element, batch=True))
        except ItemInvalid as exc:
            entries.append(exc)
    results = await run_in_threadpool(config.store.put_batch, entries)
    return JSONResponse({"results": results})


async def get_item(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    key = request.path_params["dedupe_key"]
    item = await run_in_threadpool(config.store.get, key)
    if item is None:
        raise ProblemError(404, "not-found", "no item with this dedupe key")
    return JSONResponse(item)


async def get_stats(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    return JSONResponse(await run_in_threadpool(config.store.stats))


async def healthz(request: Request) -> Response:
    config = _config(request)
    await run_in_threadpool(config.store.ping)
    return JSONResponse({"status": "ok", "database": config.store.backend.dialect})


async def openapi(request: Request) -> Response:
    return JSONResponse(_config(request).openapi)


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(exc.body, exc.headers)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        body = problem(405, "method-not-allowed", "see the Allow header")
    elif exc.status_code == 404:
        body = problem(404, "not-found", "no such route")
    else:  # pragma: no cover - the routes raise ProblemError for everything else
        body = {"type": "about:blank", "title": str(exc.detail), "status": exc.status_code}
    return problem_response(body, exc.headers)


async def _on_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("storage unavailable: %s", exc)
    body = problem(503, "unavailable", "the database is busy or unreachable; retry later")
    return problem_response(body, {"Retry-After": str(RETRY_AFTER_SECONDS)})


async def _on_error(request: Request, exc: Exception) -> Response:
    return problem_response(problem(500, "internal", "see the server log"))


def create_app(
    db_url: str | None = None,
    *,
    backend: Backend | None = None,
    token: str | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    max_body: int = DEFAULT_MAX_BODY,
    in_flight_timeout: float = 60.0,
) -> Starlette:
    """Build the app over ``db_url`` (opened and migrated now) or an open ``backend``.

    A backend opened here is closed when the app shuts down; a given one is not.
    """
    if backend is not None and db_url is None:
        store_backend, owned = backend, False
    elif db_url is not None and backend is None:
        store_backend, owned = open_backend(db_url), True
    else:
        raise ValueError("give exactly one of db_url and backend")
    store = IngestStore(store_backend, in_flight_timeout=in_flight_timeout)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if owned:
            store_backend.close()

    app = Starlette(
        routes=[
            Route("/v1/items", post_item, methods=["POST"]),
            Route("/v1/items/batch", post_batch, methods=["POST"]),
            Route("/v1/items/{dedupe_key:path}", get_item, methods=["GET"]),
            Route("/v1/stats", get_stats, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={
            ProblemError: _on_problem,
            HTTPException: _on_http,
            BackendUnavailable: _on_unavailable,
            Exception: _on_error,
        },
        lifespan=lifespan,
    )
    app.state.ingest = IngestConfig(
        store=store,
        auth=BearerAuth(token),
        max_batch=max_batch,
        max_body=max_body,
        openapi=build_openapi(max_batch=max_batch, max_body=max_body, auth=token is not None),
    )
    return app
