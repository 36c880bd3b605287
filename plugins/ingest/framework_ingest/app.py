"""The ASGI app of the ingest endpoint (Starlette): routes, framing, limits, errors.

Routes: ``POST /v1/items``, ``POST /v1/items/batch``, ``GET /v1/items/{dedupe_key}``,
``GET /v1/events``, ``GET /v1/events/stream`` (Server-Sent Events), ``GET /v1/stats``,
``GET /healthz``, ``GET /openapi.json``. Every error is problem+json.
Order of checks on a write: auth (401/403) -> Content-Type (415) -> body size (413) ->
signature (401, when signing is on) -> JSON (400) -> shape (422, naming the field) ->
storage. Keys that no stored item can have (NUL, too long) answer before the database.
A body is read on the event loop within ``body_timeout`` (408 otherwise) and never past
its route's cap (413, on ``Content-Length`` before any byte is read, else as soon as the
stream passes it): ``max_item`` for a write that carries one record (an item, a
cursor), ``max_body`` for a batch, whose elements are each held to ``max_item`` too.
Past 64 KiB a body is parsed and validated in a worker thread, a batch one element at a
time (see :func:`framework_ingest.validate.parse_batch`). A client that hangs up
mid-body costs one INFO line.
Plain Starlette routes rather than FastAPI's dependency machinery: the batch route
validates each element on its own (an invalid element must not fail its neighbours),
and the per-request overhead is the cost that bounds single-item throughput. The
OpenAPI document comes from the same pydantic models (:mod:`framework_ingest.openapi`).
This module owns HTTP; storage is the store's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from framework_ingest import events, retention
from framework_ingest.auth import BearerAuth
from framework_ingest.bodies import check_media_type, idempotency_key, parsed, read_body
from framework_ingest.db import Backend, open_backend, utcnow
from framework_ingest.errors import BackendUnavailable, ClientGone
from framework_ingest.limits import DEFAULT_BODIES, BodyLimits
from framework_ingest.models import CONSUMER_NAME_PATTERN, CursorIn
from framework_ingest.openapi import build_openapi
from framework_ingest.problems import PROBLEM_MEDIA_TYPE, ProblemError, problem
from framework_ingest.signing import DEFAULT_SKEW, HEADER, SignatureVerifier
from framework_ingest.store import IngestStore
from framework_ingest.validate import (
    ItemInvalid,
    Prepared,
    nesting_problem,
    parse_batch,
    parse_json,
    prepare,
    storable,
    too_deep_field,
)

log = logging.getLogger("framework_ingest")


RETRY_AFTER_SECONDS = 1
DEFAULT_POLL_INTERVAL = 0.25  # how often an idle event stream looks for new events
KEEPALIVE_SECONDS = 15.0  # an SSE comment line so proxies keep an idle stream open
MAX_KEY_LENGTH = 601  # the longest dedupe key a write accepts (models.DedupeKey)
# Bodies up to this size are parsed on the event loop: well under a millisecond, less
# than the hand-over to a worker thread, which single-item throughput would pay.
_MAX_SEQ = 2**63 - 1


@dataclass
class IngestConfig:
    store: IngestStore
    auth: BearerAuth
    signatures: SignatureVerifier
    bodies: BodyLimits
    openapi: dict[str, Any]
    poll_interval: float = DEFAULT_POLL_INTERVAL


def _config(request: Request) -> IngestConfig:
    config: IngestConfig = request.app.state.ingest
    return config


def problem_response(
    body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        dict(body), status_code=int(body["status"]), headers=headers, media_type=PROBLEM_MEDIA_TYPE
    )


async def _write_body(request: Request, config: IngestConfig, limit: int) -> bytes:
    """The checks every write runs before its body is parsed, in the documented order;
    ``limit``: the route's cap on the body, in bytes."""
    config.auth.check(request.headers.get("authorization"))
    check_media_type(request)
    body = await read_body(request, limit, config.bodies.timeout)
    if config.signatures.enabled:
        signatures, until = config.signatures.verify(request.headers.get(HEADER), body)
        fresh = await run_in_threadpool(config.store.remember_signatures, signatures, until)
        if not fresh:
            raise ProblemError(
                401,
                "signature-replayed",
                "this signature was already used; sign every request anew",
                headers={"WWW-Authenticate": f'Signature realm="ingest", header="{HEADER}"'},
            )
    return body


def _prepare_one(body: bytes, idempotency_key: str | None) -> Prepared | ItemInvalid:
    try:
        return prepare(parse_json(body), idempotency_key=idempotency_key)
    except ItemInvalid as exc:
        return exc


async def post_item(request: Request) -> Response:
    config = _config(request)
    body = await _write_body(request, config, config.bodies.max_record_body)
    key = idempotency_key(request)
    prepared = await parsed(body, _prepare_one, body, key)
    if isinstance(prepared, ItemInvalid):
        return problem_response(prepared.problem)
    outcome = await run_in_threadpool(config.store.put, prepared)
    headers: dict[str, str] = {}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    if outcome.status_code >= 400:
        return problem_response(outcome.body, headers)
    if outcome.status_code == 201:
        headers["Location"] = "/v1/items/" + quote(prepared.item.dedupe_key, safe=":")
    return JSONResponse(outcome.body, status_code=outcome.status_code, headers=headers)


def _prepare_batch(body: bytes, max_batch: int, max_item: int) -> list[Prepared | ItemInvalid]:
    obj = parse_batch(body, max_batch, max_item)
    if not isinstance(obj, list):
        raise ProblemError(
            422,
            "validation",
            "the body must be a JSON array of items",
            [{"field": "", "message": "expected a JSON array"}],
        )
    entries: list[Prepared | ItemInvalid] = []
    for element in obj:
        try:
            entries.append(prepare(element, batch=True))
        except ItemInvalid as exc:
            entries.append(exc)
    return entries


async def post_batch(request: Request) -> Response:
    config = _config(request)
    limits = config.bodies
    body = await _write_body(request, config, limits.max_body)
    entries = await parsed(body, _prepare_batch, body, limits.max_batch, limits.max_item)
    results = await run_in_threadpool(config.store.put_batch, entries)
    return JSONResponse({"results": results})


async def get_item(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    key = request.path_params["dedupe_key"]
    # No stored item has such a key (writes refuse them with 422), and PostgreSQL text
    # cannot even hold a NUL: answer 404 without asking the database.
    if "\x00" in key or len(key) > MAX_KEY_LENGTH or not storable(key):
        raise ProblemError(404, "not-found", "no item with this dedupe key")
    item = await run_in_threadpool(config.store.get, key)
    if item is None:
        raise ProblemError(404, "not-found", "no item with this dedupe key")
    return JSONResponse(item)


def _seq(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit()) or int(value) > _MAX_SEQ:
        raise ProblemError(
            422,
            "validation",
            f"{name}: a non-negative integer",
            [{"field": name, "message": "expected a non-negative integer"}],
        )
    return int(value)


async def _start_after(config: IngestConfig, after: int) -> None:
    """410 when events after ``after`` were purged already: the reader missed some."""
    low, _ = await run_in_threadpool(events.bounds, config.store.backend)
    if after < low:
        body = problem(
            410,
            "events-purged",
            f"events up to {low} were purged by retention; resync, then read from after={low}",
        )
        body["oldest_after"] = low
        raise ProblemError.from_body(body)


async def get_events(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    after = _seq(request.query_params.get("after"), "after", 0)
    limit = _seq(request.query_params.get("limit"), "limit", 100)
    if not 1 <= limit <= events.MAX_PAGE:
        raise ProblemError(
            422,
            "validation",
            f"limit: 1 to {events.MAX_PAGE}",
            [{"field": "limit", "message": f"expected 1 to {events.MAX_PAGE}"}],
        )
    await _start_after(config, after)
    page = await run_in_threadpool(events.page, config.store.backend, after, limit)
    if page and page[0]["seq"] != after + 1:  # purged between the check and the read
        await _start_after(config, after)
    _, last = await run_in_threadpool(events.bounds, config.store.backend)
    next_after = page[-1]["seq"] if page else after
    return JSONResponse({"events": page, "next_after": next_after, "last_seq": last})


async def stream_events(request: Request) -> Response:
    """Server-Sent Events from ``Last-Event-ID`` (or ``?after=``); polls the database, so
    it sees the writes of every server process."""
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    resume = request.headers.get("last-event-id")
    if resume is not None and resume.strip():
        after = _seq(resume.strip(), "Last-Event-ID", 0)
    else:
        after = _seq(request.query_params.get("after"), "after", 0)
    await _start_after(config, after)
    backend = config.store.backend
    interval = config.poll_interval

    async def feed() -> AsyncIterator[bytes]:
        cursor = after
        idle = 0.0
        yield b"retry: 1000\n\n"
        while True:
            batch = await run_in_threadpool(events.page, backend, cursor, 500)
            if batch and batch[0]["seq"] != cursor + 1:
                # seq has no holes, so retention purged events this reader has not seen:
                # end the stream; the reconnect (Last-Event-ID) is answered 410.
                return
            if batch:
                idle = 0.0
                out = []
                for event in batch:
                    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
                    out.append(f"id: {event['seq']}\ndata: {data}\n\n")
                cursor = batch[-1]["seq"]
                yield "".join(out).encode("utf-8")
                continue
            await asyncio.sleep(interval)
            idle += interval
            if idle >= KEEPALIVE_SECONDS:
                idle = 0.0
                yield b": keepalive\n\n"

    return StreamingResponse(
        feed(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


_CONSUMER_NAME = re.compile(CONSUMER_NAME_PATTERN)


def _consumer_name(request: Request, missing: int) -> str:
    name = str(request.path_params["name"])
    if _CONSUMER_NAME.fullmatch(name) is None:
        if missing == 404:  # no consumer can have this name
            raise ProblemError(404, "not-found", "no consumer of this name")
        raise ProblemError(
            422,
            "validation",
            "consumer name: 1 to 100 of A-Z a-z 0-9 . _ -",
            [{"field": "name", "message": "1 to 100 of A-Z a-z 0-9 . _ -"}],
        )
    return name


def _parse_cursor(body: bytes) -> Any:
    """A cursor body as JSON, its nesting bounded as an item's ``data`` is (422)."""
    value = parse_json(body)
    deep = too_deep_field(value)
    if deep is not None:
        raise nesting_problem(deep)
    return value


async def put_cursor(request: Request) -> Response:
    config = _config(request)
    body = await _write_body(request, config, config.bodies.max_record_body)
    name = _consumer_name(request, 422)
    try:
        cursor_in = CursorIn.model_validate(await parsed(body, _parse_cursor, body))
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        detail = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors)
        raise ProblemError(422, "validation", detail, errors) from None
    cursor = await run_in_threadpool(
        events.set_cursor, config.store.backend, name, cursor_in.last_seq, utcnow()
    )
    if cursor is None:
        raise ProblemError(
            422,
            "validation",
            "last_seq: beyond the last event handed out",
            [{"field": "last_seq", "message": "beyond the last event"}],
        )
    return JSONResponse(cursor)


async def delete_cursor(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    name = _consumer_name(request, 404)
    if not await run_in_threadpool(events.delete_cursor, config.store.backend, name):
        raise ProblemError(404, "not-found", "no consumer of this name")
    return Response(status_code=204)


async def cursor_route(request: Request) -> Response:
    # one route for both methods, so a GET is answered 405 with the full Allow header
    if request.method == "PUT":
        return await put_cursor(request)
    return await delete_cursor(request)


async def get_cursors(request: Request) -> Response:
    config = _config(request)
    config.auth.check(request.headers.get("authorization"))
    return JSONResponse(
        {"consumers": await run_in_threadpool(events.cursors, config.store.backend)}
    )


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


async def _on_gone(request: Request, exc: Exception) -> Response:
    # Nobody is left to read it; uvicorn drops it (and writes no access log line).
    return Response(status_code=400)


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
    bodies: BodyLimits = DEFAULT_BODIES,
    in_flight_timeout: float = 60.0,
    signing_secrets: Sequence[str] = (),
    signature_skew: float = DEFAULT_SKEW,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    purge_every: float | None = None,
    retention_policy: retention.RetentionPolicy | None = None,
    purge_batch: int = 1000,
) -> Starlette:
    """Build the app over ``db_url`` (opened and migrated now) or an open ``backend``.

    A backend opened here is closed when the app shuts down; a given one is not.
    ``signing_secrets`` turns on signature checks on writes (several: a rotation);
    ``purge_every`` (seconds) runs retention with ``retention_policy`` in the background;
    ``bodies``: what a write's body may be (:class:`~framework_ingest.limits.BodyLimits`).
    """
    if backend is not None and db_url is None:
        store_backend, owned = backend, False
    elif db_url is not None and backend is None:
        store_backend, owned = open_backend(db_url), True
    else:
        raise ValueError("give exactly one of db_url and backend")
    store = IngestStore(store_backend, in_flight_timeout=in_flight_timeout)

    policy = retention_policy or retention.RetentionPolicy()

    async def purge_periodically(every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                counts = await run_in_threadpool(
                    retention.purge, store_backend, policy, batch=purge_batch
                )
            except Exception:  # a failed round is retried next round; the server goes on
                log.exception("retention purge failed")
                continue
            if any(counts.values()):
                log.info("retention purge: %s", counts)

    async def forget_signatures(every: float) -> None:
        # Without this, a signing server that never runs retention would keep one row per
        # write forever; expired signatures are refused by their time anyway.
        while True:
            await asyncio.sleep(every)
            try:
                await run_in_threadpool(
                    retention.purge_signatures, store_backend, batch=purge_batch
                )
            except Exception:  # retried next round
                log.exception("forgetting expired signatures failed")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = []
        if purge_every:
            tasks.append(asyncio.create_task(purge_periodically(purge_every)))
        elif any(signing_secrets):
            tasks.append(asyncio.create_task(forget_signatures(max(signature_skew, 60.0))))
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if owned:
            store_backend.close()

    app = Starlette(
        routes=[
            Route("/v1/items", post_item, methods=["POST"]),
            Route("/v1/items/batch", post_batch, methods=["POST"]),
            Route("/v1/items/{dedupe_key:path}", get_item, methods=["GET"]),
            Route("/v1/events", get_events, methods=["GET"]),
            Route("/v1/events/stream", stream_events, methods=["GET"]),
            Route("/v1/events/consumers", get_cursors, methods=["GET"]),
            Route("/v1/events/consumers/{name}", cursor_route, methods=["PUT", "DELETE"]),
            Route("/v1/stats", get_stats, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={
            ProblemError: _on_problem,
            HTTPException: _on_http,
            BackendUnavailable: _on_unavailable,
            ClientGone: _on_gone,
            Exception: _on_error,
        },
        lifespan=lifespan,
    )
    app.state.ingest = IngestConfig(
        store=store,
        auth=BearerAuth(token),
        signatures=SignatureVerifier(signing_secrets, skew=signature_skew),
        bodies=bodies,
        openapi=build_openapi(
            bodies, auth=token is not None, signed=bool([s for s in signing_secrets if s])
        ),
        poll_interval=poll_interval,
    )
    return app
