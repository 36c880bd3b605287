"""Writes of a workspace store, written once for both engines: meta keys, seeding, the
writes of one page's outcome, the completeness recomputation, requeue, refund, reset
and review decisions.

Owns the write logic that is the same on SQLite and PostgreSQL (through the store's
:class:`~framework.workspace.sql.Dialect`). What the engines do differently is left to
hooks the backends give (:mod:`framework.workspace.sqlite`,
:mod:`framework.workspace.postgres`): how a batch of found rows is inserted, how an
attempt and a stored body are written, how items are read and written (PostgreSQL locks
them against other workers), and how a group of outcomes is committed. Every method
runs its transaction through the backend's ``_run`` (PostgreSQL retries a deadlock).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from framework.errors import WorkspaceError
from framework.workspace import carry, holds, itemplan
from framework.workspace.records import (
    LISTING,
    CommitResult,
    Marks,
    NewRow,
    Outcome,
    Row,
    canonical_json,
)
from framework.workspace.sql import (
    CHUNK,
    COMPLETE_EXPR,
    META_UPSERT,
    OUTCOME_UPDATE,
    READ_WITH_META,
    ROWS_RESET_META,
    Conn,
    Dialect,
    chunks,
)
from framework.workspace.store import RequeueFilter

T = TypeVar("T")
# what _write_items returns: items new, keys changed, items unchanged, every key the
# outcome touched, the keys it inserted
ItemsWritten = tuple[int, list[str], int, set[str], set[str]]


class Writer:
    """The writes both stores share; a backend gives the hooks below."""

    dialect: Dialect
    _clock: Callable[[], str]

    if TYPE_CHECKING:

        def _run(self, work: Callable[[Conn], T], pages: int = 1) -> T: ...

    # hooks -------------------------------------------------------------------
    def _insert_rows(
        self, conn: Conn, rows: Sequence[NewRow], parent: int | None, now: str
    ) -> list[Row]:
        """Insert ``rows`` found by the row ``parent``; exactly the new ones come back,
        in id order."""
        raise NotImplementedError

    def _store_response(self, conn: Conn, outcome: Outcome, now: str) -> int:
        """Keep the outcome's response body, if any; its compressed size."""
        raise NotImplementedError

    def _log_attempt(
        self, conn: Conn, outcome: Outcome, marks: Marks, attempt: int, now: str
    ) -> int:
        """Append the attempt to the row's history; return its number there."""
        raise NotImplementedError

    def _write_items(
        self, conn: Conn, outcome: Outcome, now: str, digests: itemplan.Digests | None
    ) -> ItemsWritten:
        """Upsert the outcome's items and merge its parts."""
        raise NotImplementedError

    def _after_bulk(self, n: int) -> None:
        """After a write of ``n`` rows at once (requeue)."""

    # meta --------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        self.set_metas({key: value})

    def set_metas(self, values: Mapping[str, str]) -> None:
        """Set several meta keys in one transaction."""
        pairs = list(values.items())
        self._run(lambda conn: self.dialect.many(conn, META_UPSERT, pairs), 0)

    def delete_metas(self, keys: Sequence[str]) -> None:
        gone = [(k,) for k in keys]
        self._run(lambda conn: self.dialect.many(conn, "DELETE FROM meta WHERE key = ?", gone), 0)

    # rows --------------------------------------------------------------------
    def seed(self, rows: Sequence[NewRow]) -> list[Row]:
        now = self._clock()

        def work(conn: Conn) -> list[Row]:
            inserted = self._insert_rows(conn, rows, None, now)
            keys = {str(r.context["item_key"]) for r in inserted if "item_key" in r.context}
            self._recompute(conn, keys)
            return inserted

        return self._run(work)

    def commit_many(self, outcomes: Sequence[Outcome]) -> list[CommitResult | None]:
        raise NotImplementedError

    def commit(self, outcome: Outcome) -> CommitResult:
        (res,) = self.commit_many([outcome])
        if res is None:
            raise WorkspaceError(f"commit for row {outcome.row_id} refused")
        return res

    def _apply_outcome(
        self, conn: Conn, outcome: Outcome, now: str, digests: itemplan.Digests | None = None
    ) -> CommitResult | None:
        """Every write of one outcome, inside the caller's open transaction: the row's
        status and attempt, its stored response, the rows it found, its items and holds,
        and the completeness of the items it touches. The one place a per-outcome check
        (a lease's fencing token) belongs; None: refused by the fence, nothing written."""
        d = self.dialect
        status, kind, retryable, detail = marks = outcome.marks()
        token = outcome.lease_token
        got = conn.execute(
            d.q(OUTCOME_UPDATE),
            (
                status.value,
                0 if outcome.reparse else 1,  # a re-extraction made no request
                int(retryable),
                kind.value if kind else None,
                outcome.ok,
                detail,
                outcome.http_status,
                now,
                outcome.ok,  # an ok row drops its lease (leases.py)
                outcome.ok,
                outcome.row_id,
                token,  # the fence: refused when the lease was taken over
                token,
            ),
        ).fetchone()
        if got is None:
            if (
                token is not None
                and conn.execute(
                    d.q("SELECT 1 FROM rows WHERE id = ?"), (outcome.row_id,)
                ).fetchone()
            ):
                return None  # fenced: nothing of this outcome is written
            raise WorkspaceError(f"commit for unknown row id {outcome.row_id}")
        attempt, own_key = int(got[0]), got[1]
        if outcome.listing is not None:
            self._keep_listing(conn, outcome, now)
        stored = self._store_response(conn, outcome, now)
        history_n = 2  # a reparsed row has its items from earlier: look them up
        if not outcome.reparse:
            history_n = self._log_attempt(conn, outcome, marks, attempt, now)
        inserted = self._insert_rows(conn, outcome.new_rows, outcome.row_id, now)
        refreshed = self._refresh_carry(conn, outcome, now) if outcome.reparse else []
        new, changed, unchanged, keys, fresh = self._write_items(conn, outcome, now, digests)
        if outcome.holds or outcome.items:  # rule-breaking candidates (holds.py)
            held = [(h, outcome.row_id) for h in outcome.holds]
            holds.settle(conn, d, held, [w.dedupe_key for w in outcome.items], now)
        if own_key is not None:
            keys.add(str(own_key))
        keys.update(str(r.context["item_key"]) for r in inserted if "item_key" in r.context)
        if history_n > 1:
            # Items written by an earlier attempt of this row follow its new status.
            # On a row's first ever attempt none can exist: skip the lookup (hot path).
            keys.update(
                k
                for (k,) in conn.execute(
                    d.q("SELECT dedupe_key FROM items WHERE row_id = ?"), (outcome.row_id,)
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

    def _keep_listing(self, conn: Conn, outcome: Outcome, now: str) -> None:
        """A list page's declared total and count, into its row's context (read back at
        the end of a run, a resumed one too: framework/crawl/completeness.py). Only
        pages of a kind with a ``total`` carry one, so other outcomes pay nothing."""
        d = self.dialect
        got = conn.execute(
            d.q("SELECT context FROM rows WHERE id = ?"), (outcome.row_id,)
        ).fetchone()
        ctx = json.loads(got[0]) if got is not None and got[0] else {}
        ctx[LISTING] = dict(outcome.listing or {})
        conn.execute(
            d.q("UPDATE rows SET context = ? WHERE id = ?"),
            (canonical_json(ctx), outcome.row_id),
        )

    def _refresh_carry(self, conn: Conn, outcome: Outcome, now: str) -> list[int]:
        """A reparsed page's found rows that it found first, given the values it carries
        into them now (:mod:`framework.workspace.carry`); their ids."""
        if not outcome.new_rows:
            return []
        d = self.dialect
        values = carry.wanted(outcome.new_rows)
        existing: list[tuple[int, str, str]] = []
        for chunk in chunks(list(values), CHUNK):
            cond, params = d.in_("fingerprint", chunk)
            existing += conn.execute(
                d.q(f"SELECT id, fingerprint, context FROM rows WHERE parent_id = ? AND {cond}"),
                (outcome.row_id, *params),
            ).fetchall()
        updates = carry.refreshed(existing, values)
        d.many(
            conn,
            "UPDATE rows SET context = ?, updated_at = ? WHERE id = ?",
            [(text, now, row_id) for text, row_id in updates],
        )
        return sorted(row_id for _, row_id in updates)

    def _recompute(self, conn: Conn, keys: Iterable[str], fresh: Iterable[str] = ()) -> list[str]:
        """Recompute ``complete`` of those items from the rows; return the keys that
        became complete. Only items whose value changes are written."""
        d = self.dialect
        completed: list[str] = []
        new_keys = set(fresh)
        for chunk in chunks(sorted(set(keys)), CHUNK):
            cond, params = d.in_("dedupe_key", chunk)
            got = conn.execute(
                d.q(f"SELECT dedupe_key, complete, {COMPLETE_EXPR} FROM items WHERE {cond}"),
                params,
            ).fetchall()
            flips = [(int(now), key) for key, was, now in got if bool(was) != bool(now)]
            if flips:
                d.many(conn, "UPDATE items SET complete = ? WHERE dedupe_key = ?", flips)
            # an item inserted by this commit "becomes" complete when it is complete now
            completed += [key for key, _, now in got if now and (key in new_keys)]
            completed += [key for now, key in flips if now and key not in new_keys]
        return sorted(completed)

    def decide_hold(self, key: str, accept: bool) -> holds.Hold:
        """Accept or reject the ``review_required`` candidate of ``key`` (holds.py)."""
        now = self._clock()
        return self._run(lambda conn: holds.decide(conn, self.dialect, key, accept, now))

    def requeue(self, which: RequeueFilter, max_attempts: int) -> int:
        """Matching rows go back to pending with a fresh attempt budget (``attempts`` = 0;
        the attempt history keeps every past attempt). Without ``errors``/``exhausted``
        the filter matches ok and error rows alike (re-fetch on purpose); items whose
        rows go back to pending are incomplete until those rows are ok again."""
        d = self.dialect
        where = ["status <> 'pending'"]
        params: list[Any] = [self._clock()]
        if which.errors or which.exhausted:
            where.append("status = 'error'")
        if which.exhausted:
            where.append("(attempts >= ? OR retryable = 0)")
            params.append(max_attempts)
        if which.kind is not None:
            where.append("kind = ?")
            params.append(which.kind)
        if which.url_contains:
            where.append(f"{d.instr}(url, ?) > 0")
            params.append(which.url_contains)

        def work(conn: Conn) -> int:
            got = conn.execute(
                d.q(
                    "UPDATE rows SET status = 'pending', attempts = 0, retryable = 1, "
                    f"updated_at = ? WHERE {' AND '.join(where)} RETURNING id, item_key"
                ),
                params,
            ).fetchall()
            ids = [int(r[0]) for r in got]
            keys = {r[1] for r in got if r[1] is not None}
            for chunk in chunks(ids, CHUNK):
                cond, found = d.in_("row_id", chunk)
                keys.update(
                    k
                    for (k,) in conn.execute(
                        d.q(f"SELECT dedupe_key FROM items WHERE {cond}"), found
                    )
                )
            self._recompute(conn, keys)
            return len(ids)

        n = self._run(work)
        self._after_bulk(n)
        return n

    def refund(self, attempts: Mapping[int, int]) -> None:
        if not attempts:
            return
        sql = f"UPDATE rows SET attempts = {self.dialect.greatest}(0, attempts - ?) WHERE id = ?"
        given = [(n, row_id) for row_id, n in sorted(attempts.items())]
        self._run(lambda conn: self.dialect.many(conn, sql, given))

    def reset_rows(self) -> None:
        d = self.dialect

        def work(conn: Conn) -> None:
            # The URL log keeps naming the rows deleted here: the integrity check reads
            # only its lines written after this moment.
            conn.execute(d.q(META_UPSERT), (ROWS_RESET_META, self._clock()))
            conn.execute("DELETE FROM attempts")
            conn.execute("DELETE FROM responses")  # keyed by the rows deleted next
            conn.execute("DELETE FROM rows")
            conn.execute("UPDATE items SET row_id = NULL WHERE row_id IS NOT NULL")
            # what the deleted pages were read with says nothing of the next ones
            conn.execute(
                d.q("DELETE FROM meta WHERE substr(key, 1, ?) = ?"),
                (len(READ_WITH_META), READ_WITH_META),
            )

        self._run(work)


__all__ = ["ItemsWritten", "Writer"]
