"""One database connection per thread, and every one of them closed at once.

What every store of the framework and its plugins stands on (the workspace's SQLite and
PostgreSQL stores, the ingest server's backends): neither sqlite3 nor psycopg lets two
threads share a connection's transaction, so each thread gets its own, made on its
first use, and closing the store closes them all. It knows no driver and no SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ThreadConnections(Generic[C]):
    """A store's connections: one per thread, opened by ``connect`` on the thread's
    first use (and again when ``usable`` says the one it had is not), all closed by
    :meth:`close`. Neither driver lets two threads share a connection's transaction."""

    def __init__(self, connect: Callable[[], C], usable: Callable[[C], bool] | None = None) -> None:
        self._connect = connect
        self._usable = usable
        self._local = threading.local()
        self._all: list[C] = []
        self._all_lock = threading.Lock()

    def get(self) -> C:
        conn: C | None = getattr(self._local, "conn", None)
        if conn is not None and self._usable is not None and not self._usable(conn):
            conn = None
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


__all__ = ["ThreadConnections"]
