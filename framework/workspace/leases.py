"""Claims with leases: how several crawl workers share one workspace's rows.

Owns the lease protocol of the store (schema 3: the rows' ``lease_owner``,
``lease_expires_at`` and ``lease_token`` columns, the ``workers`` table, the meta
counter ``lease_token``). Every backend keeps the same rules: the steps whose SQL is
the same on both engines are :class:`LeaseSteps`'s (and :func:`reset`, :func:`workers`,
:func:`leased_rows`, on either store); the claim is each engine's own, SQLite's here
(:class:`SqliteLeases`: each step one short ``BEGIN IMMEDIATE`` transaction) and
PostgreSQL's in :mod:`framework.workspace.postgres_leases` (``FOR UPDATE SKIP
LOCKED``). The design and the failure cases are in
docs/scaling.md. The rules:

* A worker registers (a ``workers`` row: host, pid, start, heartbeat) and gets its id.
* It **claims** a batch of open rows (pending, or in error with attempts left) whose
  lease is free, expired, or held by a worker known to be dead (stopped, or on this
  host with its pid gone). Each claim takes the next value of a monotonic counter as its
  **fencing token** and writes owner, expiry and token on the rows it took.
* It fetches only rows it holds. Rows it discovers are inserted free; it leases as many
  of them as it has room for (:meth:`Leases.claim_ids`), the rest are anyone's.
* Its **heartbeat** renews the expiry of every lease it still owns (one UPDATE), well
  before they expire.
* Its **commit** of a row's outcome carries the token it claimed the row with; the
  store writes nothing when the row's token changed since (the lease was taken over:
  the worker was paused or cut off past its lease). That refusal is the **fence**: a
  late worker can never overwrite a newer outcome. An ok row drops its lease there.
* A worker that stops releases its leases; one killed leaves them to expire, or to be
  taken at once by a worker on the same host that sees its pid gone, or by the next
  single-process crawl (which holds the workspace alone: :func:`reset`).

Times are epoch seconds (floats): a lease compares clocks across processes, and on one
host they share one clock. Across machines (PostgreSQL), the database's clock decides.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from framework.workspace.records import Row
from framework.workspace.sql import (
    CHUNK,
    FENCE_SET,
    FENCE_WHERE,
    ROW_COLS,
    Conn,
    Dialect,
    chunks,
    marks,
    to_row,
)

if TYPE_CHECKING:
    import sqlite3

    from framework.workspace.store import Store

T = TypeVar("T")

LEASE_SECONDS = 30.0  # FRAMEWORK_LEASE_SECONDS: how long a claim holds without a heartbeat
# A claim that finds nothing free is a read, not a write transaction, for this long after
# the last one that looked for dead workers (their pids) in its transaction
DEAD_CHECK_S = 0.25
COUNTER_META = "lease_token"  # meta: the last fencing token handed out

# a lease anyone may take (params: now): free, expired, or held by a stopped worker
_FREE = (
    "AND (lease_owner IS NULL OR lease_expires_at < ? "
    "OR lease_owner IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL)) "
)
# the open rows (params: max_attempts)
_OPEN = "status <> 'ok' AND (status = 'pending' OR (retryable = 1 AND attempts < ?))"


@runtime_checkable
class LeaseStore(Protocol):
    """What the lease steps need of a store: its dialect, a connection, transactions."""

    dialect: Dialect

    def _conn(self) -> Conn: ...

    def _run(self, work: Callable[[Conn], T], pages: int = 1) -> T: ...


def lease_store(store: Store | LeaseStore) -> LeaseStore:
    """``store`` as the lease steps use it (every backend's store is one)."""
    if not isinstance(store, LeaseStore):
        raise TypeError(f"{type(store).__name__} keeps no leases")
    return store


@dataclass(frozen=True)
class Worker:
    id: int
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    leased: int = 0  # open rows it holds a lease on right now

    def alive(self, now: float, lease_seconds: float) -> bool:
        """Running, as far as the workspace can tell: not stopped, and its pid present
        when it runs on this host, else a heartbeat within one lease."""
        if self.stopped_at is not None:
            return False
        if self.host == socket.gethostname():
            return pid_alive(self.pid)
        return now - self.heartbeat_at <= lease_seconds


def pid_alive(pid: int) -> bool:
    """Whether a process with that pid runs on this host (a stopped one does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:  # a zombie (killed, not yet reaped by its parent) is dead too
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class LeaseSteps:
    """One worker's side of the protocol on one store: the steps both engines share.
    Build a backend's (:class:`SqliteLeases`, ``PgLeases``), then :meth:`register`."""

    def __init__(
        self,
        store: Store | LeaseStore,
        lease_seconds: float = LEASE_SECONDS,
        *,
        clock: Callable[[], float] | None = time.time,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {lease_seconds!r}")
        self.store = lease_store(store)
        self.d = self.store.dialect
        self.lease_seconds = lease_seconds
        self.clock = clock  # None: the database's clock (PostgreSQL)
        self.worker_id = 0
        self.tokens: dict[int, int] = {}  # row id -> the token this worker holds it by

    def _now(self, conn: Conn) -> float:
        """Now, in epoch seconds: the given clock, else the database's."""
        return self.clock() if self.clock is not None else self.d.epoch(conn)

    def _renewal(self, conn: Conn) -> None:
        """Called first in a heartbeat's transaction (see postgres_leases)."""

    def register(self) -> int:
        def work(conn: Conn) -> int:
            now = self._now(conn)
            got = conn.execute(
                self.d.q(
                    "INSERT INTO workers (host, pid, started_at, heartbeat_at) "
                    "VALUES (?, ?, ?, ?) RETURNING id"
                ),
                (socket.gethostname(), os.getpid(), now, now),
            ).fetchone()
            return int(got[0])

        self.worker_id = self.store._run(work)
        return self.worker_id

    def _dead(self, conn: Conn, now: float) -> list[int]:
        """Workers found dead now (their pid gone from this host), marked stopped; and
        every stopped worker still named as an owner is claimable too."""
        gone = [
            int(wid)
            for wid, pid in conn.execute(
                self.d.q(
                    "SELECT id, pid FROM workers WHERE stopped_at IS NULL AND host = ? AND id <> ?"
                ),
                (socket.gethostname(), self.worker_id),
            )
            if not pid_alive(int(pid))
        ]
        if gone:
            cond, params = self.d.in_("id", sorted(gone))
            conn.execute(
                self.d.q(f"UPDATE workers SET stopped_at = ? WHERE {cond}"), (now, *params)
            )
        return gone

    def claim(self, limit: int, max_attempts: int, first: Sequence[str] = ()) -> list[Row]:
        """Take up to ``limit`` open rows that nobody live holds: those of the kinds in
        ``first`` before the others, oldest first within each. ``first`` is for the kinds
        whose page finds the next one (pagination): such a chain is fetched one page at a
        time, so a next page claimed behind the rows found before it would hold up every
        page after it (measured: docs/benchmarks.md, "Several processes")."""
        raise NotImplementedError

    def claim_ids(self, ids: Sequence[int]) -> set[int]:
        """Lease those rows (just discovered by this worker) where still free; return the
        ids it got (another worker may have claimed some in between)."""
        raise NotImplementedError

    def token(self, row_id: int) -> int | None:
        return self.tokens.get(row_id)

    def done(self, row_id: int) -> None:
        """The row's outcome is settled here (committed, or refused): forget its token."""
        self.tokens.pop(row_id, None)

    def heartbeat(self) -> set[int]:
        """Renew every lease this worker still owns; return the rows it has lost (their
        lease was taken over while it was away): their commits will be refused."""

        def work(conn: Conn) -> set[int]:
            self._renewal(conn)
            now = self._now(conn)
            conn.execute(
                self.d.q("UPDATE workers SET heartbeat_at = ? WHERE id = ?"),
                (now, self.worker_id),
            )
            got = conn.execute(
                self.d.q("UPDATE rows SET lease_expires_at = ? WHERE lease_owner = ? RETURNING id"),
                (now + self.lease_seconds, self.worker_id),
            ).fetchall()
            return {int(rid) for (rid,) in got}

        kept = self.store._run(work)
        return {rid for rid in self.tokens if rid not in kept}

    def claim_passed_over(self, max_attempts: int) -> bool:
        """Whether an open row nobody holds is there though the last claim took none:
        a row another worker's claim has locked at this moment, still free as this
        worker sees it (PostgreSQL's SKIP LOCKED passes such rows over). SQLite runs
        one claim at a time, so a claim never passes a free row over there."""
        return False

    def others_working(self, max_attempts: int) -> bool:
        """Whether another live worker holds an open row: it may still discover more, or
        fail and leave rows for this one, so this worker waits instead of finishing."""
        conn = self.store._conn()
        got = conn.execute(
            self.d.q(
                f"SELECT 1 FROM rows{self.d.index('rows_leased')} WHERE lease_owner IS NOT "
                f"NULL AND lease_owner <> ? AND lease_expires_at >= ? AND {_OPEN} "
                "AND lease_owner NOT IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL) "
                "LIMIT 1"
            ),
            (self.worker_id, self._now(conn), max_attempts),
        ).fetchone()
        return got is not None

    def stop(self) -> None:
        """Release this worker's leases and mark it stopped."""

        def work(conn: Conn) -> None:
            now = self._now(conn)
            conn.execute(
                self.d.q(
                    "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL "
                    "WHERE lease_owner = ?"
                ),
                (self.worker_id,),
            )
            conn.execute(
                self.d.q("UPDATE workers SET stopped_at = ? WHERE id = ?"), (now, self.worker_id)
            )

        self.store._run(work)
        self.tokens.clear()


class SqliteLeases(LeaseSteps):
    """The claims on a SQLite store: each one short ``BEGIN IMMEDIATE`` transaction."""

    clock: Callable[[], float]

    def __init__(
        self,
        store: Store | LeaseStore,
        lease_seconds: float = LEASE_SECONDS,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store, lease_seconds, clock=clock)
        self._looked_dead: float | None = None  # when a claim last looked for dead workers

    def _next_token(self, conn: sqlite3.Connection) -> int:
        (token,) = conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT (key) DO UPDATE "
            "SET value = CAST(value AS INTEGER) + 1 RETURNING CAST(value AS INTEGER)",
            (COUNTER_META,),
        ).fetchone()
        return int(token)

    def claim(self, limit: int, max_attempts: int, first: Sequence[str] = ()) -> list[Row]:
        """Take up to ``limit`` open rows that nobody live holds: those of the kinds in
        ``first`` before the others, oldest first within each. ``first`` is for the kinds
        whose page finds the next one (pagination): such a chain is fetched one page at a
        time, so a next page claimed behind the rows found before it would hold up every
        page after it (measured: docs/benchmarks.md, "Several processes")."""
        if limit <= 0:
            return []
        now = self.clock()
        recent = self._looked_dead is not None and now - self._looked_dead < DEAD_CHECK_S
        if recent and not self._any_free(_FREE, now, max_attempts):
            # nothing free: a worker starved of rows asks often (each response that lands,
            # each commit), and a write transaction each time held up the others' commits
            # (measured: docs/benchmarks.md); a worker that died meanwhile is found by the
            # next full claim, at most DEAD_CHECK_S later
            return []
        return self.store._run(lambda conn: self._claim(conn, limit, max_attempts, first, now))

    def _claim(
        self,
        conn: sqlite3.Connection,
        limit: int,
        max_attempts: int,
        first: Sequence[str],
        now: float,
    ) -> list[Row]:
        """The claim's transaction: dead workers marked, the rows picked and leased."""
        self._looked_dead = now
        self._dead(conn, now)
        free = _FREE
        got = []
        if first:
            # (kind, status) index: the open rows of those kinds only, never a scan
            got = conn.execute(
                f"SELECT {ROW_COLS} FROM rows INDEXED BY rows_kind_status "
                f"WHERE kind IN ({marks(len(first))}) AND status IN ('pending', 'error') "
                f"AND {_OPEN} {free}ORDER BY id LIMIT ?",
                (*first, max_attempts, now, limit),
            ).fetchall()
        if len(got) < limit:
            taken = {r[0] for r in got}
            more = conn.execute(
                f"SELECT {ROW_COLS} FROM rows INDEXED BY rows_open WHERE {_OPEN} "
                f"{free}ORDER BY id LIMIT ?",
                (max_attempts, now, limit),
            ).fetchall()
            got += [r for r in more if r[0] not in taken][: limit - len(got)]
        rows = [to_row(r) for r in got if r[0] not in self.tokens]
        if rows:
            self._lease(conn, [r.id for r in rows], now)
        return rows

    def _any_free(self, free: str, now: float, max_attempts: int) -> bool:
        """Whether an open row is free to claim (no write lock taken: a read)."""
        got = (
            self.store._conn()
            .execute(
                f"SELECT 1 FROM rows INDEXED BY rows_open WHERE {_OPEN} {free}LIMIT 1",
                (max_attempts, now),
            )
            .fetchone()
        )
        return got is not None

    def claim_ids(self, ids: Sequence[int]) -> set[int]:
        """Lease those rows (just discovered by this worker) where still free; return the
        ids it got (another worker may have claimed some in between)."""
        if not ids:
            return set()
        now = self.clock()

        def work(conn: sqlite3.Connection) -> list[int]:
            free = [
                rid
                for chunk in chunks(list(ids), CHUNK)
                for (rid,) in conn.execute(
                    f"SELECT id FROM rows WHERE id IN ({marks(len(chunk))}) "
                    "AND status != 'ok' AND lease_owner IS NULL",
                    chunk,
                )
            ]
            if free:
                self._lease(conn, free, now)
            return free

        return set(self.store._run(work))

    def _lease(self, conn: sqlite3.Connection, ids: list[int], now: float) -> None:
        token = self._next_token(conn)
        for chunk in chunks(ids, CHUNK):
            conn.execute(
                "UPDATE rows SET lease_owner = ?, lease_expires_at = ?, lease_token = ? "
                f"WHERE id IN ({marks(len(chunk))})",
                (self.worker_id, now + self.lease_seconds, token, *chunk),
            )
        for rid in ids:
            self.tokens[rid] = token


def reset(store: Store | LeaseStore, clock: Callable[[], float] | None = None) -> int:
    """Free every lease and mark every worker stopped; return the leases freed. Only for
    a process that holds the workspace alone (the crawl lock, exclusive): a new
    single-process crawl, or the parent of N workers before it starts them. What a killed
    worker held is then reclaimed at once, with no wait for its leases to expire.
    ``clock``: None, the database's (on SQLite, this machine's)."""
    db = lease_store(store)
    d = db.dialect

    def work(conn: Conn) -> int:
        freed = conn.execute(
            "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE lease_owner IS NOT NULL"
        ).rowcount
        now, params = ("?", (clock(),)) if clock is not None else d.epoch_sql()
        conn.execute(d.q(f"UPDATE workers SET stopped_at = {now} WHERE stopped_at IS NULL"), params)
        return int(freed)

    return db._run(work)


def workers(store: Store | LeaseStore, limit: int = 20) -> list[Worker]:
    """The latest workers (newest first) with the open rows each holds; [] on a workspace
    written before leases existed (schema 2, read-only)."""
    db = lease_store(store)
    d, conn = db.dialect, db._conn()
    if d.old_files and not d.has_table(conn, "workers"):
        return []
    held = {
        int(owner): int(n)
        for owner, n in conn.execute(
            f"SELECT lease_owner, count(*) FROM rows{d.index('rows_leased')} "
            "WHERE lease_owner IS NOT NULL AND status <> 'ok' GROUP BY lease_owner"
        )
    }
    return [
        Worker(
            id=int(wid),
            host=host,
            pid=int(pid),
            started_at=started,
            heartbeat_at=beat,
            stopped_at=stopped,
            leased=held.get(int(wid), 0),
        )
        for wid, host, pid, started, beat, stopped in conn.execute(
            d.q(
                "SELECT id, host, pid, started_at, heartbeat_at, stopped_at FROM workers "
                "ORDER BY id DESC LIMIT ?"
            ),
            (limit,),
        )
    ]


def leased_rows(store: Store | LeaseStore) -> int:
    """Open rows under a lease that has not expired (by the database's clock); 0 on a
    workspace written before leases existed (its rows have no lease columns)."""
    db = lease_store(store)
    d, conn = db.dialect, db._conn()
    if d.old_files and not d.has_table(conn, "workers"):  # made with the lease columns
        return 0
    now, params = d.epoch_sql()
    got = conn.execute(
        d.q(
            f"SELECT count(*) FROM rows{d.index('rows_leased')} WHERE lease_owner IS NOT "
            f"NULL AND status <> 'ok' AND lease_expires_at >= {now}"
        ),
        params,
    ).fetchone()
    return int(got[0]) if got else 0


# the SQLite worker's name before the protocol had two engines (importers keep it)
Leases = SqliteLeases

__all__ = [
    "COUNTER_META",
    "DEAD_CHECK_S",
    "FENCE_SET",
    "FENCE_WHERE",
    "LEASE_SECONDS",
    "LeaseSteps",
    "LeaseStore",
    "Leases",
    "SqliteLeases",
    "Worker",
    "leased_rows",
    "pid_alive",
    "reset",
    "workers",
]
