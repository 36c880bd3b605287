"""Claims with leases on a PostgreSQL workspace: the protocol of
:mod:`framework.workspace.leases` (docs/scaling.md) for workers on many machines.

Owns the lease steps on :class:`~framework.workspace.postgres.PostgresStore`, with the
API of the SQLite :class:`~framework.workspace.leases.Leases` (register, claim,
claim_ids, token, done, heartbeat, others_working, stop; and :func:`reset`,
:func:`workers`, :func:`leased_rows`), so the crawl can drive either. What differs:

* **The claim** is ``SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED`` feeding
  the UPDATE that writes the lease, in one statement: two workers claiming at the same
  instant skip each other's rows instead of waiting, and never take the same row.
* **Time** is the database's: expiry and heartbeats are epoch seconds of ``now()`` on
  the server (the start of the step's transaction), so workers on machines whose clocks
  disagree still agree on when a lease ends. A ``clock`` may be given instead (tests
  move time by hand, as they do for the SQLite side).
* **The fencing token** comes from the ``lease_tokens`` sequence: unique per claim and
  only growing, across every connection. The fence itself is in the store's commit
  (:data:`framework.workspace.postgres._OUTCOME_UPDATE`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework.workspace.leases import LEASE_SECONDS, Worker, pid_alive
from framework.workspace.records import Row
from framework.workspace.sqlite_base import _row_cols_of, _to_row

if TYPE_CHECKING:
    import psycopg

    from framework.workspace.postgres import PostgresStore

_OPEN = "status <> 'ok' AND (status = 'pending' OR (retryable = 1 AND attempts < %(max)s))"
# a lease anyone may take: free, expired, or held by a worker known to be stopped; and
# not a row this worker holds already (only its own rows are looked up in that list: a
# list of thousands checked on every row walked would cost more than the claim)
_FREE = (
    "(lease_owner IS NULL OR lease_expires_at < %(now)s "
    "OR lease_owner IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL)) "
    "AND (lease_owner IS DISTINCT FROM %(me)s OR NOT (id = ANY(%(held)s::bigint[])))"
)
_ROW_COLS_OF_ROWS = _row_cols_of("rows")

# Two pickers in one statement: the `first` kinds (through the (kind, status) index),
# then any open row for the room left. SKIP LOCKED: rows another worker is claiming
# right now are passed over, never waited for or shared.
_CLAIM = (
    "WITH early AS ("
    f"  SELECT id FROM rows WHERE kind = ANY(%(kinds)s::text[]) "
    f"  AND status IN ('pending', 'error') AND {_OPEN} AND {_FREE} "
    "   ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
    "), rest AS ("
    f"  SELECT id FROM rows WHERE {_OPEN} AND {_FREE} "
    "   AND id NOT IN (SELECT id FROM early) ORDER BY id "
    "   LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM early)) "
    "   FOR UPDATE SKIP LOCKED"
    "), token AS (SELECT nextval('lease_tokens') AS value) "
    "UPDATE rows SET lease_owner = %(me)s, lease_expires_at = %(until)s, "
    "lease_token = token.value FROM token "
    # = ANY(ARRAY(...)): primary-key lookups; a join would let the planner, which cannot
    # tell how many rows `rest` brings, hash the whole table (measured: 24 ms at 100k rows)
    "WHERE rows.id = ANY(ARRAY(SELECT id FROM early UNION ALL SELECT id FROM rest)) "
    f"RETURNING {_ROW_COLS_OF_ROWS}, rows.lease_token"
)


def _renewal(conn: psycopg.Connection[Any]) -> None:
    """Start a heartbeat transaction that does not wait for the WAL flush at its commit.
    Safe by the fence: a renewal lost to a server crash only shortens the leases, and a
    takeover then claims the rows with new tokens. Claims keep the wait: a claim lost
    with its unflushed token could see the sequence hand out the same token again after
    the crash, to another worker, and the fence could no longer tell the two apart."""
    conn.execute("SET LOCAL synchronous_commit = off")


def _db_now(conn: psycopg.Connection[Any]) -> float:
    got = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
    assert got is not None
    return float(got[0])


class PgLeases:
    """One worker's side of the protocol on one PostgreSQL store. Build, then
    :meth:`register`."""

    def __init__(
        self,
        store: PostgresStore,
        lease_seconds: float = LEASE_SECONDS,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {lease_seconds!r}")
        self.store = store
        self.lease_seconds = lease_seconds
        self.clock = clock  # None: the database's clock
        self.worker_id = 0
        self.tokens: dict[int, int] = {}  # row id -> the token this worker holds it by

    def _now(self, conn: psycopg.Connection[Any]) -> float:
        return self.clock() if self.clock is not None else _db_now(conn)

    def register(self) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            now = self._now(conn)
            got = conn.execute(
                "INSERT INTO workers (host, pid, started_at, heartbeat_at) "
                "VALUES (%s, %s, %s, %s) RETURNING id",
                (socket.gethostname(), os.getpid(), now, now),
            ).fetchone()
            assert got is not None
            return int(got[0])

        self.worker_id = self.store._run(work)
        return self.worker_id

    def _dead(self, conn: psycopg.Connection[Any], now: float) -> None:
        """Mark stopped the workers of this host whose pid is gone: their rows are then
        claimable at once (a stopped owner's lease counts as free)."""
        gone = [
            int(wid)
            for wid, pid in conn.execute(
                "SELECT id, pid FROM workers WHERE stopped_at IS NULL AND host = %s AND id <> %s",
                (socket.gethostname(), self.worker_id),
            )
            if not pid_alive(int(pid))
        ]
        if gone:
            conn.execute(
                "UPDATE workers SET stopped_at = %s WHERE id = ANY(%s)", (now, sorted(gone))
            )

    def claim(self, limit: int, max_attempts: int, first: Sequence[str] = ()) -> list[Row]:
        """Take up to ``limit`` open rows that nobody live holds: those of the kinds in
        ``first`` before the others, oldest first within each (as the SQLite
        :meth:`~framework.workspace.leases.Leases.claim`: a pagination chain is not held
        up behind the rows found before its next page)."""
        if limit <= 0:
            return []
        kinds = sorted(set(first))

        def work(conn: psycopg.Connection[Any]) -> list[tuple[Row, int]]:
            now = self._now(conn)
            self._dead(conn, now)
            got = conn.execute(
                _CLAIM,
                {
                    "kinds": kinds,
                    "max": max_attempts,
                    "held": sorted(self.tokens),
                    "now": now,
                    "limit": limit,
                    "me": self.worker_id,
                    "until": now + self.lease_seconds,
                },
            ).fetchall()
            taken = [(_to_row(r[:-1]), int(r[-1])) for r in got]
            return sorted(taken, key=lambda p: (p[0].kind not in kinds, p[0].id))

        taken = self.store._run(work)
        for row, token in taken:
            self.tokens[row.id] = token
        return [row for row, _ in taken]

    def claim_ids(self, ids: Sequence[int]) -> set[int]:
        """Lease those rows (just discovered by this worker) where still free; return the
        ids it got (another worker may have claimed some in between)."""
        if not ids:
            return set()

        def work(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
            now = self._now(conn)
            got = conn.execute(
                "WITH picked AS ("
                "  SELECT id FROM rows WHERE id = ANY(%(ids)s::bigint[]) AND status <> 'ok' "
                "  AND lease_owner IS NULL ORDER BY id FOR UPDATE SKIP LOCKED"
                "), token AS (SELECT nextval('lease_tokens') AS value) "
                "UPDATE rows SET lease_owner = %(me)s, lease_expires_at = %(until)s, "
                "lease_token = token.value FROM token "
                "WHERE rows.id = ANY(ARRAY(SELECT id FROM picked)) "
                "RETURNING rows.id, rows.lease_token",
                {
                    "ids": sorted(set(ids)),
                    "me": self.worker_id,
                    "until": now + self.lease_seconds,
                },
            ).fetchall()
            return [(int(rid), int(token)) for rid, token in got]

        taken = self.store._run(work)
        for rid, token in taken:
            self.tokens[rid] = token
        return {rid for rid, _ in taken}

    def token(self, row_id: int) -> int | None:
        return self.tokens.get(row_id)

    def done(self, row_id: int) -> None:
        """The row's outcome is settled here (committed, or refused): forget its token."""
        self.tokens.pop(row_id, None)

    def heartbeat(self) -> set[int]:
        """Renew every lease this worker still owns; return the rows it has lost (their
        lease was taken over while it was away): their commits will be refused."""

        def work(conn: psycopg.Connection[Any]) -> set[int]:
            _renewal(conn)
            now = self._now(conn)
            conn.execute(
                "UPDATE workers SET heartbeat_at = %s WHERE id = %s", (now, self.worker_id)
            )
            got = conn.execute(
                "UPDATE rows SET lease_expires_at = %s WHERE lease_owner = %s RETURNING id",
                (now + self.lease_seconds, self.worker_id),
            ).fetchall()
            return {int(rid) for (rid,) in got}

        kept = self.store._run(work)
        return {rid for rid in self.tokens if rid not in kept}

    def others_working(self, max_attempts: int) -> bool:
        """Whether another live worker holds an open row (see
        :meth:`framework.workspace.leases.Leases.others_working`)."""
        conn = self.store._conn()
        now = self.clock() if self.clock is not None else _db_now(conn)
        got = conn.execute(
            "SELECT 1 FROM rows WHERE lease_owner IS NOT NULL AND lease_owner <> %(me)s "
            f"AND lease_expires_at >= %(now)s AND {_OPEN} "
            "AND lease_owner NOT IN (SELECT id FROM workers WHERE stopped_at IS NOT NULL) "
            "LIMIT 1",
            {"me": self.worker_id, "now": now, "max": max_attempts},
        ).fetchone()
        return got is not None

    def stop(self) -> None:
        """Release this worker's leases and mark it stopped."""

        def work(conn: psycopg.Connection[Any]) -> None:
            now = self._now(conn)
            conn.execute(
                "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL "
                "WHERE lease_owner = %s",
                (self.worker_id,),
            )
            conn.execute("UPDATE workers SET stopped_at = %s WHERE id = %s", (now, self.worker_id))

        self.store._run(work)
        self.tokens.clear()


def reset(store: PostgresStore) -> int:
    """Free every lease and mark every worker stopped; return the leases freed. Only for
    a process that knows no worker runs (see :func:`framework.workspace.leases.reset`)."""

    def work(conn: psycopg.Connection[Any]) -> int:
        cur = conn.execute(
            "UPDATE rows SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE lease_owner IS NOT NULL"
        )
        conn.execute(
            "UPDATE workers SET stopped_at = extract(epoch FROM now()) WHERE stopped_at IS NULL"
        )
        return int(cur.rowcount)

    return store._run(work)


def workers(store: PostgresStore, limit: int = 20) -> list[Worker]:
    """The latest workers (newest first) with the open rows each holds."""
    conn = store._conn()
    held = {
        int(owner): int(n)
        for owner, n in conn.execute(
            "SELECT lease_owner, count(*) FROM rows WHERE lease_owner IS NOT NULL "
            "AND status <> 'ok' GROUP BY lease_owner"
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
            "SELECT id, host, pid, started_at, heartbeat_at, stopped_at FROM workers "
            "ORDER BY id DESC LIMIT %s",
            (limit,),
        )
    ]


def leased_rows(store: PostgresStore) -> int:
    """Open rows under a lease that has not expired (by the database's clock)."""
    got = (
        store._conn()
        .execute(
            "SELECT count(*) FROM rows WHERE lease_owner IS NOT NULL AND status <> 'ok' "
            "AND lease_expires_at >= extract(epoch FROM now())"
        )
        .fetchone()
    )
    return int(got[0]) if got else 0


__all__ = ["PgLeases", "leased_rows", "reset", "workers"]
