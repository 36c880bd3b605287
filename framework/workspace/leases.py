"""Claims with leases: how several crawl workers share one workspace's rows.

Owns the lease protocol of the store (schema 3: the rows' ``lease_owner``,
``lease_expires_at`` and ``lease_token`` columns, the ``workers`` table, the meta
counter ``lease_token``). Every backend implements the same rules; this module is the
SQLite one (each step one short ``BEGIN IMMEDIATE`` transaction; PostgreSQL will use
``FOR UPDATE SKIP LOCKED`` for the claim). The design and the failure cases are in
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
from typing import TYPE_CHECKING

from framework.workspace.records import Row
from framework.workspace.sqlite_base import _ROW_COLS, CHUNK, _chunks, _marks, _to_row

if TYPE_CHECKING:
    import sqlite3

    from framework.workspace.sqlite import SqliteStore

LEASE_SECONDS = 30.0  # FRAMEWORK_LEASE_SECONDS: how long a claim holds without a heartbeat
# A claim that finds nothing free is a read, not a write transaction, for this long after
# the last one that looked for dead workers (their pids) in its transaction
DEAD_CHECK_S = 0.25
COUNTER_META = "lease_token"  # meta: the last fencing token handed out

# The fence, one fragment of the commit's row UPDATE (framework/workspace/sqlite.py):
# its WHERE gets FENCE_WHERE (params: token, token), its SET gets FENCE_SET (params: ok,
# ok). A None token matches any row: a single-process crawl pays nothing for it.
FENCE_WHERE = "(? IS NULL OR lease_token = ?)"
FENCE_SET = (
    "lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END, "
    "lease_expires_at = CASE WHEN ? THEN NULL ELSE lease_expires_at END"
)
_OPEN = "status != 'ok' AND (status = 'pending' OR (retryable = 1 AND attempts < ?))"


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


class Leases:
    """One worker's side of the protocol on one store. Build it, then :meth:`register`."""

    def __init__(
        self,
        store: SqliteStore,
        lease_seconds: float = LEASE_SECONDS,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {lease_seconds!r}")
        self.store = store
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.worker_id = 0
        self.tokens: dict[int, int] = {}  # row id -> the token this worker holds it by
        self._looked_dead: float | None = None  # when a claim last looked for dead workers

    def register(self) -> int:
        now = self.clock()
        with self.store._tx() as conn:
            (self.worker_id,) = conn.execute(
                "INSERT INTO workers (host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?) "
                "RETURNING id",
                (socket.gethostname(), os.getpid(), now, now),
            ).fetchone()
        return self.worker_id

    def _dead(self, conn: sqlite3.Connection, now: float) -> list[int]:
        """Workers found dead now (their pid gone from this host), marked stopped; and
        every stopped worker still named as an owner is claimable too."""
        host = socket.gethostname()
        gone = [
            wid
            for wid, pid in conn.execute(
                "SELECT id, pid FROM workers WHERE stopped_at IS NULL AND host = ? AND id != ?",
                (host, self.worker_id),
            )
            if not pid_alive(pid)
        ]
        if gone:
            conn.execute(
                f"UPDATE workers SET stopped_at = ? WHERE id IN ({_marks(len(gone))})",
                (now, *gone),
            )
        return gone

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
        free = (
            "AND (lease_owner IS NULL OR lease_expires_at < ? "
            "OR lease_owner IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL)) "
        )
        recent = self._looked_dead is not None and now - self._looked_dead < DEAD_CHECK_S
        if recent and not self._any_free(free, now, max_attempts):
            # nothing free: a worker starved of rows asks often (each response that lands,
            # each commit), and a write transaction each time held up the others' commits
            # (measured: docs/benchmarks.md); a worker that died meanwhile is found by the
            # next full claim, at most DEAD_CHECK_S later
            return []
        with self.store._tx() as conn:
            self._looked_dead = now
            self._dead(conn, now)
            got = []
            if first:
                # (kind, status) index: the open rows of those kinds only, never a scan
                got = conn.execute(
                    f"SELECT {_ROW_COLS} FROM rows INDEXED BY rows_kind_status "
                    f"WHERE kind IN ({_marks(len(first))}) AND status IN ('pending', 'error') "
                    f"AND {_OPEN} {free}ORDER BY id LIMIT ?",
                    (*first, max_attempts, now, limit),
                ).fetchall()
            if len(got) < limit:
                taken = {r[0] for r in got}
                more = conn.execute(
                    f"SELECT {_ROW_COLS} FROM rows INDEXED BY rows_open WHERE {_OPEN} "
                    f"{free}ORDER BY id LIMIT ?",
                    (max_attempts, now, limit),
                ).fetchall()
                got += [r for r in more if r[0] not in taken][: limit - len(got)]
            rows = [_to_row(r) for r in got if r[0] not in self.tokens]
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
        with self.store._tx() as conn:
            free = [
                rid
                for chunk in _chunks(list(ids), CHUNK)
                for (rid,) in conn.execute(
                    f"SELECT id FROM rows WHERE id IN ({_marks(len(chunk))}) "
                    "AND status != 'ok' AND lease_owner IS NULL",
                    chunk,
                )
            ]
            if free:
                self._lease(conn, free, now)
        return set(free)

    def _lease(self, conn: sqlite3.Connection, ids: list[int], now: float) -> None:
        token = self._next_token(conn)
        for chunk in _chunks(ids, CHUNK):
            conn.execute(
                "UPDATE rows SET lease_owner = ?, lease_expires_at = ?, lease_token = ? "
                f"WHERE id IN ({_marks(len(chunk))})",
                (self.worker_id, now + self.lease_seconds, token, *chunk),
            )
        for rid in ids:
            self.tokens[rid] = token

    def token(self, row_id: int) -> int | None:
        return self.tokens.get(row_id)

    def done(self, row_id: int) -> None:
        """The row's outcome is settled here (committed, or refused): forget its token."""
        self.tokens.pop(row_id, None)

    def heartbeat(self) -> set[int]:
        """Renew every lease this worker still owns; return the rows it has lost (their
        lease was taken over while it was away): their commits will be refused."""
        now = self.clock()
        with self.store._tx() as conn:
            conn.execute("UPDATE workers SET heartbeat_at = ? WHERE id = ?", (now, self.worker_id))
            kept = {
                rid
                for (rid,) in conn.execute(
                    "UPDATE rows SET lease_expires_at = ? WHERE lease_owner = ? RETURNING id",
                    (now + self.lease_seconds, self.worker_id),
                )
            }
        return {rid for rid in self.tokens if rid not in kept}

    def others_working(self, max_attempts: int) -> bool:
        """Whether another live worker holds an open row: it may still discover more, or
        fail and leave rows for this one, so this worker waits instead of finishing."""
        now = self.clock()
        got = (
            self.store._conn()
            .execute(
                f"SELECT 1 FROM rows INDEXED BY rows_leased WHERE lease_owner IS NOT NULL "
                f"AND lease_owner != ? AND lease_expires_at >= ? AND {_OPEN} "
                "AND lease_owner NOT IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL) "
                "LIMIT 1",
                (self.worker_id, now, max_attempts),
            )
            .fetchone()
        )
        return got is not None

    def stop(self) -> None:
        """Release this worker's leases and mark it stopped."""
        now = self.clock()
        with self.store._tx() as conn:
            conn.execute(
                "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = ?",
                (self.worker_id,),
            )
            conn.execute("UPDATE workers SET stopped_at = ? WHERE id = ?", (now, self.worker_id))
        self.tokens.clear()


def reset(store: SqliteStore, clock: Callable[[], float] = time.time) -> int:
    """Free every lease and mark every worker stopped; return the leases freed. Only for
    a process that holds the workspace alone (the crawl lock, exclusive): a new
    single-process crawl, or the parent of N workers before it starts them. What a killed
    worker held is then reclaimed at once, with no wait for its leases to expire."""
    with store._tx() as conn:
        freed = conn.execute(
            "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE lease_owner IS NOT NULL"
        ).rowcount
        conn.execute("UPDATE workers SET stopped_at = ? WHERE stopped_at IS NULL", (clock(),))
    return int(freed)


def workers(store: SqliteStore, limit: int = 20) -> list[Worker]:
    """The latest workers (newest first) with the open rows each holds; [] on a workspace
    written before leases existed (schema 2, read-only)."""
    conn = store._conn()
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workers'"
    ).fetchone():
        return []
    held: dict[int, int] = dict(
        conn.execute(
            "SELECT lease_owner, count(*) FROM rows INDEXED BY rows_leased "
            "WHERE lease_owner IS NOT NULL AND status != 'ok' GROUP BY lease_owner"
        ).fetchall()
    )
    return [
        Worker(
            id=wid,
            host=host,
            pid=pid,
            started_at=started,
            heartbeat_at=beat,
            stopped_at=stopped,
            leased=held.get(wid, 0),
        )
        for wid, host, pid, started, beat, stopped in conn.execute(
            "SELECT id, host, pid, started_at, heartbeat_at, stopped_at FROM workers "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
    ]


def leased_rows(store: SqliteStore) -> int:
    """Open rows under a lease that has not expired."""
    conn = store._conn()
    cols = {r[1] for r in conn.execute("PRAGMA table_info(rows)")}
    if "lease_owner" not in cols:
        return 0
    (n,) = conn.execute(
        "SELECT count(*) FROM rows INDEXED BY rows_leased WHERE lease_owner IS NOT NULL "
        "AND status != 'ok' AND lease_expires_at >= ?",
        (time.time(),),
    ).fetchone()
    return int(n)


__all__ = [
    "COUNTER_META",
    "DEAD_CHECK_S",
    "FENCE_SET",
    "FENCE_WHERE",
    "LEASE_SECONDS",
    "Leases",
    "Worker",
    "leased_rows",
    "pid_alive",
    "reset",
    "workers",
]
