"""Reads of the SQLite workspace store: queue rows, attempts, items, counts.

Owns every query that only reads. Each streams by keyset in bounded chunks
(:data:`CHUNK`) and keeps no cursor open between chunks, so a caller may commit while
it iterates, and memory stays flat on a million rows. It never writes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace import holds
from framework.workspace.records import Link, Row, RowStatus, StoredItem, StoredResponse
from framework.workspace.sqlite_base import (
    _ITEM_COLS,
    _N_ROW_COLS,
    _ROW_COLS,
    CHUNK,
    SqliteBase,
    _chunks,
    _marks,
    _row_cols_of,
    _to_item,
    _to_row,
)

# a stored response with its row (``w``): what :meth:`SqliteReader._stored` decodes
_STORED_COLS = (
    f"{_row_cols_of('w')}, r.url, r.final_url, r.status, r.content_type, r.codec, r.body, r.size"
)


class SqliteReader(SqliteBase):
    """The reading half of :class:`framework.workspace.sqlite.SqliteStore`."""

    def _page(self, sql: str, params: Sequence[Any], key: str) -> Iterator[Sequence[Any]]:
        """Keyset pagination over ``sql``, whose ``{after}`` slot takes ``AND key > ?``
        and which ends with ``ORDER BY key LIMIT CHUNK`` (the key is its first column).
        No cursor stays open between chunks, so the caller may commit meanwhile."""
        last: Any = None
        while True:
            if last is None:
                chunk = self._conn().execute(sql.format(after=""), params).fetchall()
            else:
                chunk = (
                    self._conn().execute(sql.format(after=f"AND {key} > ?"), [*params, last])
                ).fetchall()
            yield from chunk
            if len(chunk) < CHUNK:
                return
            last = chunk[-1][0]

    def resumable(self, max_attempts: int) -> Iterator[Row]:
        sql = (
            f"SELECT {_ROW_COLS} FROM rows INDEXED BY rows_open WHERE status != 'ok' "
            "AND (status = 'pending' OR (retryable = 1 AND attempts < ?)) {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, [max_attempts], "id"):
            yield _to_row(r)

    def get_row(self, row_id: int) -> Row | None:
        got = (
            self._conn().execute(f"SELECT {_ROW_COLS} FROM rows WHERE id = ?", (row_id,))
        ).fetchone()
        return None if got is None else _to_row(got)

    def max_row_id(self) -> int:
        got = self._conn().execute("SELECT COALESCE(MAX(id), 0) FROM rows").fetchone()
        return int(got[0])

    def iter_rows(self, status: RowStatus | None = None, kind: str | None = None) -> Iterator[Row]:
        where, params = ["1"], []
        if status is not None:
            where.append("status = ?")
            params.append(RowStatus(status).value)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        sql = (
            f"SELECT {_ROW_COLS} FROM rows WHERE {' AND '.join(where)} {{after}} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, params, "id"):
            yield _to_row(r)

    def iter_links(self, parents: Collection[int]) -> Iterator[Link]:
        # two steps: with no index on parent_id (no other read needs one, and every
        # row the crawl inserts would pay for it), the ids come first, five times
        # cheaper to scan than whole rows; then the rows of those found
        sql = (
            "SELECT id, parent_id FROM rows WHERE parent_id IS NOT NULL {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        ids = [r[0] for r in self._page(sql, [], "id") if r[1] in parents]
        for chunk in _chunks(ids, CHUNK):
            for r in (
                self._conn()
                .execute(
                    "SELECT id, parent_id, kind, method, url, body, status FROM rows "
                    f"WHERE id IN ({_marks(len(chunk))}) ORDER BY id",
                    chunk,
                )
                .fetchall()
            ):
                yield Link(r[0], r[1], r[2], r[3], r[4], r[5], RowStatus(r[6]))

    def row_counts(self) -> dict[str, dict[RowStatus, int]]:
        counts: dict[str, dict[RowStatus, int]] = {}
        for kind, status, n in self._conn().execute(
            "SELECT kind, status, count(*) FROM rows GROUP BY kind, status ORDER BY kind"
        ):
            counts.setdefault(kind, {})[RowStatus(status)] = n
        return counts

    def counts(self, max_attempts: int) -> dict[str, int]:
        """Queue totals for status: pending, retryable errors (the next run retries them)
        and exhausted errors (it will not), recomputed from the rows."""
        got = (
            self._conn()
            .execute(
                "SELECT coalesce(sum(status = 'pending'), 0), "
                "coalesce(sum(status = 'error' AND retryable = 1 AND attempts < ?), 0), "
                "coalesce(sum(status = 'error' AND (retryable = 0 OR attempts >= ?)), 0) "
                "FROM rows INDEXED BY rows_open WHERE status != 'ok'",
                (max_attempts, max_attempts),
            )
            .fetchone()
        )
        return {"pending": got[0], "retryable": got[1], "exhausted": got[2]}

    def exhausted(self, max_attempts: int, limit: int | None = None) -> list[Row]:
        """Error rows the next run will not retry (budget spent or not retryable)."""
        sql = (
            f"SELECT {_ROW_COLS} FROM rows INDEXED BY rows_open WHERE status != 'ok' "
            "AND status = 'error' AND (retryable = 0 OR attempts >= ?) ORDER BY id"
        )
        params: list[Any] = [max_attempts]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_to_row(r) for r in self._conn().execute(sql, params)]

    def attempts(self, row_id: int) -> list[Mapping[str, Any]]:
        cur = self._conn().execute(
            "SELECT n, attempt, time, outcome, http_status, error_kind, error FROM attempts "
            "WHERE row_id = ? ORDER BY n",
            (row_id,),
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur]

    def failures(self, row_id: int) -> int:
        got = self._conn().execute(
            "SELECT count(*) FROM attempts WHERE row_id = ? AND outcome = 'error'", (row_id,)
        )
        return int(got.fetchone()[0])

    def misbehaving(self, limit: int = 10) -> list[Row]:
        cur = self._conn().execute(
            f"SELECT {_row_cols_of('r')} "
            "FROM (SELECT row_id, count(*) AS n FROM attempts WHERE outcome = 'error' "
            "GROUP BY row_id) f JOIN rows r ON r.id = f.row_id "
            "ORDER BY r.status = 'error' DESC, f.n DESC, r.id LIMIT ?",
            (limit,),
        )
        return [_to_row(r) for r in cur]

    def ok_attempts(self, row_ids: Sequence[int]) -> dict[int, int]:
        """How many ``ok`` attempts each of those rows has in its history (rows without
        one, or missing altogether, are absent)."""
        found: dict[int, int] = {}
        for chunk in _chunks(sorted(set(row_ids)), CHUNK):
            for row_id, n in self._conn().execute(
                f"SELECT row_id, count(*) FROM attempts WHERE outcome = 'ok' AND row_id IN "
                f"({_marks(len(chunk))}) GROUP BY row_id",
                chunk,
            ):
                found[int(row_id)] = int(n)
        return found

    def item_counts(self) -> dict[str, int]:
        got = self._conn().execute(
            "SELECT coalesce(sum(complete = 1), 0), coalesce(sum(complete = 0), 0) FROM items"
        )
        complete, incomplete = got.fetchone()
        return {"complete": complete, "incomplete": incomplete}

    def incomplete_keys(self, limit: int) -> list[str]:
        cur = self._conn().execute(
            "SELECT dedupe_key FROM items WHERE complete = 0 ORDER BY dedupe_key LIMIT ?",
            (limit,),
        )
        return [k for (k,) in cur]

    def iter_items(
        self,
        complete_only: bool = True,
        after: str | None = None,
        only: Sequence[str] | None = None,
    ) -> Iterator[StoredItem]:
        where = "complete = 1" if complete_only else "1"
        if only is not None:
            keys = sorted({k for k in only if after is None or k > after})
            for chunk in _chunks(keys, CHUNK):
                cur = self._conn().execute(
                    f"SELECT {_ITEM_COLS} FROM items WHERE {where} AND dedupe_key IN "
                    f"({_marks(len(chunk))}) ORDER BY dedupe_key",
                    chunk,
                )
                rows = cur.fetchall()
                yield from (_to_item(r) for r in rows)
            return
        last = after
        while True:
            if last is None:
                cur = self._conn().execute(
                    f"SELECT {_ITEM_COLS} FROM items WHERE {where} ORDER BY dedupe_key "
                    f"LIMIT {CHUNK}"
                )
            else:
                cur = self._conn().execute(
                    f"SELECT {_ITEM_COLS} FROM items WHERE {where} AND dedupe_key > ? "
                    f"ORDER BY dedupe_key LIMIT {CHUNK}",
                    (last,),
                )
            rows = cur.fetchall()
            yield from (_to_item(r) for r in rows)
            if len(rows) < CHUNK:
                return
            last = rows[-1][0]

    def get_item(self, dedupe_key: str) -> StoredItem | None:
        got = self._conn().execute(
            f"SELECT {_ITEM_COLS} FROM items WHERE dedupe_key = ?", (dedupe_key,)
        )
        row = got.fetchone()
        return None if row is None else _to_item(row)

    # stored responses (schema 2) ----------------------------------------------
    def _has_responses(self) -> bool:
        # a version 1 workspace opened read-only has no such table yet
        return bool(
            self._conn()
            .execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'responses'")
            .fetchone()
        )

    def responses_size(self) -> tuple[int, int]:
        """(stored responses, their compressed bytes)."""
        if not self._has_responses():
            return 0, 0
        n, size = (
            self._conn().execute("SELECT count(*), coalesce(sum(size), 0) FROM responses")
        ).fetchone()
        return int(n), int(size)

    def iter_responses(
        self, skip_kinds: Collection[str] = ()
    ) -> Iterator[tuple[Row, StoredResponse]]:
        """Every stored response with its row, by row id (a parent page before the
        pages it found), in bounded chunks with no cursor kept open between them; but
        those of rows of the kinds ``skip_kinds`` (neither read nor decoded)."""
        if not self._has_responses():
            return
        kinds = sorted(skip_kinds)
        skip = f" AND w.kind NOT IN ({_marks(len(kinds))})" if kinds else ""
        sql = (
            f"SELECT {_STORED_COLS} FROM responses r JOIN rows w ON w.id = r.row_id "
            f"WHERE r.row_id > ?{skip} ORDER BY r.row_id LIMIT {CHUNK}"
        )
        last = 0
        while True:
            got = self._conn().execute(sql, (last, *kinds)).fetchall()
            yield from map(self._stored, got)
            if len(got) < CHUNK:
                return
            last = got[-1][0]

    def responses_for(self, ids: Collection[int]) -> Iterator[tuple[Row, StoredResponse]]:
        """The stored responses of the rows ``ids`` (those that have one), with their
        rows as they are now, by row id."""
        if not self._has_responses():
            return
        for chunk in _chunks(sorted(ids), CHUNK):
            got = self._conn().execute(
                f"SELECT {_STORED_COLS} FROM responses r JOIN rows w ON w.id = r.row_id "
                f"WHERE r.row_id IN ({_marks(len(chunk))}) ORDER BY r.row_id",
                chunk,
            )
            # fetched whole: no cursor stays open while the caller commits (the reparse)
            yield from map(self._stored, got.fetchall())

    def _stored(self, r: Sequence[Any]) -> tuple[Row, StoredResponse]:
        """A row of ``SELECT {_STORED_COLS}`` as the row and its stored response."""
        row = _to_row(r)
        url, final_url, status, ctype, codec, body, size = r[_N_ROW_COLS:]
        if codec != "zlib":
            raise WorkspaceError(f"{self.path}: a stored response in codec {codec!r}")
        return row, StoredResponse(row.id, url, final_url, status, ctype, body, size)

    def items_of_rows(self, row_ids: Collection[int]) -> list[tuple[int, str, str, str | None]]:
        """``(row_id, dedupe_key, data, parts)`` of the items linked to ``row_ids``."""
        out: list[tuple[int, str, str, str | None]] = []
        for chunk in _chunks(sorted(row_ids), CHUNK):
            out.extend(
                self._conn().execute(
                    "SELECT row_id, dedupe_key, data, parts FROM items "
                    f"WHERE row_id IN ({_marks(len(chunk))})",
                    chunk,
                )
            )
        return out

    def responses_of(self, kinds: Collection[str]) -> int:
        """How many stored responses belong to rows of ``kinds``."""
        if not kinds or not self._has_responses():
            return 0
        (n,) = (
            self._conn()
            .execute(
                "SELECT count(*) FROM responses r JOIN rows w ON w.id = r.row_id "
                f"WHERE w.kind IN ({_marks(len(kinds))})",
                sorted(kinds),
            )
            .fetchone()
        )
        return int(n)

    def fill_counts(self) -> dict[str, dict[str, Any]]:
        """Per page kind of the item's row: how many stored items, and per field how
        many hold a value (not null, "", [] or {}). Items whose row was reset count
        under kind "?". One pass in SQLite (json_each), nothing decoded in Python."""
        out: dict[str, dict[str, Any]] = {}
        conn = self._conn()
        for kind, n in conn.execute(
            "SELECT coalesce(r.kind, '?'), count(*) FROM items i "
            "LEFT JOIN rows r ON r.id = i.row_id GROUP BY 1"
        ):
            out[kind] = {"records": int(n), "fields": {}}
        for kind, key, filled in conn.execute(
            "SELECT coalesce(r.kind, '?'), j.key, sum(CASE WHEN j.type = 'null' THEN 0 "
            "WHEN j.type = 'text' AND j.value = '' THEN 0 "
            "WHEN j.type = 'array' AND json_array_length(j.value) = 0 THEN 0 "
            "WHEN j.type = 'object' AND j.value = '{}' THEN 0 ELSE 1 END) "
            "FROM items i LEFT JOIN rows r ON r.id = i.row_id, json_each(i.data) j "
            "GROUP BY 1, 2"
        ):
            out.setdefault(kind, {"records": 0, "fields": {}})["fields"][key] = int(filled)
        return out

    # held candidates (framework/workspace/holds.py) ------------------------------
    def hold_counts(self) -> dict[str, Any]:
        return holds.counts(self._conn())

    def iter_holds(self, status: str | None = None) -> Iterator[holds.Hold]:
        return holds.iter_holds(self._conn(), status)


__all__ = ["SqliteReader"]
