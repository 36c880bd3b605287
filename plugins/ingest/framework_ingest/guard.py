"""What the door does against clients that hold connections instead of using them.

uvicorn keeps a connection open for as long as its client likes until a first response
has been sent: a bare connect, a request head sent one byte at a time, never finished,
is never timed out. Each one holds a file descriptor, and once the process runs out of
them the event loop cannot accept anything, not even ``/healthz``. This module owns:

* the settings are :class:`framework_ingest.limits.ServerLimits`;
* the HTTP protocol classes (uvicorn's h11 or httptools one, extended): a connection
  that is waiting for a request head (just opened, or after its last response) must
  complete the head within ``timeout_header`` seconds of starting to wait, however it
  trickles bytes, or it is closed;
* :class:`ConnectionGuard`: at most ``limit_connections`` connections are open. When a
  new one arrives at the limit, the connection that has been waiting longest for a
  request head is closed to make room; when none is waiting (all are inside a request),
  the newcomer is answered a canned ``503`` and closed, without logging a traceback;
* :class:`GuardedListener`: the listening socket, which asks the guard before each
  ``accept()`` so the process never holds more descriptors than the limit (asyncio
  accepts a whole backlog in one pass otherwise, and pauses 1 s on ``EMFILE``);
* :class:`RequestLimit`: at most ``limit_concurrency`` requests inside the app at once;
  beyond, ``503`` problem+json with ``Retry-After``. (uvicorn's own ``limit_concurrency``
  counts idle connections as well, so idle sockets would turn real requests away: the
  very attack this module answers.)

It must not read request bodies (the app times those out) nor log per connection: a
hostile client must not be able to fill the log.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from framework_ingest.problems import PROBLEM_MEDIA_TYPE, problem

log = logging.getLogger("framework_ingest")

WARN_EVERY = 10.0  # seconds between two warnings of the same kind
PENDING_LOST = 5.0  # an accepted connection whose protocol is not made by then never will be

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def _canned_503() -> bytes:
    body = json.dumps(
        problem(503, "unavailable", "the server is at its connection limit; retry later")
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        f"content-type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "retry-after: 1\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


SHED_RESPONSE = _canned_503()


class _RateLimitedWarning:
    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def __call__(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -WARN_EVERY) >= WARN_EVERY:
            self._last[kind] = now
            log.warning(message, *args)


_warn = _RateLimitedWarning()


class ConnectionGuard:
    """The open connections of one server, in the order they started waiting for a
    request head. Lives on the event loop's thread only (no locks)."""

    def __init__(self, limit: int, timeout_header: float) -> None:
        if limit < 1:
            raise ValueError("limit_connections must be at least 1")
        self.limit = limit
        self.timeout_header = timeout_header
        self.open: set[_Guarded] = set()
        self.pending = 0  # accepted by the listener; protocol not created yet
        self._pending_since = 0.0
        self.waiting: OrderedDict[_Guarded, None] = OrderedDict()
        self.closing = 0  # closed by us, descriptor not released yet
        self.evicted = 0
        self.shed = 0
        self.timed_out = 0

    def count(self) -> int:
        return len(self.open) + self.pending

    def may_accept(self) -> bool | None:
        """True: accept one more. False: room is being made (try on the loop's next
        pass). None: nothing can make room; accept the newcomer only to refuse it."""
        if self.pending and time.monotonic() - self._pending_since > PENDING_LOST:
            self.pending = 0  # their protocols were never made: asyncio dropped them
        excess = self.count() + 1 - self.limit
        if excess <= 0:
            return True
        while self.closing < excess and self.waiting:
            self._evict(next(iter(self.waiting)))
        if self.closing or self.pending:
            # Just accepted connections become evictable once their protocol exists,
            # one or two loop passes from now.
            return False
        return None

    def accepted(self) -> None:
        if not self.pending:
            self._pending_since = time.monotonic()
        self.pending += 1

    def _evict(self, protocol: _Guarded) -> None:
        self.waiting.pop(protocol, None)
        self.evicted += 1
        protocol.abort_by_guard()

    def refuse(self, conn: socket.socket) -> None:
        """Answer a connection that finds every slot inside a request, and close it."""
        self.shed += 1
        _warn(
            "shed",
            "connection limit %d reached and no connection is idle: new connections "
            "are answered 503 (see --limit-connections)",
            self.limit,
        )
        try:
            conn.setblocking(False)
            conn.send(SHED_RESPONSE)
        except OSError:
            pass  # it is being closed anyway
        finally:
            conn.close()

    def opened(self, protocol: _Guarded) -> None:
        if self.pending:
            self.pending -= 1
        self.open.add(protocol)
        if len(self.open) > self.limit:
            # Only reached without the listener's gate (uvloop accepts by itself).
            if self.waiting:
                self._evict(next(iter(self.waiting)))
            else:
                self.shed += 1
                protocol.shed_by_guard()

    def closed(self, protocol: _Guarded) -> None:
        self.open.discard(protocol)
        self.waiting.pop(protocol, None)
        if protocol.closed_by_guard:
            self.closing -= 1


class GuardedListener(socket.socket):
    """The listening socket; asks its guard before every ``accept()`` (asyncio's loop
    calls it). A refused ``accept`` ends the loop's accepting pass, and the connection
    stays queued in the kernel, which costs no descriptor."""

    guard: ConnectionGuard | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        guard = self.guard
        if guard is None:
            return super().accept()
        verdict = guard.may_accept()
        if verdict is False:
            raise BlockingIOError(errno.EAGAIN, "waiting for a connection slot")
        conn, addr = super().accept()
        if verdict is None:
            guard.refuse(conn)
            raise BlockingIOError(errno.EAGAIN, "connection refused at the limit")
        guard.accepted()
        return conn, addr


class _Guarded(asyncio.Protocol):
    """Extends a uvicorn HTTP protocol (the other base of the concrete classes) with
    the request-head deadline and the guard's bookkeeping."""

    guard: ConnectionGuard
    transport: asyncio.Transport
    cycle: Any
    loop: asyncio.AbstractEventLoop

    _head_timer: asyncio.TimerHandle | None = None
    _waiting = False
    closed_by_guard = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened(self)
        self._sync()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._stop_waiting()
        self.guard.closed(self)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._sync()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._sync()

    def _sync(self) -> None:
        """Waiting for a request head: no request yet, or the last one answered (a
        pipelined request parsed meanwhile has a fresh, unanswered cycle)."""
        if self.transport.is_closing():
            self._stop_waiting()
        elif self.cycle is None or self.cycle.response_complete:
            self._start_waiting()
        else:
            self._stop_waiting()

    def _start_waiting(self) -> None:
        # Bytes of a head that trickles in do not move the deadline, nor the place in line.
        if self._waiting:
            return
        self._waiting = True
        self.guard.waiting[self] = None
        self._head_timer = self.loop.call_later(self.guard.timeout_header, self._head_timeout)

    def _stop_waiting(self) -> None:
        if not self._waiting:
            return
        self._waiting = False
        self.guard.waiting.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.guard.timed_out += 1
            self.abort_by_guard()

    def abort_by_guard(self) -> None:
        # abort, not close: close waits for the write buffer to drain, and a client that
        # does not read would keep its descriptor forever.
        self._stop_waiting()
        if not self.closed_by_guard and not self.transport.is_closing():
            self.closed_by_guard = True
            self.guard.closing += 1
            self.transport.abort()

    def shed_by_guard(self) -> None:
        self.transport.write(SHED_RESPONSE)
        self.transport.close()


class GuardedH11Protocol(_Guarded, H11Protocol):
    pass


def protocol_class(http: str, guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's protocol for ``http`` ("h11" or "httptools"), bound to ``guard``."""
    base: type[_Guarded]
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = type("GuardedHttpToolsProtocol", (_Guarded, HttpToolsProtocol), {})
    elif http == "h11":
        base = GuardedH11Protocol
    else:
        raise ValueError(f"unknown HTTP implementation {http!r}")
    return type(base.__name__, (base,), {"guard": guard})


def on_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio logs a traceback for every accept that fails for want of descriptors
    (then pauses accepting for 1 s): one warning in a while says the same."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES:
        _warn(
            "accept",
            "%s: %s (lower --limit-connections or raise the descriptor limit, ulimit -n)",
            context.get("message", "out of resources"),
            exc.strerror,
        )
        return
    loop.default_exception_handler(context)


class RequestLimit:
    """ASGI wrapper: at most ``limit`` HTTP requests inside the app at once."""

    def __init__(self, app: Any, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit_concurrency must be at least 1")
        self.app = app
        self.limit = limit
        self.in_flight = 0
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.refused += 1
            _warn(
                "concurrency",
                "%d requests in progress: new ones are answered 503 (see --limit-concurrency)",
                self.limit,
            )
            body = json.dumps(
                problem(503, "unavailable", "the server is busy; retry later")
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", b"1"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
