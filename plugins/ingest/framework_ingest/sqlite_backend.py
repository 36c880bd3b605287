"""SQLite backend: stdlib ``sqlite3`` in WAL mode, one connection per thread.

Write transactions start with ``BEGIN IMMEDIATE`` so that a transaction never has to
upgrade a read lock (an upgrade that SQLite's busy handler cannot wait for), and they are
also serialized inside the process by a lock: a Python lock hands the database over
faster and more fairly than SQLite's sleeping busy handler. Other processes (the
``framework ingest claim`` CLI beside a running server) wait on ``busy_timeout``.
The database file is created here, before SQLite opens it: private to its owner (0600,
whatever the umask; SQLite gives its ``-wal`` and ``-shm`` files the same mode), and
never through a symbolic link, for the file or its sidecars.
This module owns connections and transactions only; the SQL lives in the store.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from framework.connections import ThreadConnections
from framework_ingest.db import Backend, Params, Row, Tx
from framework_ingest.errors import BackendUnavailable, IngestConfigError

BUSY_TIMEOUT_MS = 30_000
_SIDECARS = ("-wal", "-shm", "-journal")


def _create_private(path: Path) -> None:
    """Create the database file 0600 unless it exists; refuse symbolic links, which
    SQLite would follow to write wherever they point."""
    for name in (path, *(path.with_name(path.name + s) for s in _SIDECARS)):
        if name.is_symlink():
            raise IngestConfigError(
                f"{name} is a symbolic link: the ingest server never writes through one; "
                "replace it with a file or remove it"
            )
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        if path.is_symlink():  # planted since the check above
            raise IngestConfigError(f"{path} is a symbolic link") from None
        return  # kept as it is: its owner chose its mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted since the check above
            raise IngestConfigError(f"{path} is a symbolic link") from None
        raise IngestConfigError(f"cannot create {path}: {exc.strerror}") from exc
    # The mode given to open() is masked by the umask; 0600 is meant whatever it is.
    os.fchmod(fd, 0o600)
    os.close(fd)


class _SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cur = self._conn.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []


class SqliteBackend(Backend):
    dialect = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_ms: int | None = None) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms
        if not self.path.parent.exists():
            raise IngestConfigError(f"folder of the database does not exist: {self.path.parent}")
        _create_private(self.path)
        self._write_lock = threading.Lock()
        self._conns = ThreadConnections(self._open)

    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def _open(self) -> sqlite3.Connection:
        # Switching a new file to WAL takes an exclusive lock, and SQLite answers
        # "database is locked" at once, without its busy handler, when another
        # connection is opening the same file at that instant (three servers started
        # together on one empty database). That race is retried until busy_timeout.
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self.busy_timeout_ms / 1000,
                )
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
                conn.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL survives a crash of the process; only power loss can
                # lose the last commits. The raw-rate benchmark uses the same settings.
                conn.execute("PRAGMA synchronous = NORMAL")
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise BackendUnavailable(f"cannot open {self.path}: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                raise BackendUnavailable(f"cannot open {self.path}: {exc}") from exc

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        conn = self._conn()
        if write:
            with self._write_lock:
                yield from self._run(conn, "BEGIN IMMEDIATE")
        else:
            yield from self._run(conn, "BEGIN")

    @staticmethod
    def _run(conn: sqlite3.Connection, begin: str) -> Iterator[Tx]:
        try:
            conn.execute(begin)
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"database busy: {exc}") from exc
        try:
            yield _SqliteTx(conn)
        except BaseException:
            # SQLite may have rolled back already (disk full, I/O error): a second
            # error must not hide the first.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise BackendUnavailable(f"commit failed: {exc}") from exc

    @contextmanager
    def migration_lock(self) -> Iterator[Tx]:
        # BEGIN IMMEDIATE already excludes every other writer, in any process.
        with self.transaction(write=True) as tx:
            yield tx

    def run_script(self, sql: str) -> None:
        conn = self._conn()
        statement = ""
        for line in sql.splitlines(keepends=True):
            statement += line
            # complete_statement knows that a trigger body's ';' does not end it.
            if sqlite3.complete_statement(statement):
                conn.execute(statement)
                statement = ""
        if statement.strip() and not all(
            ln.strip().startswith("--") or not ln.strip() for ln in statement.splitlines()
        ):
            raise IngestConfigError(f"incomplete statement in migration: {statement[:80]!r}")

    def close(self) -> None:
        self._conns.close()
