"""The embedded :class:`~framework.workspace.store.Store`: one SQLite file in WAL mode.

Owns the writes to ``state.sqlite`` whose SQL is SQLite's own: the group commit
(``commit_many``, with its fast path for plain reparses), multi-row inserts of found
rows, attempts, stored bodies and item upserts. The writes both engines share (seed,
the one-transaction commit of one outcome, the completeness recomputation, requeue,
refund, reset) are :class:`framework.workspace.write.Writer`'s; connections, schema and
transactions :mod:`framework.workspace.sqlite_base`'s; the reads
:mod:`framework.workspace.read`'s and :mod:`framework.workspace.sqlite_read`'s. It
never writes the JSONL logs, never takes workspace locks and knows nothing of Scrapy.
The on-disk format is the contract documented in ``docs/workspace.md``.

Durability: WAL with ``synchronous=NORMAL``. A transaction is appended to the WAL and
committed before :meth:`SqliteStore.commit` returns; the WAL is only fsynced at
checkpoints. A killed process (``kill -9``) therefore never loses or tears a committed
transaction: the WAL is in the OS page cache and the next opener recovers it. Only an
OS crash or power loss can drop the last few transactions, and then the database is
still consistent (it rolls back to an earlier commit) and resume simply fetches those
pages again.

Checkpoints run on a background thread (see :mod:`framework.workspace.sqlite_base`).

Threads: each thread gets its own connection (SQLite connections must not be shared
while a statement runs); :meth:`close` closes all of them. Readers page through tables
by keyset in bounded chunks and never keep a cursor open between chunks, so a caller may
commit while it iterates.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from framework.workspace import holds, itemplan
from framework.workspace.records import CommitResult, Marks, NewRow, Outcome, Row, RowStatus
from framework.workspace.sql import (
    CHUNK,
    INSERT_COLS,
    ITEM_UPDATE,
    N_INSERT,
    SQLITE,
    Prepared,
    chunks,
    marks,
    pending_rows,
    prepare_rows,
    utc_now,
)
from framework.workspace.sqlite_base import CHECKPOINT_EVERY
from framework.workspace.sqlite_read import SqliteReader
from framework.workspace.write import ItemsWritten, Writer


class SqliteStore(SqliteReader, Writer):
    """The Store contract on one SQLite file. Build with ``SqliteStore.open(path)``."""

    def _insert_rows(
        self, conn: sqlite3.Connection, rows: Sequence[NewRow], parent: int | None, now: str
    ) -> list[Row]:
        """Multi-row INSERT .. ON CONFLICT DO NOTHING RETURNING: one statement per chunk,
        and exactly the rows that did not exist come back (duplicates inside the batch
        included)."""
        inserted: list[Row] = []
        for chunk in chunks(rows, CHUNK):
            params: list[Any] = []
            by_fp: dict[str, Prepared] = {}
            for prepared in prepare_rows([(parent, new) for new in chunk], now):
                by_fp.setdefault(prepared[0][0], prepared)
                params += prepared[0]
            values = ",".join(f"({marks(N_INSERT)})" for _ in chunk)
            cur = conn.execute(
                f"INSERT INTO rows ({INSERT_COLS}) VALUES {values} "
                "ON CONFLICT (fingerprint) DO NOTHING RETURNING id, fingerprint",
                params,
            )
            inserted += [row for _, row in pending_rows(cur.fetchall(), by_fp, now)]
        inserted.sort(key=lambda row: row.id)
        return inserted

    def commit_many(self, outcomes: Sequence[Outcome]) -> list[CommitResult | None]:
        """Commit a group of outcomes in ONE transaction (group commit: the crawl's
        :mod:`framework.crawl.group`), results in the same order. All or none: a fault
        rolls the whole group back and every row stays as it was. None for an outcome
        that :meth:`_apply_outcome` refused (nothing of it written)."""
        if not outcomes:
            return []
        now = self._clock()
        conn = self._conn()
        with self._tx(conn):
            digests: itemplan.Digests = {}  # items hashed once in this commit
            same = self._plain_reparses(conn, outcomes, now, digests)
            results = [
                same[i] if i in same else self._apply_outcome(conn, o, now, digests)
                for i, o in enumerate(outcomes)
            ]
        before = self._commits
        self._commits += len(outcomes)
        if self._commits // CHECKPOINT_EVERY != before // CHECKPOINT_EVERY:
            self._checkpoint_soon()  # by outcomes, not transactions: the WAL grows by page
        return results

    def _plain_reparses(
        self,
        conn: sqlite3.Connection,
        outcomes: Sequence[Outcome],
        now: str,
        digests: itemplan.Digests,
    ) -> dict[int, CommitResult]:
        """The group's plain reparsed pages, written together: an ok row read again into
        the items it already has (changed or not), finding no row, no part and no hold.
        For such a page :meth:`_apply_outcome` would change nothing on the row but
        ``updated_at``, update the changed items and recompute their completeness: here
        that is two reads, one ``executemany`` per table and one recomputation for the
        whole group instead of ~6 statements per page. A page whose items are all
        unchanged writes nothing (the row keeps even its ``updated_at``). After a
        selector fix most pages are such pages, and the reparse's one writing process is
        its bottleneck. Their results, by position.

        An outcome that shares a row or an item key with another of the group (its
        items, parts, holds, the items of the rows it found) is left to
        :meth:`_apply_outcome`: what one writes, the next must read."""
        maybe = [
            i
            for i, o in enumerate(outcomes)
            if o.reparse
            and o.ok
            and o.items
            and not (o.new_rows or o.parts or o.holds or o.response)
            and o.lease_token is None
            and o.listing is None  # a list page's count goes to its row (write.py)
        ]
        if not maybe or holds.any_held(
            conn, SQLITE
        ):  # a stored item may settle a hold: the long way
            return {}
        seen: Counter[tuple[str, Any]] = Counter()
        for o in outcomes:
            seen[("row", o.row_id)] += 1
            seen.update(("key", k) for k in o.item_keys())
        maybe = [
            i
            for i in maybe
            if seen[("row", outcomes[i].row_id)] == 1
            and all(seen[("key", w.dedupe_key)] == 1 for w in outcomes[i].items)
        ]
        ids = [outcomes[i].row_id for i in maybe]
        rows: dict[int, tuple[Any, ...]] = {}
        before: dict[str, dict[str, Any]] = {}
        linked: dict[int, set[str]] = {}
        for chunk in chunks(ids, CHUNK):
            qs = marks(len(chunk))
            for row_id, *state in conn.execute(
                "SELECT id, status, attempts, retryable, last_http_status, lease_owner, "
                f"item_key FROM rows WHERE id IN ({qs})",
                chunk,
            ):
                rows[row_id] = tuple(state)
            for key, data, digest, names, row_id in conn.execute(
                "SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                f"WHERE row_id IN ({qs})",
                chunk,
            ):
                before[key] = itemplan.known(data, digest, names, row_id)
                linked.setdefault(row_id, set()).add(key)
        plans: dict[int, tuple[int, itemplan.ItemPlan]] = {}
        for i in maybe:
            o = outcomes[i]
            state = rows.get(o.row_id)
            if state is None:
                continue  # unknown row: _apply_outcome says so
            status, attempts, retryable, http, owner, own_key = state
            keys = {w.dedupe_key for w in o.items}
            if (
                status != RowStatus.OK.value
                or not retryable
                or http != o.http_status
                or owner is not None
                or (own_key is not None and own_key not in keys)
                or linked.get(o.row_id) != keys
            ):
                continue
            plan = itemplan.plan(o, before, now, digests)
            if plan.inserts or plan.relinks:
                continue
            plans[i] = (int(attempts), plan)
        touched = [outcomes[i].row_id for i, (_, plan) in plans.items() if plan.updates]
        if touched:
            conn.executemany(ITEM_UPDATE, [u for _, plan in plans.values() for u in plan.updates])
            conn.executemany(
                "UPDATE rows SET updated_at = ? WHERE id = ?", [(now, r) for r in touched]
            )
        completed = set(
            self._recompute(conn, [k for _, plan in plans.values() for k in plan.changed])
        )
        return {
            i: CommitResult(
                status=RowStatus.OK,
                attempt=attempts,
                items_changed=len(plan.changed),
                changed=plan.changed,
                items_unchanged=plan.unchanged,
                completed=sorted(completed.intersection(plan.changed)),
            )
            for i, (attempts, plan) in plans.items()
        }

    def _log_attempt(
        self, conn: sqlite3.Connection, outcome: Outcome, marks: Marks, attempt: int, now: str
    ) -> int:
        """Append the attempt to the row's history; return its number there."""
        (history_n,) = conn.execute(
            "INSERT INTO attempts (row_id, n, attempt, time, outcome, http_status, "
            "error_kind, error) VALUES (?, (SELECT coalesce(max(n), 0) + 1 FROM attempts "
            "WHERE row_id = ?), ?, ?, ?, ?, ?, ?) RETURNING n",
            (
                outcome.row_id,
                outcome.row_id,
                attempt,
                now,
                marks[0].value,
                outcome.http_status,
                marks[1].value if marks[1] else None,
                marks[3],
            ),
        ).fetchone()
        return int(history_n)

    def _store_response(self, conn: sqlite3.Connection, outcome: Outcome, now: str) -> int:
        r = outcome.response
        if r is None:
            return 0
        # level 1: most of the gain of zlib on HTML at a fraction of level 6's CPU,
        # which the crawl pays on every page
        packed = zlib.compress(r.body, 1)
        conn.execute(
            "INSERT INTO responses (row_id, url, final_url, status, content_type, codec, "
            "body, size, stored_at) VALUES (?, ?, ?, ?, ?, 'zlib', ?, ?, ?) "
            "ON CONFLICT (row_id) DO UPDATE SET url = excluded.url, "
            "final_url = excluded.final_url, status = excluded.status, "
            "content_type = excluded.content_type, codec = excluded.codec, "
            "body = excluded.body, size = excluded.size, stored_at = excluded.stored_at",
            (
                outcome.row_id,
                r.url,
                r.final_url,
                r.status,
                r.content_type,
                packed,
                len(packed),
                now,
            ),
        )
        return len(packed)

    def _write_items(
        self,
        conn: sqlite3.Connection,
        outcome: Outcome,
        now: str,
        digests: itemplan.Digests | None = None,
    ) -> ItemsWritten:
        """Upsert items and merge parts, comparing content hashes so identical content
        touches nothing. One SELECT for the known state of every key, then executemany."""
        keys = {w.dedupe_key for w in outcome.items} | {p.dedupe_key for p in outcome.parts}
        if not keys:
            return 0, [], 0, set(), set()
        before: dict[str, dict[str, Any]] = {}
        ordered = sorted(keys)
        for chunk in chunks(ordered, CHUNK):
            for key, stored, digest, names, row_id in conn.execute(
                f"SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                f"WHERE dedupe_key IN ({marks(len(chunk))})",
                chunk,
            ):
                before[key] = itemplan.known(stored, digest, names, row_id)
        p = itemplan.plan(outcome, before, now, digests)
        inserts, updates, relinks = p.inserts, p.updates, p.relinks
        if inserts:
            # `complete` starts as the declared value: _recompute corrects it from the
            # rows, and in the common case (no sub-tabs) has nothing to write.
            conn.executemany(
                "INSERT INTO items (dedupe_key, source_type, source_id, data, content_hash, "
                "first_scraped, last_scraped, declared_complete, parts, row_id, complete) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?8)",
                inserts,
            )
        if updates:
            conn.executemany(ITEM_UPDATE, updates)
        if relinks:
            conn.executemany("UPDATE items SET row_id = ? WHERE dedupe_key = ?", relinks)
        return p.new, p.changed, p.unchanged, keys, {i[0] for i in inserts}


__all__ = ["CHUNK", "SqliteStore", "utc_now"]
