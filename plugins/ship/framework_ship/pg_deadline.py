"""The shared Retry-After deadline of one endpoint host, kept in a PostgreSQL workspace.

Owns the ``ship_deadlines`` row of one host: the rules of
:mod:`framework_ship.deadline` (it only ever moves later, it is never deleted, every
shipper reads it before every send), with the instant in epoch seconds of the
**database** clock, so that shippers on machines whose clocks disagree all hold back
for the same span. A shipper's demand ``until`` (its own clock) is turned into "this
many seconds from now" and added to the database's ``now()`` in the same statement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from framework_ship.pg_db import ShipDb

if TYPE_CHECKING:
    import psycopg


class PgDeadline:
    """The Retry-After deadline of one host, shared by every shipper of the workspace."""

    def __init__(self, db: ShipDb, host: str, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.host = host
        self._clock = clock
        # what messages name as the deadline's place (the file, on a folder workspace)
        self.path = PurePath("ship_deadlines")

    def remaining(self) -> float:
        """Seconds from now (the database's) until the deadline; 0 when it is past."""
        got = (
            self.db._conn()
            .execute(
                "SELECT until - extract(epoch FROM clock_timestamp())::float8 "
                "FROM ship_deadlines WHERE host = %s",
                (self.host,),
            )
            .fetchone()
        )
        return 0.0 if got is None else max(0.0, float(got[0]))

    def until(self) -> float:
        """The deadline on this process's clock (0 when never set)."""
        left = self.remaining()
        return self._clock() + left if left > 0 else 0.0

    def push(self, until: float, reason: str = "") -> float:
        """Move the deadline to ``until`` (this process's clock) if that is later."""
        ahead = until - self._clock()

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO ship_deadlines AS d (host, until, set_at, reason) "
                "SELECT %(host)s, now_s + %(ahead)s, now_s, %(reason)s "
                "FROM (SELECT extract(epoch FROM clock_timestamp())::float8 AS now_s) AS t "
                "ON CONFLICT (host) DO UPDATE SET until = excluded.until, "
                "set_at = excluded.set_at, reason = excluded.reason "
                "WHERE d.until < excluded.until",
                {"host": self.host, "ahead": ahead, "reason": reason},
            )

        self.db._run(work)
        return self.until()


def read_pg_deadline(db: ShipDb) -> dict[str, object] | None:
    """The latest deadline record of the workspace (for status); None if none."""
    if not db.has_ship_tables():
        return None
    got = (
        db._conn()
        .execute(
            "SELECT host, until, set_at, reason, until > extract(epoch FROM now())::float8 "
            "FROM ship_deadlines ORDER BY until DESC LIMIT 1"
        )
        .fetchone()
    )
    if got is None:
        return None
    host, until, set_at, reason, active = got
    return {"host": host, "until": until, "set_at": set_at, "reason": reason, "active": active}


__all__ = ["PgDeadline", "read_pg_deadline"]
