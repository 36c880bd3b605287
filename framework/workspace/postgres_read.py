"""Reads of the PostgreSQL workspace store whose SQL is PostgreSQL's own: the counts
read from the tallies, stored responses by key, fill counts.

The reads both engines share are :class:`framework.workspace.read.Reader`'s, with the
same results. Each streams by keyset in bounded chunks (:data:`CHUNK`) and keeps no
cursor open between chunks, so a caller may commit while it iterates. It never writes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace.fill_scan import scanned_fill
from framework.workspace.postgres_base import PgBase
from framework.workspace.read import Reader
from framework.workspace.records import Row, RowStatus, StoredResponse
from framework.workspace.sql import CHUNK, POSTGRES, ROW_COLS, Dialect, row_cols_of, to_row


class PgReader(PgBase, Reader):
    """The reading half of :class:`framework.workspace.postgres.PostgresStore`."""

    dialect: Dialect = POSTGRES

    # The counts status shows are read from the tallies the triggers keep (postgres_base
    # _TALLIES: O(kinds), not O(rows)); a database not migrated yet, opened read-only,
    # is counted the slow way.
    def _row_tally(self) -> str:
        if self.schema_version >= 2:
            return "(SELECT kind, status, retryable, attempts, n FROM row_tally) t"
        return "(SELECT kind, status, retryable, attempts, 1 AS n FROM rows) t"

    def row_counts(self) -> dict[str, dict[RowStatus, int]]:
        counts: dict[str, dict[RowStatus, int]] = {}
        for kind, status, n in self._conn().execute(
            f"SELECT kind, status, sum(n) FROM {self._row_tally()} GROUP BY kind, status "
            "HAVING sum(n) <> 0 ORDER BY kind"
        ):
            counts.setdefault(kind, {})[RowStatus(status)] = int(n)
        return counts

    def counts(self, max_attempts: int) -> dict[str, int]:
        got = (
            self._conn()
            .execute(
                "SELECT coalesce(sum(n) FILTER (WHERE status = 'pending'), 0), "
                "coalesce(sum(n) FILTER (WHERE status = 'error' AND retryable = 1 "
                "AND attempts < %s), 0), "
                "coalesce(sum(n) FILTER (WHERE status = 'error' "
                f"AND (retryable = 0 OR attempts >= %s)), 0) FROM {self._row_tally()} "
                "WHERE status <> 'ok'",
                (max_attempts, max_attempts),
            )
            .fetchone()
        )
        assert got is not None
        return {"pending": int(got[0]), "retryable": int(got[1]), "exhausted": int(got[2])}

    def misbehaving(self, limit: int = 10) -> list[Row]:
        # O(failed attempts): the rows are fetched by primary key (= ANY(ARRAY(...)));
        # a plain join let the planner hash the whole rows table (seconds at 10M rows)
        cur = self._conn().execute(
            "WITH f AS MATERIALIZED (SELECT row_id, count(*) AS n FROM attempts "
            "WHERE outcome = 'error' GROUP BY row_id) "
            f"SELECT {row_cols_of('r')} "
            "FROM rows r JOIN f ON f.row_id = r.id "
            "WHERE r.id = ANY(ARRAY(SELECT row_id FROM f)) "
            "ORDER BY r.status = 'error' DESC, f.n DESC, r.id LIMIT %s",
            (limit,),
        )
        return [to_row(r) for r in cur]

    def item_counts(self) -> dict[str, int]:
        table = (
            "(SELECT complete, n FROM item_tally WHERE field IS NULL) t"
            if self.schema_version >= 2
            else "(SELECT complete, 1 AS n FROM items) t"
        )
        got = self._conn().execute(
            "SELECT coalesce(sum(n) FILTER (WHERE complete = 1), 0), "
            f"coalesce(sum(n) FILTER (WHERE complete = 0), 0) FROM {table}"
        )
        row = got.fetchone()
        assert row is not None
        return {"complete": int(row[0]), "incomplete": int(row[1])}

    def quick_check(self) -> str | None:
        """None: PostgreSQL checks its own pages (there is no file of ours to check)."""
        return None

    # stored responses -------------------------------------------------------------
    def responses_size(self) -> tuple[int, int]:
        """(stored responses, their compressed bytes)."""
        got = self._conn().execute("SELECT count(*), coalesce(sum(size), 0) FROM responses")
        row = got.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def iter_responses(
        self, skip_kinds: Collection[str] = ()
    ) -> Iterator[tuple[Row, StoredResponse]]:
        """As :meth:`SqliteReader.iter_responses`, in bounded chunks: a chunk's row ids,
        then its rows not skipped, then their bodies. Three statements, each by primary
        key: a join would let the planner hash the whole rows table."""
        skip = sorted(skip_kinds)
        last = 0
        while True:
            ids = [
                int(r)
                for (r,) in self._conn().execute(
                    f"SELECT row_id FROM responses WHERE row_id > %s ORDER BY row_id LIMIT {CHUNK}",
                    (last,),
                )
            ]
            if not ids:
                return
            rows = {
                int(r[0]): to_row(r)
                for r in self._conn().execute(
                    f"SELECT {ROW_COLS} FROM rows WHERE id = ANY(%s) AND kind <> ALL(%s)",
                    (ids, skip),
                )
            }
            wanted = [i for i in ids if i in rows]
            got = (
                self._conn().execute(
                    "SELECT row_id, url, final_url, status, content_type, codec, body, size "
                    "FROM responses WHERE row_id = ANY(%s) ORDER BY row_id",
                    (wanted,),
                )
                if wanted
                else ()
            )
            for row_id, url, final_url, status, ctype, codec, body, size in got:
                row = rows[int(row_id)]
                if codec != "zlib":
                    raise WorkspaceError(f"{self.where}: a stored response in codec {codec!r}")
                yield row, StoredResponse(row.id, url, final_url, status, ctype, bytes(body), size)
            if len(ids) < CHUNK:
                return
            last = ids[-1]

    def responses_for(self, ids: Collection[int]) -> Iterator[tuple[Row, StoredResponse]]:
        """As :meth:`SqliteReader.responses_for`: the rows, then their bodies, by key."""
        wanted = sorted(ids)
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = {
                int(r[0]): to_row(r)
                for r in self._conn().execute(
                    f"SELECT {ROW_COLS} FROM rows WHERE id = ANY(%s)", (chunk,)
                )
            }
            for row_id, url, final_url, status, ctype, codec, body, size in self._conn().execute(
                "SELECT row_id, url, final_url, status, content_type, codec, body, size "
                "FROM responses WHERE row_id = ANY(%s) ORDER BY row_id",
                (chunk,),
            ):
                row = rows[int(row_id)]
                if codec != "zlib":
                    raise WorkspaceError(f"{self.where}: a stored response in codec {codec!r}")
                yield row, StoredResponse(row.id, url, final_url, status, ctype, bytes(body), size)

    def responses_of(self, kinds: Collection[str]) -> int:
        """How many stored responses belong to rows of ``kinds``."""
        if not kinds:
            return 0
        got = (
            self._conn()
            .execute(
                "SELECT count(*) FROM rows WHERE kind = ANY(%s) "
                "AND EXISTS (SELECT 1 FROM responses r WHERE r.row_id = rows.id)",
                (sorted(kinds),),
            )
            .fetchone()
        )
        assert got is not None  # count(*) has a row
        return int(got[0])

    # fill and holds ---------------------------------------------------------------
    def fill_counts(self) -> dict[str, dict[str, Any]]:
        """As :meth:`SqliteReader.fill_counts`: per page kind of the item's row, the
        stored items and per field how many hold a value (not null, "", [] or {})."""
        out: dict[str, dict[str, Any]] = {}
        conn = self._conn()
        if self.schema_version >= 2:
            for kind, field, n, filled in conn.execute(
                "SELECT kind, field, sum(n), sum(filled) FROM item_tally GROUP BY kind, field "
                "HAVING sum(n) <> 0 ORDER BY kind, field NULLS FIRST"
            ):
                entry = out.setdefault(kind, {"records": 0, "fields": {}})
                if field is None:
                    entry["records"] = int(n)
                else:
                    entry["fields"][field] = int(filled)
            return out
        return scanned_fill(
            conn,
            "SELECT coalesce(r.kind, '?'), j.key, sum(CASE jsonb_typeof(j.value) "
            "WHEN 'null' THEN 0 WHEN 'string' THEN (j.value <> '\"\"'::jsonb)::int "
            "WHEN 'array' THEN (jsonb_array_length(j.value) > 0)::int "
            "WHEN 'object' THEN (j.value <> '{}'::jsonb)::int ELSE 1 END) "
            "FROM items i LEFT JOIN rows r ON r.id = i.row_id, "
            "jsonb_each(i.data::jsonb) j GROUP BY 1, 2",
        )


__all__ = ["PgReader"]
