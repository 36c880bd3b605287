"""The :class:`~framework.workspace.store.Store` on PostgreSQL: one job's workspace in a
database (or a schema of one), shared by crawl workers on many machines.

Owns the writes whose SQL is PostgreSQL's own: the group commit (``commit_many``: one
statement per table for a whole group of outcomes, arrays bound with ``unnest``), the
batched inserts of found rows, attempts and bodies, and item writes under ``FOR
UPDATE``. The writes both engines share (seed, the one-by-one commit of an outcome,
the completeness recomputation, requeue, refund, reset, review decisions) are
:class:`framework.workspace.write.Writer`'s; connections, schema and transactions
:mod:`framework.workspace.postgres_base`'s, the reads
:mod:`framework.workspace.read`'s and :mod:`framework.workspace.postgres_read`'s, the
lease protocol :mod:`framework.workspace.postgres_leases`'s. The semantics are those of
:class:`framework.workspace.sqlite.SqliteStore`, rule for rule (the same conformance
suite runs on both: tests/workspace/test_workspace_conformance.py):

* a commit is one transaction; discovered rows are unique by fingerprint
  (``INSERT ... ON CONFLICT DO NOTHING RETURNING``: exactly the new rows come back);
* items are unique by dedupe key; identical content writes nothing; ``complete`` is
  recomputed from the rows by the one SQL expression of the completeness rule;
* a commit that carries a lease token is fenced: the row's UPDATE matches nothing when
  its token changed, and nothing of the outcome is written;
* readers page by keyset in bounded chunks and keep no cursor open between them.

What differs is concurrency: several workers commit at once. An item key two workers
insert at the same moment makes one transaction run again (it then finds the item and
updates it); a deadlock between two commits is retried the same way
(:meth:`PgBase._run`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from framework.errors import WorkspaceError
from framework.workspace import holds, itemplan
from framework.workspace.postgres_base import COMPACT_EVERY, RetryTransaction
from framework.workspace.postgres_read import PgReader
from framework.workspace.records import CommitResult, Marks, NewRow, Outcome, Row
from framework.workspace.sql import (
    CHUNK,
    INSERT_COLS,
    ITEM_UPDATE,
    POSTGRES,
    Prepared,
    chunks,
    pending_rows,
    prepare_rows,
    utc_now,
)
from framework.workspace.write import ItemsWritten, Writer

if TYPE_CHECKING:
    import psycopg

    from framework.workspace.store import Store

# rows in the order given (ids grow in it), those whose fingerprint exists left out
_INSERT_FOUND = (
    f"INSERT INTO rows ({INSERT_COLS}) SELECT {INSERT_COLS} FROM unnest("
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[], %b::text[]) "
    f"WITH ORDINALITY AS v({INSERT_COLS}, o) ORDER BY o "
    "ON CONFLICT (fingerprint) DO NOTHING RETURNING id, fingerprint"
)

# The same for a whole group, the fence compared row by row: the rows whose token changed
# do not come back (refused), the others are written, and in the same statement (one
# round trip) the attempts and the stored bodies of those rows only: a refused outcome
# writes nothing. The attempt's number in its row's history comes from the rows' own
# history (each row once in a group, locked by the UPDATE).
_GROUP_WRITE = (
    "WITH v AS (SELECT * FROM unnest(%(ids)b::bigint[], %(status)b::text[], "
    "%(spent)b::int[], %(retryable)b::smallint[], %(kind)b::text[], %(ok)b::bool[], "
    "%(detail)b::text[], %(http)b::int[], %(token)b::bigint[], %(logged)b::bool[]) "
    "WITH ORDINALITY AS v(id, status, spent, retryable, kind, ok, detail, http, token, "
    "logged, o)), "
    "upd AS (UPDATE rows SET status = v.status, attempts = rows.attempts + v.spent, "
    "retryable = v.retryable, last_error_kind = coalesce(v.kind, rows.last_error_kind), "
    "last_error = CASE WHEN v.ok THEN rows.last_error ELSE v.detail END, "
    "last_http_status = v.http, updated_at = %(now)s, "
    "lease_owner = CASE WHEN v.ok THEN NULL ELSE rows.lease_owner END, "
    "lease_expires_at = CASE WHEN v.ok THEN NULL ELSE rows.lease_expires_at END "
    "FROM v WHERE rows.id = v.id AND (v.token IS NULL OR rows.lease_token = v.token) "
    "RETURNING rows.id, rows.attempts, rows.item_key), "
    "att AS (INSERT INTO attempts (row_id, n, attempt, time, outcome, http_status, "
    "error_kind, error) SELECT v.id, (SELECT coalesce(max(a.n), 0) + 1 FROM attempts a "
    "WHERE a.row_id = v.id), upd.attempts, %(now)s, v.status, v.http, v.kind, v.detail "
    "FROM v JOIN upd ON upd.id = v.id WHERE v.logged ORDER BY v.o RETURNING row_id, n), "
    "body AS (INSERT INTO responses (row_id, url, final_url, status, content_type, codec, "
    "body, size, stored_at) SELECT r.id, r.url, r.final_url, r.status, r.ct, 'zlib', "
    "r.body, length(r.body), %(now)s FROM unnest(%(r_ids)b::bigint[], %(r_url)b::text[], "
    "%(r_final)b::text[], %(r_status)b::int[], %(r_ct)b::text[], %(r_body)b::bytea[]) "
    "AS r(id, url, final_url, status, ct, body) JOIN upd ON upd.id = r.id "
    "ON CONFLICT (row_id) DO UPDATE SET url = excluded.url, "
    "final_url = excluded.final_url, status = excluded.status, "
    "content_type = excluded.content_type, codec = excluded.codec, "
    "body = excluded.body, size = excluded.size, stored_at = excluded.stored_at) "
    "SELECT upd.id, upd.attempts, upd.item_key, att.n FROM upd "
    "LEFT JOIN att ON att.row_id = upd.id"
)


def _overlap(keys: Sequence[set[str]], outcomes: Sequence[Outcome]) -> bool:
    """Whether two of the outcomes are of one row or share an item key: then what one
    writes changes what the next reads, and they are applied one after the other."""
    if len({o.row_id for o in outcomes}) < len(outcomes):
        return True
    seen: set[str] = set()
    for some in keys:
        if not seen.isdisjoint(some):
            return True
        seen |= some
    return False


class _OneByOne(Exception):
    """Raised inside a group commit to roll it back and apply its outcomes one by one."""


class PostgresStore(PgReader, Writer):
    """The Store contract on PostgreSQL. Build with ``PostgresStore.open(url)``."""

    # writes ------------------------------------------------------------------
    def _insert_rows(
        self, conn: psycopg.Connection[Any], rows: Sequence[NewRow], parent: int | None, now: str
    ) -> list[Row]:
        """Insert ``rows`` found by the row ``parent``; exactly the new ones come back."""
        return self._insert_found(conn, [(0, parent, r) for r in rows], now).get(0, [])

    def _insert_found(
        self,
        conn: psycopg.Connection[Any],
        found: Sequence[tuple[int, int | None, NewRow]],
        now: str,
    ) -> dict[int, list[Row]]:
        """Multi-row INSERT .. ON CONFLICT DO NOTHING RETURNING of rows found by several
        pages (``(page, parent row id, row)``): exactly the rows that did not exist come
        back, each under the first page that found it (duplicates inside the batch
        included), in id order."""
        inserted: dict[int, list[Row]] = {}
        for chunk in chunks(found, CHUNK):
            columns: list[list[Any]] = [[] for _ in INSERT_COLS.split(",")]
            by_fp: dict[str, Prepared] = {}
            page_of: dict[str, int] = {}
            for (page, _, _), prepared in zip(
                chunk, prepare_rows([(parent, new) for _, parent, new in chunk], now), strict=True
            ):
                values = prepared[0]
                if values[0] not in by_fp:
                    by_fp[values[0]] = prepared
                    page_of[values[0]] = page
                for column, value in zip(columns, values, strict=True):
                    column.append(value)
            # one query text whatever the number of rows (psycopg parses each new text)
            got = conn.execute(_INSERT_FOUND, columns).fetchall()
            for prepared, row in pending_rows(got, by_fp, now):
                inserted.setdefault(page_of[prepared[0][0]], []).append(row)
        for rows in inserted.values():
            rows.sort(key=lambda row: row.id)
        return inserted

    def commit_many(self, outcomes: Sequence[Outcome]) -> list[CommitResult | None]:
        """Commit a group of outcomes in ONE transaction, results in the same order. All
        or none. None for an outcome refused by the fence (nothing of it written).

        Each statement serves the whole group (:meth:`_apply_group`): one UPDATE of
        the rows with the fence, one INSERT of the attempts, one of the bodies, one of
        the found rows, one read of the items, one recomputation, instead of each of
        these per outcome, because every statement is a round trip the crawl waits for.
        That is the same as applying them one by one only while no two outcomes touch
        the same row or item key; a group where they do (rare: two pages of one item
        in one group) is applied one outcome after the other (:meth:`_apply_outcome`)."""
        if not outcomes:
            return []
        now = self._clock()

        def one_by_one(conn: psycopg.Connection[Any]) -> list[CommitResult | None]:
            return [self._apply_outcome(conn, o, now) for o in outcomes]

        if len(outcomes) > 1 and _overlap([o.item_keys() for o in outcomes], outcomes):
            return self._run(one_by_one, len(outcomes))
        try:
            return self._run(lambda conn: self._apply_group(conn, outcomes, now), len(outcomes))
        except _OneByOne:
            return self._run(one_by_one, 0)

    def _apply_group(
        self, conn: psycopg.Connection[Any], outcomes: Sequence[Outcome], now: str
    ) -> list[CommitResult | None]:
        """Every write of the group's outcomes inside the caller's transaction, one
        statement per table; raises :class:`_OneByOne` (the caller rolls back and applies
        them one by one) when two accepted outcomes share an item key found only in the
        database (a row's own item, the items a retried row wrote before)."""
        marks = [o.marks() for o in outcomes]
        bodies = [(o.row_id, o.response) for o in outcomes if o.response is not None]
        # as SqliteStore: zlib level 1, paid on every page
        packed = {row_id: zlib.compress(r.body, 1) for row_id, r in bodies}
        got = conn.execute(
            _GROUP_WRITE,
            {
                "ids": [o.row_id for o in outcomes],
                "status": [m[0].value for m in marks],
                "spent": [0 if o.reparse else 1 for o in outcomes],  # reparse: no request
                "retryable": [int(m[2]) for m in marks],
                "kind": [m[1].value if m[1] else None for m in marks],
                "ok": [o.ok for o in outcomes],
                "detail": [m[3] for m in marks],
                "http": [o.http_status for o in outcomes],
                "token": [o.lease_token for o in outcomes],
                "logged": [not o.reparse for o in outcomes],
                "r_ids": [row_id for row_id, _ in bodies],
                "r_url": [r.url for _, r in bodies],
                "r_final": [r.final_url for _, r in bodies],
                "r_status": [r.status for _, r in bodies],
                "r_ct": [r.content_type for _, r in bodies],
                "r_body": [packed[row_id] for row_id, _ in bodies],
                "now": now,
            },
        ).fetchall()
        done = {int(row_id): (int(attempts), own) for row_id, attempts, own, _ in got}
        history = {int(row_id): int(n) for row_id, _, _, n in got if n is not None}
        missing = [o for o in outcomes if o.row_id not in done]
        if missing:
            exist = {
                int(i)
                for (i,) in conn.execute(
                    "SELECT id FROM rows WHERE id = ANY(%s)", ([o.row_id for o in missing],)
                )
            }
            for o in missing:
                if o.lease_token is None or o.row_id not in exist:
                    raise WorkspaceError(f"commit for unknown row id {o.row_id}")
        taken = [i for i, o in enumerate(outcomes) if o.row_id in done]
        keys = {i: outcomes[i].item_keys() for i in taken}
        for i in taken:
            own = done[outcomes[i].row_id][1]
            if own is not None:
                keys[i].add(str(own))
        if _overlap([keys[i] for i in taken], [outcomes[i] for i in taken]):
            raise _OneByOne
        found = self._insert_found(
            conn, [(i, outcomes[i].row_id, r) for i in taken for r in outcomes[i].new_rows], now
        )
        refreshed = {
            i: self._refresh_carry(conn, outcomes[i], now)
            for i in taken
            if outcomes[i].reparse and outcomes[i].new_rows
        }
        for i in taken:  # list pages' counts (completeness.py), as one by one
            if outcomes[i].listing is not None:
                self._keep_listing(conn, outcomes[i], now)
        # the items of the group's keys, and those the rows wrote before (whose
        # completeness a retried or reparsed row's new status changes), locked
        item_keys = sorted(
            {w.dedupe_key for i in taken for w in outcomes[i].items}
            | {p.dedupe_key for i in taken for p in outcomes[i].parts}
        )
        wanted = set(item_keys)
        before: dict[str, dict[str, Any]] = {}
        linked: dict[int, set[str]] = {}
        for key, data, digest, names, row_id in conn.execute(
            "SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
            "WHERE dedupe_key = ANY(%s) OR row_id = ANY(%s) ORDER BY dedupe_key FOR UPDATE",
            (item_keys, [outcomes[i].row_id for i in taken]),
        ):
            if key in wanted:
                before[key] = itemplan.known(data, digest, names, row_id)
            if row_id is not None:
                linked.setdefault(int(row_id), set()).add(str(key))
        recompute: dict[int, set[str]] = {}
        for i in taken:
            o = outcomes[i]
            mine = {w.dedupe_key for w in o.items} | {p.dedupe_key for p in o.parts}
            own = done[o.row_id][1]
            if own is not None:
                mine.add(str(own))
            mine.update(
                str(r.context["item_key"]) for r in found.get(i, ()) if "item_key" in r.context
            )
            if o.reparse or history.get(o.row_id, 1) > 1:
                mine |= linked.get(o.row_id, set())
            keys[i] |= linked.get(o.row_id, set())
            recompute[i] = mine
        if _overlap([keys[i] for i in taken], [outcomes[i] for i in taken]):
            raise _OneByOne
        plans = {i: itemplan.plan(outcomes[i], before, now) for i in taken}
        fresh = self._write_plans(conn, list(plans.values()))
        held = [(h, outcomes[i].row_id) for i in taken for h in outcomes[i].holds]
        stored_keys = [
            w.dedupe_key
            for i in taken
            if outcomes[i].holds or outcomes[i].items
            for w in outcomes[i].items
        ]
        holds.settle(conn, POSTGRES, held, stored_keys, now)
        owner = {key: i for i in taken for key in recompute[i]}
        completed: dict[int, list[str]] = {i: [] for i in taken}
        for key in self._recompute(conn, owner, fresh):
            completed[owner[key]].append(key)
        results: list[CommitResult | None] = [None] * len(outcomes)
        for i in taken:
            o, p = outcomes[i], plans[i]
            results[i] = CommitResult(
                status=marks[i][0],
                attempt=done[o.row_id][0],
                inserted=found.get(i, []),
                items_new=p.new,
                items_changed=len(p.changed),
                changed=p.changed,
                items_unchanged=p.unchanged,
                completed=sorted(completed[i]),
                response_bytes=len(packed[o.row_id]) if o.row_id in packed else 0,
                refreshed=refreshed.get(i, []),
            )
        return results

    def _write_attempts(
        self,
        conn: psycopg.Connection[Any],
        attempts: Sequence[tuple[Outcome, Marks, int]],
        now: str,
    ) -> dict[int, int]:
        """Append each attempt (outcome, its marks, the row's attempt count) to its row's
        history in one statement; row id -> its number there. The rows are locked by
        this transaction's UPDATE and each comes once, so max(n) cannot race."""
        if not attempts:
            return {}
        got = conn.execute(
            "INSERT INTO attempts (row_id, n, attempt, time, outcome, http_status, "
            "error_kind, error) SELECT v.id, (SELECT coalesce(max(a.n), 0) + 1 FROM attempts a "
            "WHERE a.row_id = v.id), v.attempt, %s, v.outcome, v.http, v.kind, v.detail "
            "FROM unnest(%b::bigint[], %b::int[], %b::text[], %b::int[], %b::text[], "
            "%b::text[]) WITH ORDINALITY AS v(id, attempt, outcome, http, kind, detail, o) "
            "ORDER BY v.o RETURNING row_id, n",
            (
                now,
                [o.row_id for o, _, _ in attempts],
                [attempt for _, _, attempt in attempts],
                [m[0].value for _, m, _ in attempts],
                [o.http_status for o, _, _ in attempts],
                [m[1].value if m[1] else None for _, m, _ in attempts],
                [m[3] for _, m, _ in attempts],
            ),
        ).fetchall()
        return {int(row_id): int(n) for row_id, n in got}

    def _write_responses(
        self, conn: psycopg.Connection[Any], outcomes: Sequence[Outcome], now: str
    ) -> dict[int, int]:
        """Store the bodies of those outcomes that carry one, in one statement; row id
        -> compressed size."""
        bodies = [(o.row_id, o.response) for o in outcomes if o.response is not None]
        if not bodies:
            return {}
        # as SqliteStore: zlib level 1, paid on every page
        packed = [zlib.compress(r.body, 1) for _, r in bodies]
        conn.execute(
            "INSERT INTO responses (row_id, url, final_url, status, content_type, codec, "
            "body, size, stored_at) SELECT v.id, v.url, v.final_url, v.status, v.ct, 'zlib', "
            "v.body, length(v.body), %s FROM unnest(%b::bigint[], %b::text[], %b::text[], "
            "%b::int[], %b::text[], %b::bytea[]) AS v(id, url, final_url, status, ct, body) "
            "ON CONFLICT (row_id) DO UPDATE SET url = excluded.url, "
            "final_url = excluded.final_url, status = excluded.status, "
            "content_type = excluded.content_type, codec = excluded.codec, "
            "body = excluded.body, size = excluded.size, stored_at = excluded.stored_at",
            (
                now,
                [row_id for row_id, _ in bodies],
                [r.url for _, r in bodies],
                [r.final_url for _, r in bodies],
                [r.status for _, r in bodies],
                [r.content_type for _, r in bodies],
                packed,
            ),
        )
        return {row_id: len(body) for (row_id, _), body in zip(bodies, packed, strict=True)}

    def _write_items(
        self,
        conn: psycopg.Connection[Any],
        outcome: Outcome,
        now: str,
        digests: itemplan.Digests | None = None,
    ) -> ItemsWritten:
        """Upsert items and merge parts, comparing content hashes so identical content
        touches nothing. The known items are read FOR UPDATE (another worker's commit on
        the same key waits); a key another transaction inserted meanwhile makes this
        one run again (:class:`RetryTransaction`), when it will find the item."""
        keys = {w.dedupe_key for w in outcome.items} | {p.dedupe_key for p in outcome.parts}
        if not keys:
            return 0, [], 0, set(), set()
        before: dict[str, dict[str, Any]] = {}
        for chunk in chunks(sorted(keys), CHUNK):
            for key, stored, digest, names, row_id in conn.execute(
                "SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                "WHERE dedupe_key = ANY(%s) ORDER BY dedupe_key FOR UPDATE",
                (list(chunk),),
            ):
                before[key] = itemplan.known(stored, digest, names, row_id)
        p = itemplan.plan(outcome, before, now, digests)
        return p.new, p.changed, p.unchanged, keys, self._write_plans(conn, [p])

    def _write_plans(
        self, conn: psycopg.Connection[Any], plans: Sequence[itemplan.ItemPlan]
    ) -> set[str]:
        """Write the item plans of a commit (of keys read FOR UPDATE, no key in two
        plans); the keys inserted. A key another transaction inserted meanwhile makes
        this one run again (:class:`RetryTransaction`), when it will find the item."""
        # `complete` starts as the declared value (SQLite's ?8); _recompute corrects it
        inserts = [(*i, i[7]) for p in plans for i in p.inserts]
        updates = [u for p in plans for u in p.updates]
        relinks = [r for p in plans for r in p.relinks]
        if inserts:
            got = conn.execute(
                "INSERT INTO items (dedupe_key, source_type, source_id, data, "
                "content_hash, first_scraped, last_scraped, declared_complete, parts, "
                "row_id, complete) SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], "
                "%b::text[], %b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[], "
                "%b::bigint[], %b::smallint[]) ON CONFLICT (dedupe_key) DO NOTHING "
                "RETURNING 1",
                [list(column) for column in zip(*inserts, strict=True)],
            ).fetchall()
            if len(got) != len(inserts):
                raise RetryTransaction  # another commit inserted one of these keys
        with conn.cursor() as cur:
            if updates:
                cur.executemany(POSTGRES.q(ITEM_UPDATE), updates)
            if relinks:
                cur.executemany("UPDATE items SET row_id = %s WHERE dedupe_key = %s", relinks)
        return {i[0] for i in inserts}

    # hooks of the one-by-one path (write.Writer._apply_outcome) -----------------
    def _store_response(self, conn: psycopg.Connection[Any], outcome: Outcome, now: str) -> int:
        return self._write_responses(conn, [outcome], now).get(outcome.row_id, 0)

    def _log_attempt(
        self, conn: psycopg.Connection[Any], outcome: Outcome, marks: Marks, attempt: int, now: str
    ) -> int:
        return self._write_attempts(conn, [(outcome, marks, attempt)], now)[outcome.row_id]

    def _after_bulk(self, n: int) -> None:
        if n > COMPACT_EVERY:
            self._compact()  # each requeued row added two deltas to the tally


if TYPE_CHECKING:

    def _is_a_store(store: PostgresStore) -> Store:
        return store  # mypy checks that PostgresStore keeps the whole Store protocol


__all__ = ["PostgresStore", "utc_now"]
