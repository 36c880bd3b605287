"""Reads of the SQLite workspace store whose SQL is SQLite's own: counts, stored
responses (through a join), fill counts.

The reads both engines share are :class:`framework.workspace.read.Reader`'s. Each
streams by keyset in bounded chunks (:data:`CHUNK`) and keeps no cursor open between
chunks, so a caller may commit while it iterates, and memory stays flat on a million
rows. It never writes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace.fill_scan import scanned_fill
from framework.workspace.read import Reader
from framework.workspace.records import Row, RowStatus, StoredResponse
from framework.workspace.sql import CHUNK, N_ROW_COLS, chunks, marks, row_cols_of, to_row
from framework.workspace.sqlite_base import SqliteBase

# a stored response with its row (``w``): what :meth:`SqliteReader._stored` decodes
_STORED_COLS = (
    f"{row_cols_of('w')}, r.url, r.final_url, r.status, r.content_type, r.codec, r.body, r.size"
)


class SqliteReader(SqliteBase, Reader):
    """The reading half of :class:`framework.workspace.sqlite.SqliteStore`."""

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

    def misbehaving(self, limit: int = 10) -> list[Row]:
        cur = self._conn().execute(
            f"SELECT {row_cols_of('r')} "
            "FROM (SELECT row_id, count(*) AS n FROM attempts WHERE outcome = 'error' "
            "GROUP BY row_id) f JOIN rows r ON r.id = f.row_id "
            "ORDER BY r.status = 'error' DESC, f.n DESC, r.id LIMIT ?",
            (limit,),
        )
        return [to_row(r) for r in cur]

    def item_counts(self) -> dict[str, int]:
        got = self._conn().execute(
            "SELECT coalesce(sum(complete = 1), 0), coalesce(sum(complete = 0), 0) FROM items"
        )
        complete, incomplete = got.fetchone()
        return {"complete": complete, "incomplete": incomplete}

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
        skip = f" AND w.kind NOT IN ({marks(len(kinds))})" if kinds else ""
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
        for chunk in chunks(sorted(ids), CHUNK):
            got = self._conn().execute(
                f"SELECT {_STORED_COLS} FROM responses r JOIN rows w ON w.id = r.row_id "
                f"WHERE r.row_id IN ({marks(len(chunk))}) ORDER BY r.row_id",
                chunk,
            )
            # fetched whole: no cursor stays open while the caller commits (the reparse)
            yield from map(self._stored, got.fetchall())

    def _stored(self, r: Sequence[Any]) -> tuple[Row, StoredResponse]:
        """A row of ``SELECT {_STORED_COLS}`` as the row and its stored response."""
        row = to_row(r)
        url, final_url, status, ctype, codec, body, size = r[N_ROW_COLS:]
        if codec != "zlib":
            raise WorkspaceError(f"{self.path}: a stored response in codec {codec!r}")
        return row, StoredResponse(row.id, url, final_url, status, ctype, body, size)

    def responses_of(self, kinds: Collection[str]) -> int:
        """How many stored responses belong to rows of ``kinds``."""
        if not kinds or not self._has_responses():
            return 0
        (n,) = (
            self._conn()
            .execute(
                "SELECT count(*) FROM responses r JOIN rows w ON w.id = r.row_id "
                f"WHERE w.kind IN ({marks(len(kinds))})",
                sorted(kinds),
            )
            .fetchone()
        )
        return int(n)

    def fill_counts(self) -> dict[str, dict[str, Any]]:
        """Per page kind of the item's row: how many stored items, and per field how
        many hold a value (not null, "", [] or {}). Items whose row was reset count
        under kind "?". One pass in SQLite (json_each), nothing decoded in Python."""
        return scanned_fill(
            self._conn(),
            "SELECT coalesce(r.kind, '?'), j.key, sum(CASE WHEN j.type = 'null' THEN 0 "
            "WHEN j.type = 'text' AND j.value = '' THEN 0 "
            "WHEN j.type = 'array' AND json_array_length(j.value) = 0 THEN 0 "
            "WHEN j.type = 'object' AND j.value = '{}' THEN 0 ELSE 1 END) "
            "FROM items i LEFT JOIN rows r ON r.id = i.row_id, json_each(i.data) j "
            "GROUP BY 1, 2",
        )


__all__ = ["SqliteReader"]
