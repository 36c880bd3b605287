"""Claims with leases on a PostgreSQL workspace: the protocol of
:mod:`framework.workspace.leases` (docs/scaling.md) for workers on many machines.

Owns the lease steps whose SQL is PostgreSQL's own; the others (register, token,
done, heartbeat, others_working, stop; and :func:`reset`, :func:`workers`,
:func:`leased_rows`) are :class:`~framework.workspace.leases.LeaseSteps`'s, the same
on both engines, so the crawl can drive either. What differs:

* **The claim** is ``SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED`` feeding
  the UPDATE that writes the lease, in one statement: two workers claiming at the same
  instant skip each other's rows instead of waiting, and never take the same row.
* **Time** is the database's: expiry and heartbeats are epoch seconds of ``now()`` on
  the server (the start of the step's transaction), so workers on machines whose clocks
  disagree still agree on when a lease ends. A ``clock`` may be given instead (tests
  move time by hand, as they do for the SQLite side).
* **The fencing token** comes from the ``lease_tokens`` sequence: unique per claim and
  only growing, across every connection. The fence itself is in the store's commit
  (:data:`framework.workspace.sql.OUTCOME_UPDATE`, ``_GROUP_WRITE`` in
  :mod:`framework.workspace.postgres`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework.workspace.leases import LEASE_SECONDS, LeaseSteps, leased_rows, reset, workers
from framework.workspace.records import Row
from framework.workspace.sql import row_cols_of, to_row

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
_ROW_COLS_OF_ROWS = row_cols_of("rows")

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


class PgLeases(LeaseSteps):
    """One worker's side of the protocol on one PostgreSQL store. Build, then
    :meth:`register`."""

    store: PostgresStore

    def __init__(
        self,
        store: PostgresStore,
        lease_seconds: float = LEASE_SECONDS,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(store, lease_seconds, clock=clock)

    def _renewal(self, conn: psycopg.Connection[Any]) -> None:
        _renewal(conn)

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
            taken = [(to_row(r[:-1]), int(r[-1])) for r in got]
            return sorted(taken, key=lambda p: (p[0].kind not in kinds, p[0].id))

        taken = self.store._run(work)
        for row, token in taken:
            self.tokens[row.id] = token
        return [row for row, _ in taken]

    def claim_passed_over(self, max_attempts: int) -> bool:
        """An open row free to claim though the claim just took none: it was locked by
        another worker's claim in flight (SKIP LOCKED), whose commit has not leased it
        yet. A worker that took that for the end finished with the job's first row
        pending (exit 3) while another worker was claiming it."""

        def work(conn: psycopg.Connection[Any]) -> bool:
            params = {"max": max_attempts, "now": self._now(conn), "me": self.worker_id}
            got = conn.execute(
                f"SELECT 1 FROM rows WHERE {_OPEN} AND {_FREE} LIMIT 1",
                {**params, "held": sorted(self.tokens)},
            ).fetchone()
            return got is not None

        return bool(self.store._run(work))

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


# the same steps on either store (leases.py), importable from here as before
__all__ = ["PgLeases", "leased_rows", "reset", "workers"]
