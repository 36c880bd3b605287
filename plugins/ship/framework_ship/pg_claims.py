"""Delivery claims: which shipper may deliver which dedupe key right now.

Owns one shipper's side of the claim protocol on a PostgreSQL workspace, the crawl's
lease rules (framework/workspace/postgres_leases.py, docs/scaling.md) applied to keys:

* **register**: a ``shippers`` row; its id names the shipper in claims and log rows.
* **claim**: ``INSERT ... ON CONFLICT (dedupe_key) DO UPDATE ... WHERE`` the existing
  claim has expired (by the database clock) or its owner is known to be stopped; the
  rows returned are the keys this shipper got, each with a fencing token from the
  ``ship_tokens`` sequence (unique per claim, only growing). A key another live
  shipper holds is not returned: the run comes back to it later.
* **confirm** (before every unit is sent): renews the unit's claims that still carry
  this shipper's token and have not expired, in one UPDATE; a key not renewed is not
  sent (its lease ran out while this process was stopped).
* **heartbeat** (a thread, every third of the lease): renews every claim it still owns.
* **release**: a key's claim is deleted with the recording of its final outcome (a
  success or a rejection, :mod:`framework_ship.pg_index`); what is left of a unit's
  claims (errors, keys not sent) when the unit ends.
* **stop**: release everything, mark the shipper stopped with its run's summary.

The fence itself is in the recording of an outcome (:mod:`framework_ship.pg_index`):
it writes over ``ship_latest`` only while the key's claim carries the token.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework.workspace import pid_alive
from framework_ship.pg_db import ShipDb

if TYPE_CHECKING:
    import psycopg

LEASE_SECONDS = 30.0
# how often a claim looks for shippers of this host whose pid is gone (not per claim:
# one by one, that is a query and a pid probe per item)
DEAD_CHECK_SECONDS = 1.0

_CLAIM = (
    "WITH tok AS (SELECT nextval('ship_tokens') AS value) "
    "INSERT INTO ship_claims (dedupe_key, owner, expires_at, token) "
    "SELECT k, %(me)s, %(now)s + %(lease)s, tok.value "
    "FROM unnest(%(keys)s::text[]) AS k, tok ORDER BY k "
    "ON CONFLICT (dedupe_key) DO UPDATE SET owner = excluded.owner, "
    "expires_at = excluded.expires_at, token = excluded.token "
    "WHERE ship_claims.expires_at < %(now)s "
    "OR ship_claims.owner IN (SELECT id FROM shippers WHERE stopped_at IS NOT NULL) "
    "RETURNING dedupe_key, token"
)


class PgClaims:
    """One shipper's claims. Build, :meth:`register`, then claim; :meth:`stop` at the end."""

    def __init__(self, db: ShipDb, lease_seconds: float = LEASE_SECONDS) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {lease_seconds!r}")
        self.db = db
        self.lease_seconds = lease_seconds
        self.shipper_id = 0
        self._tokens: dict[str, int] = {}  # key -> the token this shipper claimed it by
        self._mutex = threading.Lock()
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._next_dead_check = 0.0  # time.monotonic() of the next look for dead pids

    def register(self, endpoint_host: str) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            now = self.db.db_now(conn)
            got = conn.execute(
                "INSERT INTO shippers (host, pid, started_at, heartbeat_at, endpoint_host) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (socket.gethostname(), os.getpid(), now, now, endpoint_host),
            ).fetchone()
            assert got is not None
            return int(got[0])

        self.shipper_id = self.db._run(work)
        return self.shipper_id

    def token(self, key: str) -> int | None:
        with self._mutex:
            return self._tokens.get(key)

    def tokens(self, keys: Sequence[str]) -> dict[str, int]:
        with self._mutex:
            return {k: self._tokens[k] for k in keys if k in self._tokens}

    # the steps ------------------------------------------------------------------
    def _dead(self, conn: psycopg.Connection[Any], now: float) -> None:
        """Mark stopped the shippers of this host whose pid is gone (``kill -9``): their
        claims are then free at once, with no wait for the lease."""
        gone = [
            int(sid)
            for sid, pid in conn.execute(
                "SELECT id, pid FROM shippers WHERE stopped_at IS NULL AND host = %s AND id <> %s",
                (socket.gethostname(), self.shipper_id),
            )
            if not pid_alive(int(pid))
        ]
        if gone:
            conn.execute(
                "UPDATE shippers SET stopped_at = %s WHERE id = ANY(%s)", (now, sorted(gone))
            )

    def claim(self, keys: Sequence[str]) -> dict[str, int]:
        """Claim those keys where free; return the ones got, with their tokens."""
        wanted = sorted(set(keys))
        if not wanted:
            return {}

        check = time.monotonic() >= self._next_dead_check

        def work(conn: psycopg.Connection[Any]) -> dict[str, int]:
            now = self.db.db_now(conn)
            if check:
                self._dead(conn, now)
            got = conn.execute(
                _CLAIM,
                {"me": self.shipper_id, "now": now, "lease": self.lease_seconds, "keys": wanted},
            ).fetchall()
            return {str(k): int(t) for k, t in got}

        taken = self.db._run(work)
        if check:
            self._next_dead_check = time.monotonic() + DEAD_CHECK_SECONDS
        with self._mutex:
            self._tokens.update(taken)
        return taken

    def confirm(self, keys: Sequence[str]) -> set[str]:
        """Renew the claims of ``keys`` that are still this shipper's and unexpired;
        return those keys (the others must not be sent: their lease ran out)."""
        mine = self.tokens(keys)
        if not mine:
            return set()
        names = sorted(mine)

        def work(conn: psycopg.Connection[Any]) -> set[str]:
            now = self.db.db_now(conn)
            got = conn.execute(
                "UPDATE ship_claims c SET expires_at = %(now)s + %(lease)s "
                "FROM unnest(%(keys)s::text[], %(tokens)s::bigint[]) AS m(k, t) "
                "WHERE c.dedupe_key = m.k AND c.token = m.t AND c.owner = %(me)s "
                "AND c.expires_at >= %(now)s RETURNING c.dedupe_key",
                {
                    "now": now,
                    "lease": self.lease_seconds,
                    "keys": names,
                    "tokens": [mine[k] for k in names],
                    "me": self.shipper_id,
                },
            ).fetchall()
            return {str(k) for (k,) in got}

        return self.db._run(work)

    def forget(self, keys: Sequence[str]) -> None:
        """Those claims were deleted with the recording of their outcome."""
        with self._mutex:
            for key in keys:
                self._tokens.pop(key, None)

    def release(self, keys: Sequence[str]) -> None:
        """Drop this shipper's claims of ``keys`` (their outcomes are recorded)."""
        with self._mutex:
            mine = {k: self._tokens.pop(k) for k in set(keys) if k in self._tokens}
        if not mine:
            return
        names = sorted(mine)

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "DELETE FROM ship_claims c USING unnest(%s::text[], %s::bigint[]) AS m(k, t) "
                "WHERE c.dedupe_key = m.k AND c.token = m.t",
                (names, [mine[k] for k in names]),
            )

        self.db._run(work)

    def heartbeat(self) -> set[str]:
        """Renew every claim this shipper still owns; return the keys it lost."""

        def work(conn: psycopg.Connection[Any]) -> set[str]:
            # a renewal lost to a server crash only shortens the leases: no WAL wait
            conn.execute("SET LOCAL synchronous_commit = off")
            now = self.db.db_now(conn)
            conn.execute(
                "UPDATE shippers SET heartbeat_at = %s WHERE id = %s", (now, self.shipper_id)
            )
            got = conn.execute(
                "UPDATE ship_claims SET expires_at = %s WHERE owner = %s "
                "RETURNING dedupe_key, token",
                (now + self.lease_seconds, self.shipper_id),
            ).fetchall()
            return {f"{k}\0{t}" for k, t in got}

        kept = self.db._run(work)
        with self._mutex:
            return {k for k, t in self._tokens.items() if f"{k}\0{t}" not in kept}

    def start_heartbeat(self, on_error: Callable[[BaseException], None]) -> None:
        def beat() -> None:
            while not self._beat_stop.wait(self.lease_seconds / 3):
                try:
                    self.heartbeat()
                except Exception as exc:  # the run goes on; a lost lease is fenced later
                    on_error(exc)

        self._beat = threading.Thread(target=beat, name="ship-heartbeat", daemon=True)
        self._beat.start()

    def stop(self, summary: dict[str, Any] | None = None) -> None:
        """Release every claim of this shipper and mark it stopped (with its summary)."""
        self._beat_stop.set()
        if self._beat is not None:
            self._beat.join()

        def work(conn: psycopg.Connection[Any]) -> None:
            now = self.db.db_now(conn)
            conn.execute("DELETE FROM ship_claims WHERE owner = %s", (self.shipper_id,))
            conn.execute(
                "UPDATE shippers SET stopped_at = %s, summary = %s WHERE id = %s",
                (
                    now,
                    None if summary is None else json.dumps(summary, sort_keys=True),
                    self.shipper_id,
                ),
            )

        if self.shipper_id:
            self.db._run(work)
        with self._mutex:
            self._tokens.clear()


__all__ = ["LEASE_SECONDS", "PgClaims"]
