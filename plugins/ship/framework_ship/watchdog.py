"""A total deadline per request: the whole exchange, not each read.

requests (and urllib3 under it) bound a request only per socket operation: a connect
timeout, then a read timeout that every byte resets, so an endpoint dripping a byte
a second holds a request for as long as it likes. This module owns the bound on the
whole exchange (connect, send, headers, body):

* :class:`Watchdog`: one daemon thread per client. A request runs inside
  ``with watchdog.watch(seconds):``; when the deadline passes first, the thread shuts
  the request's socket down (both ways), which ends the blocked read at once with a
  connection error, and marks the :class:`Watch` ``timeout``. :meth:`Watchdog.stop_within`
  brings every deadline, present and future, to at most ``now + grace``: what a stop
  (SIGINT/SIGTERM) waits for, at most; such a watch ends ``abandoned``.
* :func:`watched_session`: a ``requests.Session`` whose connection pools tell the
  watch of the calling thread which connection it uses (urllib3's ``_get_conn`` is
  the one place a pooled connection is handed to a request).

It does not decide what a timed-out request means (that is :mod:`framework_ship.client`)
and never retries. Name resolution is the system resolver's: it holds no socket to
shut, so a watch that expires during it ends as soon as the connection exists.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3 import PoolManager
from urllib3.connectionpool import HTTPConnectionPool

TIMEOUT = "timeout"
ABANDONED = "abandoned"
# How often an expired watch whose connection does not exist yet (connecting, resolving)
# is looked at again: the overrun past the deadline is at most this.
_RETRY_S = 0.05

_current = threading.local()


class Watch:
    """The deadline of one request (monotonic seconds) and how it ended: ``why`` is
    None while it may still finish, ``timeout`` or ``abandoned`` once the watchdog
    ended it."""

    __slots__ = ("_dog", "conn", "deadline", "done", "why")

    def __init__(self, dog: Watchdog, deadline: float) -> None:
        self._dog = dog
        self.deadline = deadline
        self.conn: Any = None  # the pooled connection the request uses, once it has one
        self.why: str | None = None
        self.done = False

    def __enter__(self) -> Watch:
        self._dog._add(self)
        _current.watch = self
        return self

    def __exit__(self, *exc: object) -> None:
        _current.watch = None
        self._dog._remove(self)


class Watchdog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Reentrant: stop_within runs in a signal handler, which may interrupt the main
        # thread while it holds this lock (registering its own request).
        self._cond = threading.Condition(threading.RLock())
        self._watches: set[Watch] = set()
        self._stop_at: float | None = None
        self._wake_at = float("inf")
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, seconds: float) -> Watch:
        return Watch(self, self._clock() + seconds)

    def stop_within(self, grace: float) -> None:
        """Every request in flight, and any started later, ends within ``grace`` s."""
        with self._cond:
            until = self._clock() + max(0.0, grace)
            if self._stop_at is None or until < self._stop_at:
                self._stop_at = until
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    # the watches ------------------------------------------------------------------
    def _due(self, watch: Watch) -> tuple[float, str]:
        if self._stop_at is not None and self._stop_at < watch.deadline:
            return self._stop_at, ABANDONED
        return watch.deadline, TIMEOUT

    def _add(self, watch: Watch) -> None:
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ship-watchdog", daemon=True)
                self._thread.start()
            elif self._due(watch)[0] < self._wake_at:
                # Only when idle, or after a shorter --timeout: the usual next request
                # is due after the ones already watched, so the thread sleeps on.
                self._cond.notify()

    def _remove(self, watch: Watch) -> None:
        with self._cond:
            watch.done = True
            self._watches.discard(watch)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = self._clock()
                wake = float("inf")
                for watch in list(self._watches):
                    due, why = self._due(watch)
                    if due > now:
                        wake = min(wake, due)
                        continue
                    if watch.why is None:
                        watch.why = why
                    if not _shut(watch.conn):
                        wake = min(wake, now + _RETRY_S)  # no socket yet: look again soon
                    else:
                        self._watches.discard(watch)
                self._wake_at = wake
                self._cond.wait(None if wake == float("inf") else max(0.0, wake - now))


def _shut(conn: Any) -> bool:
    """Shut the connection's socket down both ways; False when it has none yet.

    The plain socket's shutdown, also under TLS: ``SSLSocket.shutdown`` would drop its
    SSL object under the thread reading through it. A shut socket wakes that reader
    (EOF) and is dropped by urllib3 instead of going back to the pool."""
    sock = getattr(conn, "sock", None)
    if sock is None:
        return False
    with contextlib.suppress(OSError):  # already closed: nothing left to wait on
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    return True


class _TellsTheWatch:
    """Mixed into urllib3's pool classes: the request of this thread learns its
    connection (a new or a pooled keep-alive one) before it is used."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = cast(Any, super())._get_conn(timeout)
        watch = getattr(_current, "watch", None)
        if watch is not None:
            watch.conn = conn
        return conn


@functools.cache
def _watched_pool(cls: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    return type(f"Watched{cls.__name__}", (_TellsTheWatch, cls), {})


def _watch_pools(manager: PoolManager) -> PoolManager:
    classes = manager.pool_classes_by_scheme
    if not all(issubclass(c, _TellsTheWatch) for c in classes.values()):
        # Whatever pools the manager makes (plain, TLS, through a SOCKS proxy), watched.
        manager.pool_classes_by_scheme = {s: _watched_pool(c) for s, c in classes.items()}
    return manager


class WatchedAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` whose pools (direct or through a proxy) are watched."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        return _watch_pools(super().proxy_manager_for(proxy, **proxy_kwargs))


def watched_session() -> requests.Session:
    """A ``requests.Session`` whose requests a :class:`Watchdog` can end."""
    session = requests.Session()
    adapter = WatchedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


__all__ = ["ABANDONED", "TIMEOUT", "Watch", "Watchdog", "WatchedAdapter", "watched_session"]
