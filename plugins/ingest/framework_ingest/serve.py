"""Running the app under uvicorn: in the foreground (the CLI) or in a background thread
(tests and benchmarks), always on a socket this module binds, so port 0 works and the
real port is known before the first request.

The server is uvicorn with the door's guards (:mod:`framework_ingest.guard`): a cap on
open connections enforced at ``accept()``, a deadline for request heads, a cap on
requests in progress. This module owns the server's lifecycle (the generic part, the
socket and the thread, is :mod:`framework.serving`); it must not log request headers
(uvicorn's access log prints the request line and status only).
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
from typing import Any

import uvicorn

from framework.serving import ServerThread, listen, serve
from framework_ingest.guard import (
    ConnectionGuard,
    GuardedListener,
    RequestLimit,
    on_loop_error,
    protocol_class,
)
from framework_ingest.limits import ServerLimits


def bind(host: str, port: int) -> socket.socket:
    """A listening :class:`GuardedListener` (its guard is attached when served)."""
    return listen(host, port, backlog=2048, factory=GuardedListener)


def best_http() -> str:
    """httptools when installed (faster parsing), h11 otherwise."""
    return "httptools" if importlib.util.find_spec("httptools") else "h11"


def best_loop() -> str:
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def make_config(
    app: Any,
    *,
    access_log: bool,
    log_level: str = "info",
    http: str | None = None,
    loop: str | None = None,
    limits: ServerLimits | None = None,
    guard: ConnectionGuard | None = None,
) -> uvicorn.Config:
    """uvicorn's settings; ``guard`` (made from ``limits`` when not given) must be the
    one attached to the listening socket."""
    limits = limits or ServerLimits()
    guard = guard or ConnectionGuard(limits.connections(), limits.timeout_header)
    return uvicorn.Config(
        RequestLimit(app, limits.limit_concurrency),
        access_log=access_log,
        log_level=log_level,
        http=protocol_class(http or best_http(), guard),
        loop=loop or best_loop(),
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=5,
        # float: uvicorn only hands it to loop.call_later
        timeout_keep_alive=limits.timeout_keep_alive,  # type: ignore[arg-type]
        # None: RequestLimit counts requests; uvicorn's would count idle connections too
        limit_concurrency=None,
    )


class GuardedServer(uvicorn.Server):
    """uvicorn's server with the loop's descriptor-exhaustion reports made quiet."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(on_loop_error)
        await super().startup(sockets=sockets)


def _guarded(sock: socket.socket, limits: ServerLimits) -> ConnectionGuard:
    guard = ConnectionGuard(limits.connections(), limits.timeout_header)
    if isinstance(sock, GuardedListener):
        sock.guard = guard
    return guard


def run_foreground(
    app: Any,
    sock: socket.socket,
    *,
    access_log: bool = True,
    http: str | None = None,
    loop: str | None = None,
    limits: ServerLimits | None = None,
) -> None:
    """Serve on a bound socket until interrupted (SIGINT/SIGTERM), as
    ``framework ingest serve`` does."""
    limits = limits or ServerLimits()
    config = make_config(
        app,
        access_log=access_log,
        http=http,
        loop=loop,
        limits=limits,
        guard=_guarded(sock, limits),
    )
    serve(GuardedServer(config), sock)


class BackgroundServer(ServerThread):
    """The app served by uvicorn in a thread on ``host``:port 0 (or a given port).

    ``start()`` returns once the server accepts connections; ``stop()`` shuts it down and
    joins the thread. Usable as a context manager.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        access_log: bool = False,
        log_level: str = "warning",
        http: str | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.app = app
        sock = bind(host, port)
        limits = limits or ServerLimits()
        self.guard = _guarded(sock, limits)
        config = make_config(
            app,
            access_log=access_log,
            log_level=log_level,
            http=http,
            limits=limits,
            guard=self.guard,
        )
        super().__init__(GuardedServer(config), sock, host, name="ingest-server")
