"""Connections, transactions and schema of the SQLite workspace store.

Owns what every SQLite store method stands on: the schema (DDL, version check), one
connection per thread, ``BEGIN IMMEDIATE`` transactions (``_run``, as PostgreSQL's),
and the background checkpoint thread. It holds no queue or item logic
(:mod:`framework.workspace.write`, :mod:`framework.workspace.sqlite`) and no reads
(:mod:`framework.workspace.read`); the SQL both engines share is in
:mod:`framework.workspace.sql`.

Checkpoints (copying the WAL into the database, with an fsync) run on a background
thread with its own connection (:class:`_Checkpointer`), so the committing thread - the
crawl's reactor - never stalls on a disk flush. They run every few commits, and the WAL
file is truncated once it outgrows :data:`WAL_SIZE_LIMIT`, so the journal stays a few MB
whatever the database size and cannot fill a disk long before the data does. SQLite's
own automatic checkpoint stays on at a higher threshold as the fallback should that
thread fall behind.

Faults of the disk or the file become the error tree here (:func:`workspace_fault`): a
full disk is :class:`~framework.errors.WorkspaceFull` naming the space to free, a
damaged file is :class:`~framework.errors.WorkspaceBroken`; both exit 4, one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

from framework.connections import ThreadConnections
from framework.errors import FrameworkError, WorkspaceBroken, WorkspaceError, WorkspaceFull
from framework.files import create_private
from framework.workspace.records import SCHEMA_VERSION
from framework.workspace.schema_tables import SQLITE_TYPES, shared_tables
from framework.workspace.sql import (  # CHUNK and the meta names: importable from here too
    CHUNK,
    READ_WITH_META,
    ROWS_RESET_META,
    SQLITE,
    Conn,
    Dialect,
    utc_now,
)
from framework.workspace.versions import meta_version

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
# Outcomes (pages) committed between two background checkpoints. Each checkpoint copies
# the newest copy of every page the WAL holds and syncs the file, and a group commit
# rewrites the same hot pages (indexes, the rows table) page after page, so fewer
# checkpoints copy less: 64 took 0.917x the CPU of a crawl that checkpointed every 8
# (32: 0.955x; docs/benchmarks.md, "Fewer checkpoints"), the WAL peaking at ~2.5 MB
# on the demo's pages, under WAL_SIZE_LIMIT and far under the inline fallback.
CHECKPOINT_EVERY = 64
AUTOCHECKPOINT_PAGES = 2048  # fallback: SQLite checkpoints inline past ~8 MB of WAL
WAL_SIZE_LIMIT = 4 * 2**20  # past this the background thread truncates the WAL file,
WAL_TRUNCATE_MIN = 2**20  # ... or past the database's own size, if over this
FREE_SPACE_MIN = 16 * 2**20  # the least a full disk is asked to free
MAX_PAGES_ENV = "FRAMEWORK_TEST_SQLITE_MAX_PAGES"  # test-only: simulate a full disk
# SQLite's primary result codes (the low byte of an extended code)
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- AUTOINCREMENT: a row id is never reused, even after reset_rows, so ids in the
-- JSONL logs always name one row.
CREATE TABLE IF NOT EXISTS rows (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint      TEXT NOT NULL UNIQUE,
    kind             TEXT NOT NULL,
    url              TEXT NOT NULL,
    method           TEXT NOT NULL,
    body             TEXT,
    body_type        TEXT,
    parent_id        INTEGER,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    retryable        INTEGER NOT NULL DEFAULT 1,
    last_error_kind  TEXT,
    last_error       TEXT,
    last_http_status INTEGER,
    context          TEXT NOT NULL DEFAULT '{}',
    item_key         TEXT,
    required         INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    -- schema 3: the lease of a crawl worker on the row (framework/workspace/leases.py)
    lease_owner      INTEGER,
    lease_expires_at REAL,
    lease_token      INTEGER
);
-- resumable() walks only rows that are not ok: O(pending), whatever the total.
CREATE INDEX IF NOT EXISTS rows_open ON rows (id) WHERE status != 'ok';
CREATE INDEX IF NOT EXISTS rows_kind_status ON rows (kind, status);
CREATE INDEX IF NOT EXISTS rows_item ON rows (item_key) WHERE item_key IS NOT NULL;
"""
    + shared_tables(SQLITE_TYPES)
    + """
-- schema 3: the crawl processes that worked on the workspace (leases.py)
CREATE TABLE IF NOT EXISTS workers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at   REAL
);
"""
)
# schema 3: columns an older `rows` table gains (ALTER TABLE ADD COLUMN: O(1), no copy)
_ROW_LEASE_COLUMNS = (
    ("lease_owner", "INTEGER"),
    ("lease_expires_at", "REAL"),
    ("lease_token", "INTEGER"),
)
# after the columns exist: the heartbeat and the single-process reset find leased rows
# through it (an ok row drops its lease, so it stays small)
_LEASE_INDEX = (
    "CREATE INDEX IF NOT EXISTS rows_leased ON rows (lease_owner) WHERE lease_owner IS NOT NULL"
)


def space_needed(state: Path) -> int:
    """Free bytes a crawl needs to go on after a full disk: room for the WAL to reach its
    limit twice over and for the database to grow by a quarter, at least 16 MB."""
    try:
        size = state.stat().st_size
    except OSError:
        size = 0
    return max(FREE_SPACE_MIN, 2 * WAL_SIZE_LIMIT + size // 4)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def workspace_fault(exc: BaseException, state: Path) -> FrameworkError | None:
    """The error-tree form of a storage failure, or None when it is not a disk or file
    fault: a full disk (SQLITE_FULL, ENOSPC, EDQUOT) or a damaged file (SQLITE_CORRUPT,
    SQLITE_NOTADB). One line each, saying what is wrong and what to do."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    full = primary == SQLITE_FULL or (
        isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    )
    folder = state.parent
    if full:
        try:
            free = f"{_mb(shutil.disk_usage(folder).free)} free now"
        except OSError:
            free = "free space unknown"
        return WorkspaceFull(
            f"{folder}: the disk is full ({free}); free at least "
            f"{_mb(space_needed(state))} there and run again (nothing committed was lost)"
        )
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return WorkspaceBroken(
            f"{state}: the workspace state is damaged ({exc}); restore the workspace "
            "folder from a backup, or start over with `crawl --fresh`"
        )
    return None


class _Checkpointer(threading.Thread):
    """PASSIVE checkpoints on their own connection, when poked. A passive checkpoint
    never blocks writers or readers; the GIL is released while SQLite works."""

    def __init__(self, path: Path) -> None:
        super().__init__(name=f"checkpoint:{path.name}", daemon=True)
        self.path = path
        self._wake = threading.Event()
        self._stopping = False
        self.runs = 0
        self.truncations = 0

    def poke(self) -> None:
        self._wake.set()

    def run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.runs += 1
                    if not busy and log == done and self._wal_size() > self._wal_limit():
                        # Everything is in the database already: TRUNCATE only waits
                        # for the writer lock briefly, then empties the file. A busy
                        # writer or reader makes it give up at once (no busy wait).
                        conn.execute("PRAGMA busy_timeout = 0")
                        try:
                            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                            self.truncations += 1
                        finally:
                            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                except sqlite3.Error:
                    continue  # the next poke retries; autocheckpoint is the fallback
        finally:
            conn.close()

    def _wal_size(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def _wal_limit(self) -> int:
        """The WAL may be as large as the database (at least 1 MB), at most 4 MB: a
        small workspace on a small disk is not filled by its journal."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            size = 0
        return min(WAL_SIZE_LIMIT, max(WAL_TRUNCATE_MIN, size))

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self.join(timeout=60)


class SqliteBase:
    """Connections and transactions of one state file; build stores with :meth:`open`."""

    dialect: Dialect = SQLITE

    def __init__(
        self, path: Path, *, readonly: bool = False, clock: Callable[[], str] = utc_now
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._clock = clock
        self._conns = ThreadConnections(self._connect)
        self._guard = threading.Lock()  # the checkpointer's
        self._checkpointer: _Checkpointer | None = None
        self._commits = 0

    @classmethod
    def open(
        cls, path: str | Path, *, readonly: bool = False, clock: Callable[[], str] = utc_now
    ) -> Self:
        """Open (and, unless ``readonly``, create or check the schema of) a state file."""
        store = cls(Path(path), readonly=readonly, clock=clock)
        if readonly and not store.path.is_file():
            raise WorkspaceError(f"no workspace state at {store.path}")
        if not readonly:
            _refuse_foreign(store.path)
            create_private(store.path)  # SQLite would make it 0644 (and its WAL with it)
        try:
            conn = store._conn()
            if readonly:
                store._check_version(conn)
            else:
                store._ensure_schema(conn)
        except sqlite3.DatabaseError as exc:
            store.close()
            fault = workspace_fault(exc, store.path)
            if fault is not None:
                raise fault from exc
            raise WorkspaceError(f"{store.path}: not a readable workspace ({exc})") from exc
        except BaseException:
            store.close()
            raise
        return store

    # connections -------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        return self._conns.get()

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            # mode=ro still reads a live WAL (the -shm of a running crawl) but never
            # writes the database; status uses it while a crawl is running.
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not self.readonly:
            _enter_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            cap = os.environ.get(MAX_PAGES_ENV)
            if cap:
                # fault injection for tests: a database that may not grow past N pages
                # fails its next commit with SQLITE_FULL, exactly as a full disk does
                conn.execute(f"PRAGMA max_page_count = {int(cap)}")
        conn.execute("PRAGMA foreign_keys = OFF")
        return conn

    def close(self) -> None:
        with self._guard:
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.stop()  # before the connections: it may still be writing
        self._conns.close()

    def _checkpoint_soon(self) -> None:
        with self._guard:
            if self._checkpointer is None:
                self._checkpointer = _Checkpointer(self.path)
                self._checkpointer.start()
            self._checkpointer.poke()

    def _check_version(self, conn: sqlite3.Connection) -> int:
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if not has_meta:
            if self.readonly:
                raise WorkspaceError(f"{self.path}: not a workspace state file (no meta table)")
            return 0
        return meta_version(conn, "schema_version", SCHEMA_VERSION, str(self.path), "schema")

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        # Under BEGIN IMMEDIATE so two processes opening a new workspace at once create
        # the schema once.
        with self._tx(conn):
            if self._check_version(conn) == SCHEMA_VERSION:
                return
            if (
                conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'rows' AND type = 'table'"
                ).fetchone()
                and not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
            ):
                raise WorkspaceError(f"{self.path}: has a `rows` table but no schema version")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            have = {r[1] for r in conn.execute("PRAGMA table_info(rows)")}
            for name, sqltype in _ROW_LEASE_COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE rows ADD COLUMN {name} {sqltype}")
            conn.execute(_LEASE_INDEX)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )

    class _Tx:
        def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
            self.conn = conn
            self.path = path

        def __enter__(self) -> sqlite3.Connection:
            # IMMEDIATE takes the write lock up front: no deadlock upgrade from a read.
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
            if exc is None:
                try:
                    self.conn.execute("COMMIT")
                    return
                except BaseException as failed:
                    self._rollback()
                    self._raise_fault(failed)
                    raise
            self._rollback()
            self._raise_fault(exc)

        def _raise_fault(self, exc: BaseException) -> None:
            fault = workspace_fault(exc, self.path)
            if fault is not None:
                raise fault from exc

        def _rollback(self) -> None:
            # SQLite may already have rolled back (disk full, I/O error): never let a
            # second error hide the first.
            if self.conn.in_transaction:
                # a damaged file can fail its rollback too: the first error stands
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")

    def _tx(self, conn: sqlite3.Connection | None = None) -> SqliteBase._Tx:
        if self.readonly:
            raise WorkspaceError(f"{self.path}: opened read-only")
        return SqliteBase._Tx(conn or self._conn(), self.path)

    def _run(self, work: Callable[[Conn], T], pages: int = 1) -> T:
        """``work(conn)`` in one write transaction (as PostgreSQL's :meth:`PgBase._run`;
        ``BEGIN IMMEDIATE`` never deadlocks, so nothing is retried here)."""
        with self._tx() as conn:
            return work(conn)

    def quick_check(self) -> str | None:
        """SQLite's ``quick_check`` of every page (O(database size), no index
        cross-check): None when sound, else the first problem it names."""
        try:
            got = self._conn().execute("PRAGMA quick_check(1)").fetchone()
        except sqlite3.DatabaseError as exc:
            return str(exc)
        return None if got is None or got[0] == "ok" else str(got[0])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "CHUNK",
    "READ_WITH_META",
    "ROWS_RESET_META",
    "SqliteBase",
    "space_needed",
    "utc_now",
    "workspace_fault",
]


def _refuse_foreign(path: Path) -> None:
    """WorkspaceError when ``path`` is a SQLite database of something else.

    Opening for writing switches the file to WAL and adds the framework's tables, so a
    `--workspace` pointed at an application's database would be changed before any
    check could refuse it. A file with tables but no ``meta`` table is not a workspace
    (every schema since the first has one); it is probed read-only (``mode=ro``) and
    left exactly as it was. A missing or empty file is a new workspace; one SQLite
    cannot read is left to the open, which says so.
    """
    try:
        if path.stat().st_size == 0:
            return
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except (OSError, sqlite3.Error):
        return
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
    except sqlite3.DatabaseError:
        return
    finally:
        con.close()
    if tables and "meta" not in tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise WorkspaceError(
            f"{path}: not a framework workspace (a SQLite database with other tables: "
            f"{shown}); nothing was written: check --workspace"
        )


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, waiting for a peer that holds the lock meanwhile.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once, without calling the busy handler, while another process is creating
    or switching the same file: two crawls (or seeders) opening a new workspace together
    would otherwise have one of them fail.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
