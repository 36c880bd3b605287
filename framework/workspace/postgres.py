"""The :class:`~framework.workspace.store.Store` on PostgreSQL: one job's workspace in a
database (or a schema of one), shared by crawl workers on many machines.

Owns the writes of that backend: seed, the one-transaction ``commit`` of a page's
outcome (``commit_many``: of a group of them), item upserts and part merges, holds, the
completeness recomputation, requeue, refund, reset, review decisions. Connections,
schema and transactions are :mod:`framework.workspace.postgres_base`'s, the reads
:mod:`framework.workspace.postgres_read`'s, the lease protocol
:mod:`framework.workspace.postgres_leases`'s. The semantics are those of
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

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from framework.errors import UsageError, WorkspaceError
from framework.workspace import carry, holds, itemplan
from framework.workspace.holds import Hold
from framework.workspace.postgres_base import COMPACT_EVERY, RetryTransaction
from framework.workspace.postgres_read import _HOLD_SQL, PgReader, _to_hold
from framework.workspace.records import (
    CommitResult,
    HoldWrite,
    Marks,
    NewRow,
    Outcome,
    Row,
    RowStatus,
    canonical_json,
    content_hash,
)
from framework.workspace.sqlite_base import (
    CHUNK,
    READ_WITH_META,
    ROWS_RESET_META,
    _chunks,
    utc_now,
)
from framework.workspace.store import RequeueFilter

if TYPE_CHECKING:
    import psycopg

    from framework.workspace.store import Store

_INSERT_COLS = (
    "fingerprint, kind, url, method, body, body_type, parent_id, status, context, "
    "item_key, required, created_at, updated_at"
)
_N_INSERT = _INSERT_COLS.count(",") + 1
# rows in the order given (ids grow in it), those whose fingerprint exists left out
_INSERT_FOUND = (
    f"INSERT INTO rows ({_INSERT_COLS}) SELECT {_INSERT_COLS} FROM unnest("
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::text[], %b::text[], %b::text[], %b::smallint[], %b::text[], %b::text[]) "
    f"WITH ORDINALITY AS v({_INSERT_COLS}, o) ORDER BY o "
    "ON CONFLICT (fingerprint) DO NOTHING RETURNING id, fingerprint"
)

# The completeness rule (docs/workspace.md), the same expression as SQLite's
# (framework/workspace/sqlite_base.py _COMPLETE_EXPR): the item's own row is ok, every
# required row naming it is ok, and an item written as not complete waits until one
# such row exists.
_COMPLETE_EXPR = """(
    (items.row_id IS NULL
     OR EXISTS (SELECT 1 FROM rows r WHERE r.id = items.row_id AND r.status = 'ok'))
    AND NOT EXISTS (SELECT 1 FROM rows r WHERE r.item_key = items.dedupe_key
                    AND r.required = 1 AND r.status <> 'ok')
    AND (items.declared_complete = 1
         OR EXISTS (SELECT 1 FROM rows r WHERE r.item_key = items.dedupe_key
                    AND r.required = 1))
)"""

# The fence (docs/scaling.md): a commit carrying a token writes only while the row
# still carries that token; an ok row drops its lease in the same UPDATE.
_OUTCOME_UPDATE = (
    "UPDATE rows SET status = %(status)s, attempts = attempts + %(spent)s, "
    "retryable = %(retryable)s, last_error_kind = coalesce(%(kind)s, last_error_kind), "
    "last_error = CASE WHEN %(ok)s THEN last_error ELSE %(detail)s END, "
    "last_http_status = %(http)s, updated_at = %(now)s, "
    "lease_owner = CASE WHEN %(ok)s THEN NULL ELSE lease_owner END, "
    "lease_expires_at = CASE WHEN %(ok)s THEN NULL ELSE lease_expires_at END "
    "WHERE id = %(id)s AND (%(token)s::bigint IS NULL OR lease_token = %(token)s::bigint) "
    "RETURNING attempts, item_key"
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


class PostgresStore(PgReader):
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
        for chunk in _chunks(found, CHUNK):
            columns: list[list[Any]] = [[] for _ in range(_N_INSERT)]
            by_fp: dict[str, tuple[int, NewRow, str, int | None]] = {}
            for page, parent, new in chunk:
                ctx = dict(new.context)
                item_key = ctx.get("item_key")
                fp = new.fingerprint
                ctx_text = canonical_json(ctx) if ctx else "{}"
                parent_id = new.parent_id if new.parent_id is not None else parent
                by_fp.setdefault(fp, (page, new, ctx_text, parent_id))
                values = (
                    fp,
                    new.kind,
                    new.url,
                    new.method.upper(),
                    new.body,
                    new.body_type,
                    parent_id,
                    RowStatus.PENDING.value,
                    ctx_text,
                    None if item_key is None else str(item_key),
                    1 if item_key is not None and ctx.get("required", True) else 0,
                    now,
                    now,
                )
                for column, value in zip(columns, values, strict=True):
                    column.append(value)
            # one query text whatever the number of rows (psycopg parses each new text)
            got = conn.execute(_INSERT_FOUND, columns).fetchall()
            for row_id, fp in got:
                page, new, ctx_text, parent_id = by_fp[fp]
                inserted.setdefault(page, []).append(
                    Row(
                        id=int(row_id),
                        kind=new.kind,
                        url=new.url,
                        method=new.method.upper(),
                        body=new.body,
                        body_type=new.body_type,
                        parent_id=parent_id,
                        status=RowStatus.PENDING,
                        attempts=0,
                        retryable=True,
                        last_error_kind=None,
                        last_error=None,
                        last_http_status=None,
                        context=json.loads(ctx_text) if new.context else {},
                        created_at=now,
                        updated_at=now,
                    )
                )
        for rows in inserted.values():
            rows.sort(key=lambda row: row.id)
        return inserted

    def seed(self, rows: Sequence[NewRow]) -> list[Row]:
        now = self._clock()

        def work(conn: psycopg.Connection[Any]) -> list[Row]:
            inserted = self._insert_rows(conn, rows, None, now)
            keys = {str(r.context["item_key"]) for r in inserted if "item_key" in r.context}
            self._recompute(conn, keys)
            return inserted

        return self._run(work)

    def commit(self, outcome: Outcome) -> CommitResult:
        (res,) = self.commit_many([outcome])
        if res is None:
            raise WorkspaceError(f"commit for row {outcome.row_id} refused")
        return res

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
        self._settle_holds(conn, held, stored_keys, now)
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

    def _apply_outcome(
        self, conn: psycopg.Connection[Any], outcome: Outcome, now: str
    ) -> CommitResult | None:
        """Every write of one outcome inside the caller's transaction (see
        :meth:`SqliteStore._apply_outcome`); None: refused by the fence."""
        status, kind, retryable, detail = marks = outcome.marks()
        token = outcome.lease_token
        got = conn.execute(
            _OUTCOME_UPDATE,
            {
                "status": status.value,
                "spent": 0 if outcome.reparse else 1,  # a re-extraction made no request
                "retryable": int(retryable),
                "kind": kind.value if kind else None,
                "ok": outcome.ok,
                "detail": detail,
                "http": outcome.http_status,
                "now": now,
                "id": outcome.row_id,
                "token": token,
            },
        ).fetchone()
        if got is None:
            if (
                token is not None
                and conn.execute("SELECT 1 FROM rows WHERE id = %s", (outcome.row_id,)).fetchone()
            ):
                return None  # fenced: nothing of this outcome is written
            raise WorkspaceError(f"commit for unknown row id {outcome.row_id}")
        attempt, own_key = int(got[0]), got[1]
        stored = self._write_responses(conn, [outcome], now)
        history_n = 2  # a reparsed row has its items from earlier: look them up
        if not outcome.reparse:
            history_n = self._write_attempts(conn, [(outcome, marks, attempt)], now)[outcome.row_id]
        inserted = self._insert_rows(conn, outcome.new_rows, outcome.row_id, now)
        refreshed = self._refresh_carry(conn, outcome, now) if outcome.reparse else []
        new, changed, unchanged, keys, fresh = self._write_items(conn, outcome, now)
        self._settle_holds(
            conn,
            [(h, outcome.row_id) for h in outcome.holds],
            [w.dedupe_key for w in outcome.items],
            now,
        )
        if own_key is not None:
            keys.add(str(own_key))
        keys.update(str(r.context["item_key"]) for r in inserted if "item_key" in r.context)
        if history_n > 1:
            keys.update(
                k
                for (k,) in conn.execute(
                    "SELECT dedupe_key FROM items WHERE row_id = %s", (outcome.row_id,)
                )
            )
        completed = self._recompute(conn, keys, fresh)
        return CommitResult(
            status=status,
            attempt=attempt,
            inserted=inserted,
            items_new=new,
            items_changed=len(changed),
            changed=changed,
            items_unchanged=unchanged,
            completed=completed,
            response_bytes=stored.get(outcome.row_id, 0),
            refreshed=refreshed,
        )

    def _refresh_carry(
        self, conn: psycopg.Connection[Any], outcome: Outcome, now: str
    ) -> list[int]:
        """As :meth:`SqliteStore._refresh_carry` (:mod:`framework.workspace.carry`)."""
        if not outcome.new_rows:
            return []
        values = carry.wanted(outcome.new_rows)
        existing = conn.execute(
            "SELECT id, fingerprint, context FROM rows WHERE parent_id = %s "
            "AND fingerprint = ANY(%s)",
            (outcome.row_id, list(values)),
        ).fetchall()
        updates = carry.refreshed(existing, values)
        if updates:
            conn.execute(
                "UPDATE rows SET context = u.context, updated_at = %s FROM "
                "unnest(%s::text[], %s::bigint[]) AS u(context, id) WHERE rows.id = u.id",
                (now, [t for t, _ in updates], [i for _, i in updates]),
            )
        return sorted(row_id for _, row_id in updates)

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

    def _settle_holds(
        self,
        conn: psycopg.Connection[Any],
        held: Sequence[tuple[HoldWrite, int]],
        stored_keys: Sequence[str],
        now: str,
    ) -> None:
        """As :func:`framework.workspace.holds.settle`: keep the held candidates (each
        with the row that held it), drop the holds of keys this commit stored as items."""
        if held:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO holds (dedupe_key, status, source_type, source_id, data, "
                    "reasons, row_id, first_held, last_held) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (dedupe_key) DO UPDATE SET status = excluded.status, "
                    "source_type = excluded.source_type, source_id = excluded.source_id, "
                    "data = excluded.data, reasons = excluded.reasons, "
                    "row_id = excluded.row_id, last_held = excluded.last_held",
                    [
                        (
                            h.dedupe_key,
                            h.status,
                            h.source_type,
                            h.source_id,
                            json.dumps(h.data, ensure_ascii=False, sort_keys=True, default=str),
                            json.dumps(list(h.reasons), ensure_ascii=False, default=str),
                            row_id,
                            now,
                            now,
                        )
                        for h, row_id in held
                    ],
                )
        if stored_keys:
            conn.execute("DELETE FROM holds WHERE dedupe_key = ANY(%s)", (list(stored_keys),))

    def _write_items(
        self, conn: psycopg.Connection[Any], outcome: Outcome, now: str
    ) -> tuple[int, list[str], int, set[str], set[str]]:
        """Upsert items and merge parts, comparing content hashes so identical content
        touches nothing. The known items are read FOR UPDATE (another worker's commit on
        the same key waits); a key another transaction inserted meanwhile makes this
        one run again (:class:`RetryTransaction`), when it will find the item."""
        keys = {w.dedupe_key for w in outcome.items} | {p.dedupe_key for p in outcome.parts}
        if not keys:
            return 0, [], 0, set(), set()
        before: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(sorted(keys), CHUNK):
            for key, stored, digest, names, row_id in conn.execute(
                "SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                "WHERE dedupe_key = ANY(%s) ORDER BY dedupe_key FOR UPDATE",
                (list(chunk),),
            ):
                before[key] = itemplan.known(stored, digest, names, row_id)
        p = itemplan.plan(outcome, before, now)
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
                cur.executemany(
                    "UPDATE items SET data = %s, content_hash = %s, last_scraped = %s, "
                    "parts = %s, row_id = coalesce(%s, row_id), "
                    "declared_complete = coalesce(%s, declared_complete), "
                    "source_type = coalesce(%s, source_type), "
                    "source_id = coalesce(%s, source_id) WHERE dedupe_key = %s",
                    updates,
                )
            if relinks:
                cur.executemany("UPDATE items SET row_id = %s WHERE dedupe_key = %s", relinks)
        return {i[0] for i in inserts}

    def _recompute(
        self, conn: psycopg.Connection[Any], keys: Iterable[str], fresh: Iterable[str] = ()
    ) -> list[str]:
        """Recompute ``complete`` of those items from the rows; return the keys that
        became complete. Only items whose value changes are written."""
        completed: list[str] = []
        new_keys = set(fresh)
        for chunk in _chunks(sorted(set(keys)), CHUNK):
            got = conn.execute(
                f"SELECT dedupe_key, complete, {_COMPLETE_EXPR} FROM items "
                "WHERE dedupe_key = ANY(%s)",
                (list(chunk),),
            ).fetchall()
            flips = [(int(now), key) for key, was, now in got if bool(was) != bool(now)]
            if flips:
                with conn.cursor() as cur:
                    cur.executemany("UPDATE items SET complete = %s WHERE dedupe_key = %s", flips)
            completed += [key for key, _, now in got if now and (key in new_keys)]
            completed += [key for now, key in flips if now and key not in new_keys]
        return sorted(completed)

    def decide_hold(self, key: str, accept: bool) -> Hold:
        """Accept or reject the ``review_required`` candidate of ``key`` (as
        :func:`framework.workspace.holds.decide`): accepted, it becomes the item, the
        sub-tab data the item merged kept; rejected, it is dropped."""
        now = self._clock()

        def work(conn: psycopg.Connection[Any]) -> Hold:
            got = conn.execute(
                _HOLD_SQL.format(where="WHERE h.dedupe_key = %s") + " FOR UPDATE OF h", (key,)
            ).fetchone()
            hold = None if got is None else _to_hold(got)
            if hold is None or hold.status != holds.REVIEW:
                what = f"held as {hold.status}" if hold else "not held"
                raise UsageError(f"{key}: {what}, nothing to review (see `framework review`)")
            if accept:
                row = conn.execute(
                    "SELECT data, parts FROM items WHERE dedupe_key = %s FOR UPDATE", (key,)
                ).fetchone()
                data = dict(hold.data)
                if row is not None:
                    parts = json.loads(row[1]) if row[1] else []
                    itemplan.keep_parts(data, json.loads(row[0]), parts)
                    conn.execute(
                        "UPDATE items SET data = %s, content_hash = %s, last_scraped = %s "
                        "WHERE dedupe_key = %s",
                        (canonical_json(data), content_hash(data), now, key),
                    )
            conn.execute("DELETE FROM holds WHERE dedupe_key = %s", (key,))
            return hold

        return self._run(work)

    def requeue(self, which: RequeueFilter, max_attempts: int) -> int:
        """As :meth:`SqliteStore.requeue`: matching rows back to pending with a fresh
        attempt budget (history kept)."""
        where = ["status <> 'pending'"]
        params: list[Any] = [self._clock()]
        if which.errors or which.exhausted:
            where.append("status = 'error'")
        if which.exhausted:
            where.append("(attempts >= %s OR retryable = 0)")
            params.append(max_attempts)
        if which.kind is not None:
            where.append("kind = %s")
            params.append(which.kind)
        if which.url_contains:
            where.append("strpos(url, %s) > 0")
            params.append(which.url_contains)

        def work(conn: psycopg.Connection[Any]) -> int:
            got = conn.execute(
                "UPDATE rows SET status = 'pending', attempts = 0, retryable = 1, "
                f"updated_at = %s WHERE {' AND '.join(where)} RETURNING id, item_key",
                params,
            ).fetchall()
            ids = [int(r[0]) for r in got]
            keys = {r[1] for r in got if r[1] is not None}
            for chunk in _chunks(ids, CHUNK):
                keys.update(
                    k
                    for (k,) in conn.execute(
                        "SELECT dedupe_key FROM items WHERE row_id = ANY(%s)", (list(chunk),)
                    )
                )
            self._recompute(conn, keys)
            return len(ids)

        n = self._run(work)
        if n > COMPACT_EVERY:
            self._compact()  # each requeued row added two deltas to the tally
        return n

    def refund(self, attempts: Mapping[int, int]) -> None:
        if not attempts:
            return

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE rows SET attempts = greatest(0, attempts - %s) WHERE id = %s",
                    [(n, row_id) for row_id, n in sorted(attempts.items())],
                )

        self._run(work)

    def reset_rows(self) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (ROWS_RESET_META, self._clock()),
            )
            conn.execute("DELETE FROM attempts")
            conn.execute("DELETE FROM responses")
            conn.execute("DELETE FROM rows")
            conn.execute("UPDATE items SET row_id = NULL WHERE row_id IS NOT NULL")
            # what the deleted pages were read with says nothing of the next ones
            conn.execute(
                "DELETE FROM meta WHERE left(key, %s) = %s",
                (len(READ_WITH_META), READ_WITH_META),
            )

        self._run(work)


if TYPE_CHECKING:

    def _is_a_store(store: PostgresStore) -> Store:
        return store  # mypy checks that PostgresStore keeps the whole Store protocol


__all__ = ["PostgresStore", "utc_now"]
