"""The embedded :class:`~framework.workspace.store.Store`: one SQLite file in WAL mode.

Owns the writes to ``state.sqlite``: seed, the one-transaction ``commit`` of a page's
outcome (``commit_many``: of a group of pages' outcomes), item upserts and part
merges, the completeness recomputation, requeue and reset. Connections, schema and
transactions are :mod:`framework.workspace.sqlite_base`'s; the reads are
:mod:`framework.workspace.sqlite_read`'s. It never writes the JSONL logs, never takes
workspace locks and knows nothing of Scrapy. The on-disk format is the contract
documented in ``docs/workspace.md``.

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

import json
import sqlite3
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace import carry, holds, itemplan
from framework.workspace.leases import FENCE_SET, FENCE_WHERE
from framework.workspace.records import (
    CommitResult,
    ErrorKind,
    NewRow,
    Outcome,
    ResponseWrite,
    Row,
    RowStatus,
    canonical_json,
)
from framework.workspace.sqlite_base import (
    _COMPLETE_EXPR,
    _INSERT_COLS,
    _N_INSERT,
    CHECKPOINT_EVERY,
    CHUNK,
    READ_WITH_META,
    ROWS_RESET_META,
    _chunks,
    _marks,
    utc_now,
)
from framework.workspace.sqlite_read import SqliteReader
from framework.workspace.store import RequeueFilter

# an item's new content (itemplan.ItemPlan.updates); None keeps the stored value
_ITEM_UPDATE = (
    "UPDATE items SET data = ?, content_hash = ?, last_scraped = ?, parts = ?, "
    "row_id = coalesce(?, row_id), declared_complete = coalesce(?, declared_complete), "
    "source_type = coalesce(?, source_type), source_id = coalesce(?, source_id) "
    "WHERE dedupe_key = ?"
)


class SqliteStore(SqliteReader):
    """The Store contract on one SQLite file. Build with ``SqliteStore.open(path)``."""

    def _insert_rows(
        self, conn: sqlite3.Connection, rows: Sequence[NewRow], parent: int | None, now: str
    ) -> list[Row]:
        """Multi-row INSERT .. ON CONFLICT DO NOTHING RETURNING: one statement per chunk,
        and exactly the rows that did not exist come back (duplicates inside the batch
        included)."""
        inserted: list[Row] = []
        for chunk in _chunks(rows, CHUNK):
            params: list[Any] = []
            by_fp: dict[str, tuple[NewRow, str, int | None]] = {}
            for new in chunk:
                ctx = dict(new.context)
                item_key = ctx.get("item_key")
                fp = new.fingerprint
                ctx_text = canonical_json(ctx) if ctx else "{}"
                parent_id = new.parent_id if new.parent_id is not None else parent
                by_fp.setdefault(fp, (new, ctx_text, parent_id))
                params += [
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
                ]
            values = ",".join(f"({_marks(_N_INSERT)})" for _ in chunk)
            cur = conn.execute(
                f"INSERT INTO rows ({_INSERT_COLS}) VALUES {values} "
                "ON CONFLICT (fingerprint) DO NOTHING RETURNING id, fingerprint",
                params,
            )
            # Rows are built from what was inserted rather than read back: the same
            # values, without a second decode of every column.
            for row_id, fp in cur.fetchall():
                new, ctx_text, parent_id = by_fp[fp]
                inserted.append(
                    Row(
                        id=row_id,
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
        inserted.sort(key=lambda row: row.id)
        return inserted

    def seed(self, rows: Sequence[NewRow]) -> list[Row]:
        now = self._clock()
        with self._tx() as conn:
            inserted = self._insert_rows(conn, rows, None, now)
            keys = {str(r.context["item_key"]) for r in inserted if "item_key" in r.context}
            self._recompute(conn, keys)
        return inserted

    def commit(self, outcome: Outcome) -> CommitResult:
        (res,) = self.commit_many([outcome])
        if res is None:
            raise WorkspaceError(f"commit for row {outcome.row_id} refused")
        return res

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
        ]
        if not maybe or holds.any_held(conn):  # a stored item may settle a hold: the long way
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
        for chunk in _chunks(ids, CHUNK):
            marks = _marks(len(chunk))
            for row_id, *state in conn.execute(
                "SELECT id, status, attempts, retryable, last_http_status, lease_owner, "
                f"item_key FROM rows WHERE id IN ({marks})",
                chunk,
            ):
                rows[row_id] = tuple(state)
            for key, data, digest, names, row_id in conn.execute(
                "SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                f"WHERE row_id IN ({marks})",
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
            conn.executemany(_ITEM_UPDATE, [u for _, plan in plans.values() for u in plan.updates])
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

    def _apply_outcome(
        self,
        conn: sqlite3.Connection,
        outcome: Outcome,
        now: str,
        digests: itemplan.Digests | None = None,
    ) -> CommitResult | None:
        """Every write of one outcome, inside the caller's open transaction: the row's
        status and attempt, its stored response, the rows it found, its items and holds,
        and the completeness of the items it touches. The one place a per-outcome check
        (a lease's fencing token) belongs; None would mean "refused, nothing written"."""
        status, kind, retryable, detail = outcome.marks()
        token = outcome.lease_token
        got = conn.execute(
            "UPDATE rows SET status = ?, attempts = attempts + ?, retryable = ?, "
            "last_error_kind = coalesce(?, last_error_kind), "
            "last_error = CASE WHEN ? THEN last_error ELSE ? END, "
            f"last_http_status = ?, updated_at = ?, {FENCE_SET} WHERE id = ? "
            f"AND {FENCE_WHERE} RETURNING attempts, item_key",
            (
                status.value,
                0 if outcome.reparse else 1,  # a re-extraction made no request
                int(retryable),
                kind.value if kind else None,
                int(outcome.ok),
                detail,
                outcome.http_status,
                now,
                int(outcome.ok),  # an ok row drops its lease (leases.py)
                int(outcome.ok),
                outcome.row_id,
                token,  # the fence: refused when the lease was taken over
                token,
            ),
        ).fetchone()
        if got is None:
            if (
                token is not None
                and conn.execute("SELECT 1 FROM rows WHERE id = ?", (outcome.row_id,)).fetchone()
            ):
                return None  # fenced: nothing of this outcome is written
            raise WorkspaceError(f"commit for unknown row id {outcome.row_id}")
        attempt, own_key = int(got[0]), got[1]
        stored = 0
        if outcome.response is not None:
            stored = self._write_response(conn, outcome.row_id, outcome.response, now)
        history_n = 2  # a reparsed row has its items from earlier: look them up
        if not outcome.reparse:
            history_n = self._write_attempt(conn, outcome, status, attempt, kind, detail, now)
        inserted = self._insert_rows(conn, outcome.new_rows, outcome.row_id, now)
        refreshed = self._refresh_carry(conn, outcome, now) if outcome.reparse else []
        new, changed, unchanged, keys, fresh = self._write_items(conn, outcome, now, digests)
        if outcome.holds or outcome.items:  # rule-breaking candidates (holds.py)
            holds.settle(
                conn, outcome.holds, [w.dedupe_key for w in outcome.items], outcome.row_id, now
            )
        if own_key is not None:
            keys.add(str(own_key))
        keys.update(str(r.context["item_key"]) for r in inserted if "item_key" in r.context)
        if history_n > 1:
            # Items written by an earlier attempt of this row follow its new status.
            # On a row's first ever attempt none can exist: skip the lookup (hot path).
            keys.update(
                k
                for (k,) in conn.execute(
                    "SELECT dedupe_key FROM items WHERE row_id = ?", (outcome.row_id,)
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
            response_bytes=stored,
            refreshed=refreshed,
        )

    def _refresh_carry(self, conn: sqlite3.Connection, outcome: Outcome, now: str) -> list[int]:
        """A reparsed page's found rows that it found first, given the values it carries
        into them now (:mod:`framework.workspace.carry`); their ids."""
        if not outcome.new_rows:
            return []
        values = carry.wanted(outcome.new_rows)
        existing: list[tuple[int, str, str]] = []
        for chunk in _chunks(list(values), CHUNK):
            existing += conn.execute(
                "SELECT id, fingerprint, context FROM rows WHERE parent_id = ? "
                f"AND fingerprint IN ({_marks(len(chunk))})",
                (outcome.row_id, *chunk),
            ).fetchall()
        updates = carry.refreshed(existing, values)
        conn.executemany(
            "UPDATE rows SET context = ?, updated_at = ? WHERE id = ?",
            [(text, now, row_id) for text, row_id in updates],
        )
        return sorted(row_id for _, row_id in updates)

    def _write_attempt(
        self,
        conn: sqlite3.Connection,
        outcome: Outcome,
        status: RowStatus,
        attempt: int,
        kind: ErrorKind | None,
        detail: str | None,
        now: str,
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
                status.value,
                outcome.http_status,
                kind.value if kind else None,
                detail,
            ),
        ).fetchone()
        return int(history_n)

    def _write_response(
        self, conn: sqlite3.Connection, row_id: int, r: ResponseWrite, now: str
    ) -> int:
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
            (row_id, r.url, r.final_url, r.status, r.content_type, packed, len(packed), now),
        )
        return len(packed)

    def _write_items(
        self,
        conn: sqlite3.Connection,
        outcome: Outcome,
        now: str,
        digests: itemplan.Digests | None = None,
    ) -> tuple[int, list[str], int, set[str], set[str]]:
        """Upsert items and merge parts, comparing content hashes so identical content
        touches nothing. One SELECT for the known state of every key, then executemany."""
        keys = {w.dedupe_key for w in outcome.items} | {p.dedupe_key for p in outcome.parts}
        if not keys:
            return 0, [], 0, set(), set()
        before: dict[str, dict[str, Any]] = {}
        ordered = sorted(keys)
        for chunk in _chunks(ordered, CHUNK):
            for key, stored, digest, names, row_id in conn.execute(
                f"SELECT dedupe_key, data, content_hash, parts, row_id FROM items "
                f"WHERE dedupe_key IN ({_marks(len(chunk))})",
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
            conn.executemany(_ITEM_UPDATE, updates)
        if relinks:
            conn.executemany("UPDATE items SET row_id = ? WHERE dedupe_key = ?", relinks)
        return p.new, p.changed, p.unchanged, keys, {i[0] for i in inserts}

    def _recompute(
        self, conn: sqlite3.Connection, keys: Iterable[str], fresh: Iterable[str] = ()
    ) -> list[str]:
        """Recompute ``complete`` of those items from the rows; return the keys that
        became complete. Only rows whose value changes are written."""
        completed: list[str] = []
        new_keys = set(fresh)
        for chunk in _chunks(sorted(set(keys)), CHUNK):
            got = conn.execute(
                f"SELECT dedupe_key, complete, {_COMPLETE_EXPR} FROM items "
                f"WHERE dedupe_key IN ({_marks(len(chunk))})",
                chunk,
            ).fetchall()
            flips = [(int(now), key) for key, was, now in got if bool(was) != bool(now)]
            if flips:
                conn.executemany("UPDATE items SET complete = ? WHERE dedupe_key = ?", flips)
            # an item inserted by this commit "becomes" complete when it is complete now
            completed += [key for key, _, now in got if now and (key in new_keys)]
            completed += [key for now, key in flips if now and key not in new_keys]
        return sorted(completed)

    def decide_hold(self, key: str, accept: bool) -> holds.Hold:
        """Accept or reject the ``review_required`` candidate of ``key`` (holds.py)."""
        with self._tx() as conn:
            return holds.decide(conn, key, accept, self._clock())

    def requeue(self, which: RequeueFilter, max_attempts: int) -> int:
        """Matching rows go back to pending with a fresh attempt budget (``attempts`` = 0;
        the attempt history keeps every past attempt). Without ``errors``/``exhausted``
        the filter matches ok and error rows alike (re-fetch on purpose); items whose
        rows go back to pending are incomplete until those rows are ok again."""
        where = ["status != 'pending'"]
        params: list[Any] = []
        if which.errors or which.exhausted:
            where.append("status = 'error'")
        if which.exhausted:
            where.append("(attempts >= ? OR retryable = 0)")
            params.append(max_attempts)
        if which.kind is not None:
            where.append("kind = ?")
            params.append(which.kind)
        if which.url_contains:
            where.append("instr(url, ?) > 0")
            params.append(which.url_contains)
        with self._tx() as conn:
            got = conn.execute(
                "UPDATE rows SET status = 'pending', attempts = 0, retryable = 1, "
                f"updated_at = ? WHERE {' AND '.join(where)} RETURNING id, item_key",
                [self._clock(), *params],
            ).fetchall()
            ids = [r[0] for r in got]
            keys = {r[1] for r in got if r[1] is not None}
            for chunk in _chunks(ids, CHUNK):
                keys.update(
                    k
                    for (k,) in conn.execute(
                        f"SELECT dedupe_key FROM items WHERE row_id IN ({_marks(len(chunk))})",
                        chunk,
                    )
                )
            self._recompute(conn, keys)
        return len(ids)

    def refund(self, attempts: Mapping[int, int]) -> None:
        with self._tx() as conn:
            conn.executemany(
                "UPDATE rows SET attempts = max(0, attempts - ?) WHERE id = ?",
                [(n, row_id) for row_id, n in attempts.items()],
            )

    def reset_rows(self) -> None:
        with self._tx() as conn:
            # The URL log keeps naming the rows deleted here: the integrity check reads
            # only its lines written after this moment.
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (ROWS_RESET_META, self._clock()),
            )
            conn.execute("DELETE FROM attempts")
            conn.execute("DELETE FROM responses")  # keyed by the rows deleted next
            conn.execute("DELETE FROM rows")
            conn.execute("UPDATE items SET row_id = NULL WHERE row_id IS NOT NULL")
            # what the deleted pages were read with says nothing of the next ones
            conn.execute(
                "DELETE FROM meta WHERE substr(key, 1, ?) = ?",
                (len(READ_WITH_META), READ_WITH_META),
            )


__all__ = ["CHUNK", "SqliteStore", "utc_now"]
