"""The dashboard's Starlette app: GET only, read-only, local by default.

Routes::

    GET /                         every job: state, rows, items, last run
    GET /jobs/{job}               one job: live progress, misbehaving URLs, fill rates,
                                  drift, holds, shipping
    GET /jobs/{job}/sections      the page's lower part alone (the script swaps it in
                                  after a run event)
    GET /jobs/{job}/stream        server-sent events: ``log`` (a line of the event log,
                                  its id the log's cursor after it), ``progress`` (the
                                  live counts), ``series`` (pages/s so far, once)
    GET /api/jobs/{job}           the job's report as JSON (``status --json`` and more)
    GET /metrics                  Prometheus text format
    GET /static/...               the page's script and style sheet

A stream that reconnects sends ``Last-Event-ID`` (the browser does it by itself): the
lines after that cursor follow, none lost and none twice. Every response forbids inline
script and anything from another origin (Content-Security-Policy), so a page works, and
only works, offline. The workspace reads run in the thread pool: the event loop only
waits.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework_dashboard import metrics, pages
from framework_dashboard.jobs import Job
from framework_dashboard.reader import Reader, safely

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEARTBEAT_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
STOP_CHECK_S = 0.1
RETRY_MS = 2000  # how soon a browser reconnects a stream that broke


class _Headers:
    """The security headers on every response (plain ASGI: a stream passes through
    untouched, message by message)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CSP
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
                if "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(reader: Reader, *, bind: str = "127.0.0.1", interval: float = 1.0) -> Starlette:
    """``bind`` is what the header says the dashboard serves on; ``interval`` how often
    a stream looks for new lines and counts (seconds). ``app.state.stopping``, once
    set (by :mod:`~framework_dashboard.serve` at a stop), ends every open stream."""
    stopping = threading.Event()

    async def job_of(request: Request) -> Job:
        name = request.path_params["job"]
        job = await run_in_threadpool(reader.job, name)
        if job is None:
            raise _NotFound(name)
        return job

    async def index(request: Request) -> Response:
        def read() -> list[tuple[Job, dict[str, Any]]]:
            return [(job, reader.report(job, top=1)) for job in reader.jobs().values()]

        jobs = await run_in_threadpool(read)
        return HTMLResponse(pages.list_page(jobs, bind=bind, root=str(reader.root)))

    async def job_page(request: Request) -> Response:
        job = await job_of(request)

        def read() -> str:
            report = reader.report(job)
            progress, live = safely(lambda: reader.progress(job), (None, None))
            events, cursor = safely(lambda: reader.recent_events(job, pages.EVENTS_SHOWN), ([], 0))
            series = progress.series() if progress is not None else []
            return pages.job_page(job, report, live, series, events, cursor, bind=bind)

        return HTMLResponse(await run_in_threadpool(read))

    async def job_sections(request: Request) -> Response:
        job = await job_of(request)
        report = await run_in_threadpool(reader.report, job)
        return HTMLResponse(pages.sections(report))

    async def job_json(request: Request) -> Response:
        job = await job_of(request)
        report = await run_in_threadpool(reader.report, job)
        return JSONResponse(report)

    async def stream(request: Request) -> Response:
        job = await job_of(request)
        cursor = _cursor(request)
        return StreamingResponse(
            _events(reader, job, cursor, interval, stopping),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def metrics_endpoint(request: Request) -> Response:
        body = await run_in_threadpool(metrics.exposition, reader)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/jobs/{job}", job_page),
            Route("/jobs/{job}/sections", job_sections),
            Route("/jobs/{job}/stream", stream),
            Route("/api/jobs/{job}", job_json),
            Route("/metrics", metrics_endpoint),
            # browsers ask for it unbidden: an empty answer, not a 404 in their console
            Route("/favicon.ico", lambda request: Response(status_code=204)),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[Middleware(_Headers)],
        exception_handlers={_NotFound: _not_found},
    )
    app.state.reader = reader
    app.state.stopping = stopping
    return app


class _NotFound(Exception):
    pass


async def _not_found(request: Request, exc: Exception) -> Response:
    return HTMLResponse(
        pages.page("not found", f"<h1>No job {pages.e(exc)}</h1>", bind=""), status_code=404
    )


def _cursor(request: Request) -> int | None:
    """Where a stream starts: after the line the browser saw last (``Last-Event-ID``, on
    a reconnect), else after the line the page was rendered with (``?after=``), else at
    the log's end."""
    for raw in (request.headers.get("last-event-id"), request.query_params.get("after")):
        if raw is not None and raw.strip().isdigit():
            return int(raw.strip())
    return None


def sse(event: str, data: Any, event_id: int | None = None) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    head = f"id: {event_id}\n" if event_id is not None else ""
    # JSON has no raw newline in it: one data line per message
    return f"{head}event: {event}\ndata: {text}\n\n"


async def _events(
    reader: Reader, job: Job, cursor: int | None, interval: float, stopping: threading.Event
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    yield f"retry: {RETRY_MS}\n\n"
    if cursor is None:
        _, cursor = await run_in_threadpool(safely, lambda: reader.recent_events(job, 0), ([], 0))
    progress, live = await run_in_threadpool(safely, lambda: reader.progress(job), (None, None))
    yield sse("series", progress.series() if progress is not None else [])
    if live is not None:
        yield sse("progress", _live(live, progress))
    quiet_since = loop.time()
    while not stopping.is_set():
        at = cursor or 0
        lines, after = await run_in_threadpool(
            safely, functools.partial(reader.events, job, at), ([], at)
        )
        for pos, record in lines:
            yield sse("log", record, pos)
        cursor = after
        progress, fresh = await run_in_threadpool(
            safely, lambda: reader.progress(job), (progress, live)
        )
        if fresh is not None and fresh is not live:
            live = fresh
            yield sse("progress", _live(fresh, progress))
            quiet_since = loop.time()
        elif loop.time() - quiet_since > HEARTBEAT_S:
            yield ": keep-alive\n\n"
            quiet_since = loop.time()
        if len(lines) < 200:  # a backlog is sent at once; then look again in a while
            wake = loop.time() + interval
            while not stopping.is_set() and loop.time() < wake:
                # in short steps: a stop ends the stream at once, not after the interval
                await asyncio.sleep(min(STOP_CHECK_S, interval))


def _live(live: dict[str, Any], progress: Any) -> dict[str, Any]:
    series = progress.series() if progress is not None else []
    return {
        **live,
        "eta": pages.eta_text(live.get("eta_s"), bool(live.get("crawl_running"))),
        "point": series[-1] if series else None,
    }


__all__ = ["create_app", "sse"]
