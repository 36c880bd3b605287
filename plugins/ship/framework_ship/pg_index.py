"""The ship log and its index as tables of a PostgreSQL workspace, shared by shippers.

Owns reading ``ship_latest`` (:class:`PgShipIndex`, the lookups the run decides by,
the same answers as :class:`~framework_ship.index.ShipIndex`) and recording attempts
(:class:`PgShipLog`, the same ``write(attempts)`` as
:class:`~framework_ship.shiplog.ShipLog`). A recording is one transaction:

1. lock the claims of the attempts' keys that still carry this shipper's token
   (``FOR UPDATE``: a takeover waits until the recording commits, then reads it);
2. insert one ``ship_log`` row per attempt, naming the shipper and the token;
3. for the keys still held, update ``ship_latest`` as the JSONL index does;
4. the keys whose claim was taken over meanwhile are **fenced**: their rows are
   logged with ``fenced = true`` and ``ship_latest`` is not written over the newer
   claim's record. A fenced *success* of other content than the latest success of the
   key marks the key to ship again (outcome ``fenced``, no latest success): the late
   request may have reached the server after the newer one, and the server keeps the
   last write. The next delivery of the key goes under its redelivery key
   (``Idempotency-Key`` with the scrape time): under the plain key the server would
   only replay its answer to the newer delivery and write nothing.

Nothing secret is stored: the server's ``detail`` goes through the run's masker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework_ship.index import SUCCESS, Latest, digest
from framework_ship.pg_claims import PgClaims
from framework_ship.pg_db import ShipDb
from framework_ship.shiplog import Attempt, utc_now

if TYPE_CHECKING:
    import psycopg

_LOOKUP_CHUNK = 1000
_FINAL = (*SUCCESS, "rejected")

_INSERT_LOG = (
    "INSERT INTO ship_log (time, shipper, dedupe_key, content_hash, attempt, http_status, "
    "outcome, latency_ms, error_class, batch_id, route, detail, token, fenced) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_UPSERT_LATEST = (
    "INSERT INTO ship_latest (dedupe_key, hash, outcome, ok_hash) "
    "VALUES (%(k)s, %(h)s, %(o)s, CASE WHEN %(ok)s THEN %(h)s END) "
    "ON CONFLICT (dedupe_key) DO UPDATE SET hash = excluded.hash, outcome = excluded.outcome, "
    "ok_hash = COALESCE(excluded.ok_hash, ship_latest.ok_hash)"
)
# a late success of other content may have landed after the newer delivery: ship again
_MARK_AGAIN = (
    "INSERT INTO ship_latest (dedupe_key, hash, outcome, ok_hash) "
    "VALUES (%(k)s, %(h)s, 'fenced', NULL) "
    "ON CONFLICT (dedupe_key) DO UPDATE SET hash = excluded.hash, outcome = 'fenced', "
    "ok_hash = NULL WHERE ship_latest.ok_hash IS DISTINCT FROM %(h)s"
)


class PgShipIndex:
    """ "Latest outcome and latest success per key", read from ``ship_latest``."""

    readonly = True  # the table is written by recordings (PgShipLog), not here

    def __init__(self, db: ShipDb) -> None:
        self.db = db

    def lookup_many(self, keys: Sequence[str]) -> dict[str, Latest]:
        found: dict[str, Latest] = {}
        if not self.db.has_ship_tables():
            return found
        conn = self.db._conn()
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            part = list(keys[start : start + _LOOKUP_CHUNK])
            for key, h, outcome, ok in conn.execute(
                "SELECT dedupe_key, hash, outcome, ok_hash FROM ship_latest "
                "WHERE dedupe_key = ANY(%s::text[])",
                (part,),
            ):
                found[str(key)] = Latest(bytes(h), str(outcome), None if ok is None else bytes(ok))
        return found

    def lookup(self, key: str) -> Latest | None:
        return self.lookup_many([key]).get(key)

    def outcome_counts(self) -> dict[str, int]:
        if not self.db.has_ship_tables():
            return {}
        return {
            str(o): int(n)
            for o, n in self.db._conn().execute(
                "SELECT outcome, count(*) FROM ship_latest GROUP BY outcome"
            )
        }

    def last_run(self) -> dict[str, object] | None:
        """The summary of the shipper that stopped last."""
        if not self.db.has_ship_tables():
            return None
        got = (
            self.db._conn()
            .execute(
                "SELECT summary FROM shippers WHERE summary IS NOT NULL "
                "ORDER BY stopped_at DESC, id DESC LIMIT 1"
            )
            .fetchone()
        )
        if got is None:
            return None
        value = json.loads(got[0])
        return value if isinstance(value, dict) else None

    def on_written(self, attempts: Sequence[Attempt], end_offset: int) -> None:
        pass  # recordings write ship_latest themselves, in their transaction

    def set_last_run(self, summary: dict[str, object]) -> None:
        pass  # kept on the shipper's row when it stops (PgClaims.stop)

    def close(self) -> None:
        pass  # the connections are the run's ShipDb's

    def __enter__(self) -> PgShipIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PgShipLog:
    """Records attempts in ``ship_log`` and ``ship_latest`` behind the claim fence."""

    def __init__(
        self, db: ShipDb, claims: PgClaims, mask: Callable[[str], str] | None = None
    ) -> None:
        self.db = db
        self.claims = claims
        self.mask = mask
        self._mutex = threading.Lock()
        self.fenced: set[str] = set()  # keys whose recording was refused this run

    def write(self, attempts: Sequence[Attempt]) -> None:
        if not attempts:
            return
        now = utc_now()
        me = self.claims.shipper_id
        tokens = self.claims.tokens([a.dedupe_key for a in attempts])
        names = sorted(tokens)

        def work(conn: psycopg.Connection[Any]) -> tuple[set[str], list[str]]:
            held = {
                str(k)
                for (k,) in conn.execute(
                    "SELECT c.dedupe_key FROM ship_claims c "
                    "JOIN unnest(%s::text[], %s::bigint[]) AS m(k, t) "
                    "ON c.dedupe_key = m.k AND c.token = m.t "
                    "WHERE c.owner = %s ORDER BY c.dedupe_key FOR UPDATE OF c",
                    (names, [tokens[k] for k in names], me),
                )
            }
            with conn.cursor() as cur:
                cur.executemany(
                    _INSERT_LOG,
                    [
                        (
                            a.time or now,
                            me,
                            a.dedupe_key,
                            a.content_hash,
                            a.attempt,
                            a.http_status,
                            a.outcome,
                            round(float(a.latency_ms), 2),
                            a.error_class,
                            a.batch_id,
                            a.route,
                            self._masked(a.detail),
                            tokens.get(a.dedupe_key),
                            a.dedupe_key not in held,
                        )
                        for a in attempts
                    ],
                )
                rows = [
                    {
                        "k": a.dedupe_key,
                        "h": digest(a.content_hash),
                        "o": a.outcome,
                        "ok": a.outcome in SUCCESS,
                    }
                    for a in attempts
                ]
                # in the attempts' order: a success and a later failure of one key
                # must land in that order (one statement does both)
                kept = [r for r in rows if r["k"] in held]
                if kept:
                    cur.executemany(_UPSERT_LATEST, kept)
                late = [r for r in rows if r["k"] not in held and r["ok"]]
                if late:
                    cur.executemany(_MARK_AGAIN, late)
            # a key whose outcome is final here (a success, a rejection) frees its claim
            # in the same transaction: one round trip less per item
            final = sorted({a.dedupe_key for a in attempts if a.outcome in _FINAL} & held)
            if final:
                conn.execute(
                    "DELETE FROM ship_claims c USING unnest(%s::text[], %s::bigint[]) "
                    "AS m(k, t) WHERE c.dedupe_key = m.k AND c.token = m.t",
                    (final, [tokens[k] for k in final]),
                )
            return {a.dedupe_key for a in attempts} - held, final

        fenced, released = self.db._run(work)
        self.claims.forget(released)
        if fenced:
            with self._mutex:
                self.fenced |= fenced

    def _masked(self, detail: str | None) -> str | None:
        # the server's words: a problem may quote the Authorization header back
        return detail if self.mask is None or detail is None else self.mask(detail)

    def take_fenced(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` were fenced (and forget them)."""
        with self._mutex:
            got = self.fenced & set(keys)
            self.fenced -= got
        return got

    def close(self) -> None:
        pass


__all__ = ["PgShipIndex", "PgShipLog"]
