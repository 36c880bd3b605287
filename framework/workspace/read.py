"""Reads of a workspace store, written once for both engines: queue rows, attempts,
items, meta keys, held candidates.

Owns every query that only reads and is the same on SQLite and PostgreSQL (through the
store's :class:`~framework.workspace.sql.Dialect`). Each streams by keyset in bounded
chunks (:data:`CHUNK`) and keeps no cursor open between chunks, so a caller may commit
while it iterates, and memory stays flat on a million rows. It never writes. The reads
whose SQL differs (counts from PostgreSQL's tallies, stored responses through a join or
by key) are the backends' own (:mod:`framework.workspace.sqlite_read`,
:mod:`framework.workspace.postgres_read`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from framework.workspace import holds
from framework.workspace.records import Link, Row, RowStatus, StoredItem
from framework.workspace.sql import (
    CHUNK,
    ITEM_COLS,
    ROW_COLS,
    Conn,
    Dialect,
    chunks,
    to_item,
    to_row,
)


class Reader:
    """The reads both stores share. A backend gives ``dialect`` and ``_conn()``."""

    dialect: Dialect

    def _conn(self) -> Conn:
        raise NotImplementedError

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one statement (shared SQL: ``?`` placeholders)."""
        return list(self._conn().execute(self.dialect.q(sql), params).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn().execute(self.dialect.q(sql), params).fetchone()

    def _page(self, sql: str, params: Sequence[Any], key: str = "id") -> Iterator[Sequence[Any]]:
        """Keyset pagination over ``sql``, whose ``{after}`` slot takes ``AND key > ?``
        and which ends with ``ORDER BY key LIMIT CHUNK`` (the key is its first column).
        No cursor stays open between chunks, so the caller may commit meanwhile."""
        last: Any = None
        while True:
            if last is None:
                chunk = self._fetch(sql.format(after=""), params)
            else:
                chunk = self._fetch(sql.format(after=f"AND {key} > ?"), [*params, last])
            yield from chunk
            if len(chunk) < CHUNK:
                return
            last = chunk[-1][0]

    def _open_rows(self) -> str:
        """``FROM`` the rows that are not ok, through their index: O(open rows)."""
        return f"rows{self.dialect.index('rows_open')} WHERE status <> 'ok'"

    # meta --------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        got = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if got is None else str(got[0])

    def metas(self, prefix: str) -> dict[str, str]:
        # not LIKE: a prefix may hold `_` or `%`; not a range: PostgreSQL's collation
        # need not order by code point (the table is a few keys: a scan)
        got = self._fetch(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
        )
        return {str(k): str(v) for k, v in got}

    # rows --------------------------------------------------------------------
    def resumable(self, max_attempts: int) -> Iterator[Row]:
        sql = (
            f"SELECT {ROW_COLS} FROM {self._open_rows()} "
            "AND (status = 'pending' OR (retryable = 1 AND attempts < ?)) {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, [max_attempts]):
            yield to_row(r)

    def get_row(self, row_id: int) -> Row | None:
        got = self._one(f"SELECT {ROW_COLS} FROM rows WHERE id = ?", (row_id,))
        return None if got is None else to_row(got)

    def max_row_id(self) -> int:
        got = self._one("SELECT coalesce(max(id), 0) FROM rows")
        return int(got[0]) if got else 0

    def iter_rows(self, status: RowStatus | None = None, kind: str | None = None) -> Iterator[Row]:
        where, params = ["1 = 1"], []
        if status is not None:
            where.append("status = ?")
            params.append(RowStatus(status).value)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        sql = (
            f"SELECT {ROW_COLS} FROM rows WHERE {' AND '.join(where)} {{after}} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, params):
            yield to_row(r)

    def iter_links(self, parents: Collection[int]) -> Iterator[Link]:
        # two steps: with no index on parent_id (no other read needs one, and every
        # row the crawl inserts would pay for it), the ids come first, five times
        # cheaper to scan than whole rows (and the pages asked about may be a million,
        # too many to send with every keyset page); then the rows of those found
        sql = (
            "SELECT id, parent_id FROM rows WHERE parent_id IS NOT NULL {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        ids = [r[0] for r in self._page(sql, []) if r[1] in parents]
        for chunk in chunks(ids, CHUNK):
            cond, params = self.dialect.in_("id", chunk)
            for r in self._fetch(
                f"SELECT id, parent_id, kind, method, url, body, status FROM rows "
                f"WHERE {cond} ORDER BY id",
                params,
            ):
                yield Link(r[0], r[1], r[2], r[3], r[4], r[5], RowStatus(r[6]))

    def exhausted(self, max_attempts: int, limit: int | None = None) -> list[Row]:
        """Error rows the next run will not retry (budget spent or not retryable)."""
        sql = (
            f"SELECT {ROW_COLS} FROM {self._open_rows()} "
            "AND status = 'error' AND (retryable = 0 OR attempts >= ?) ORDER BY id"
        )
        params: list[Any] = [max_attempts]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [to_row(r) for r in self._fetch(sql, params)]

    # attempts ----------------------------------------------------------------
    def attempts(self, row_id: int) -> list[Mapping[str, Any]]:
        cur = self._conn().execute(
            self.dialect.q(
                "SELECT n, attempt, time, outcome, http_status, error_kind, error "
                "FROM attempts WHERE row_id = ? ORDER BY n"
            ),
            (row_id,),
        )
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, r, strict=True)) for r in cur]

    def failures(self, row_id: int) -> int:
        got = self._one(
            "SELECT count(*) FROM attempts WHERE row_id = ? AND outcome = 'error'", (row_id,)
        )
        return int(got[0]) if got else 0

    def ok_attempts(self, row_ids: Sequence[int]) -> dict[int, int]:
        """How many ``ok`` attempts each of those rows has in its history (rows without
        one, or missing altogether, are absent)."""
        found: dict[int, int] = {}
        for chunk in chunks(sorted(set(row_ids)), CHUNK):
            cond, params = self.dialect.in_("row_id", chunk)
            for row_id, n in self._fetch(
                f"SELECT row_id, count(*) FROM attempts WHERE outcome = 'ok' AND {cond} "
                "GROUP BY row_id",
                params,
            ):
                found[int(row_id)] = int(n)
        return found

    # items -------------------------------------------------------------------
    def incomplete_keys(self, limit: int) -> list[str]:
        got = self._fetch(
            "SELECT dedupe_key FROM items WHERE complete = 0 ORDER BY dedupe_key LIMIT ?",
            (limit,),
        )
        return [k for (k,) in got]

    def iter_items(
        self,
        complete_only: bool = True,
        after: str | None = None,
        only: Sequence[str] | None = None,
    ) -> Iterator[StoredItem]:
        where = "complete = 1" if complete_only else "1 = 1"
        if only is not None:
            keys = sorted({k for k in only if after is None or k > after})
            for chunk in chunks(keys, CHUNK):
                cond, params = self.dialect.in_("dedupe_key", chunk)
                rows = self._fetch(
                    f"SELECT {ITEM_COLS} FROM items WHERE {where} AND {cond} ORDER BY dedupe_key",
                    params,
                )
                yield from (to_item(r) for r in rows)
            return
        last = after
        while True:
            if last is None:
                rows = self._fetch(
                    f"SELECT {ITEM_COLS} FROM items WHERE {where} ORDER BY dedupe_key LIMIT {CHUNK}"
                )
            else:
                rows = self._fetch(
                    f"SELECT {ITEM_COLS} FROM items WHERE {where} AND dedupe_key > ? "
                    f"ORDER BY dedupe_key LIMIT {CHUNK}",
                    (last,),
                )
            yield from (to_item(r) for r in rows)
            if len(rows) < CHUNK:
                return
            last = rows[-1][0]

    def get_item(self, dedupe_key: str) -> StoredItem | None:
        row = self._one(f"SELECT {ITEM_COLS} FROM items WHERE dedupe_key = ?", (dedupe_key,))
        return None if row is None else to_item(row)

    def items_of_rows(self, row_ids: Collection[int]) -> list[tuple[int, str, str, str | None]]:
        """``(row_id, dedupe_key, data, parts)`` of the items linked to ``row_ids``."""
        out: list[tuple[int, str, str, str | None]] = []
        for chunk in chunks(sorted(row_ids), CHUNK):
            cond, params = self.dialect.in_("row_id", chunk)
            out.extend(
                (int(r), k, d, p)
                for r, k, d, p in self._fetch(
                    f"SELECT row_id, dedupe_key, data, parts FROM items WHERE {cond}", params
                )
            )
        return out

    # held candidates (framework/workspace/holds.py) ----------------------------
    def hold_counts(self, keys: int = 0) -> dict[str, Any]:
        """Held keys by status and by broken rule (:func:`holds.tally`)."""
        return holds.counts(self._conn(), self.dialect, keys)

    def iter_holds(self, status: str | None = None, key: str | None = None) -> Iterator[holds.Hold]:
        return holds.iter_holds(self._conn(), self.dialect, status, key)


__all__ = ["Reader"]
