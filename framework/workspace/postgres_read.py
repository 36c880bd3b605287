"""Reads of the PostgreSQL workspace store: queue rows, attempts, items, counts, stored
responses, held candidates and fill counts.

Owns every query that only reads, with the results of
:class:`framework.workspace.sqlite_read.SqliteReader`'s. Each streams by keyset in
bounded chunks (:data:`CHUNK`) and keeps no cursor open between chunks, so a caller may
commit while it iterates. It never writes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace.holds import Hold
from framework.workspace.postgres_base import PgBase
from framework.workspace.records import Link, Row, RowStatus, StoredItem, StoredResponse
from framework.workspace.sqlite_base import (
    _ITEM_COLS,
    _ROW_COLS,
    CHUNK,
    _chunks,
    _row_cols_of,
    _to_item,
    _to_row,
)

_HOLD_SQL = (
    "SELECT h.dedupe_key, h.status, h.source_type, h.source_id, h.data, h.reasons, "
    "h.row_id, h.first_held, h.last_held, "
    "EXISTS (SELECT 1 FROM items i WHERE i.dedupe_key = h.dedupe_key) "
    "FROM holds h {where} ORDER BY h.dedupe_key"
)


def _to_hold(row: Sequence[Any]) -> Hold:
    return Hold(
        dedupe_key=row[0],
        status=row[1],
        source_type=row[2],
        source_id=row[3],
        data=json.loads(row[4]),
        reasons=json.loads(row[5]),
        row_id=row[6],
        first_held=row[7],
        last_held=row[8],
        has_item=bool(row[9]),
    )


class PgReader(PgBase):
    """The reading half of :class:`framework.workspace.postgres.PostgresStore`."""

    def _page(self, sql: str, params: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """Keyset pagination over ``sql``, whose ``{after}`` slot takes ``AND id > %s``
        and which ends with ``ORDER BY id LIMIT CHUNK`` (id is its first column). No
        cursor stays open between chunks, so the caller may commit meanwhile."""
        last: Any = None
        while True:
            if last is None:
                chunk = self._conn().execute(sql.format(after=""), params).fetchall()
            else:
                chunk = (
                    self._conn().execute(sql.format(after="AND id > %s"), [*params, last])
                ).fetchall()
            yield from chunk
            if len(chunk) < CHUNK:
                return
            last = chunk[-1][0]

    def resumable(self, max_attempts: int) -> Iterator[Row]:
        sql = (
            f"SELECT {_ROW_COLS} FROM rows WHERE status <> 'ok' "
            "AND (status = 'pending' OR (retryable = 1 AND attempts < %s)) {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, [max_attempts]):
            yield _to_row(r)

    def get_row(self, row_id: int) -> Row | None:
        got = self._conn().execute(f"SELECT {_ROW_COLS} FROM rows WHERE id = %s", (row_id,))
        row = got.fetchone()
        return None if row is None else _to_row(row)

    def max_row_id(self) -> int:
        got = self._conn().execute("SELECT coalesce(max(id), 0) FROM rows").fetchone()
        return int(got[0]) if got else 0

    def iter_rows(self, status: RowStatus | None = None, kind: str | None = None) -> Iterator[Row]:
        where, params = ["TRUE"], []
        if status is not None:
            where.append("status = %s")
            params.append(RowStatus(status).value)
        if kind is not None:
            where.append("kind = %s")
            params.append(kind)
        sql = (
            f"SELECT {_ROW_COLS} FROM rows WHERE {' AND '.join(where)} {{after}} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        for r in self._page(sql, params):
            yield _to_row(r)

    def iter_links(self, parents: Collection[int]) -> Iterator[Link]:
        # as SQLite's: ids and parents first (no index on parent_id; the pages asked
        # about may be a million, too many to send with every keyset page), then the
        # rows of those found
        sql = (
            "SELECT id, parent_id FROM rows WHERE parent_id IS NOT NULL {after} "
            f"ORDER BY id LIMIT {CHUNK}"
        )
        ids = [r[0] for r in self._page(sql, []) if r[1] in parents]
        for chunk in _chunks(ids, CHUNK):
            for r in (
                self._conn()
                .execute(
                    "SELECT id, parent_id, kind, method, url, body, status FROM rows "
                    "WHERE id = ANY(%s) ORDER BY id",
                    [chunk],
                )
                .fetchall()
            ):
                yield Link(r[0], r[1], r[2], r[3], r[4], r[5], RowStatus(r[6]))

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

    def exhausted(self, max_attempts: int, limit: int | None = None) -> list[Row]:
        sql = (
            f"SELECT {_ROW_COLS} FROM rows WHERE status = 'error' "
            "AND (retryable = 0 OR attempts >= %s) ORDER BY id"
        )
        params: list[Any] = [max_attempts]
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return [_to_row(r) for r in self._conn().execute(sql, params)]

    def attempts(self, row_id: int) -> list[Mapping[str, Any]]:
        cur = self._conn().execute(
            "SELECT n, attempt, time, outcome, http_status, error_kind, error FROM attempts "
            "WHERE row_id = %s ORDER BY n",
            (row_id,),
        )
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, r, strict=True)) for r in cur]

    def failures(self, row_id: int) -> int:
        got = self._conn().execute(
            "SELECT count(*) FROM attempts WHERE row_id = %s AND outcome = 'error'", (row_id,)
        )
        row = got.fetchone()
        return int(row[0]) if row else 0

    def misbehaving(self, limit: int = 10) -> list[Row]:
        # O(failed attempts): the rows are fetched by primary key (= ANY(ARRAY(...)));
        # a plain join let the planner hash the whole rows table (seconds at 10M rows)
        cur = self._conn().execute(
            "WITH f AS MATERIALIZED (SELECT row_id, count(*) AS n FROM attempts "
            "WHERE outcome = 'error' GROUP BY row_id) "
            f"SELECT {_row_cols_of('r')} "
            "FROM rows r JOIN f ON f.row_id = r.id "
            "WHERE r.id = ANY(ARRAY(SELECT row_id FROM f)) "
            "ORDER BY r.status = 'error' DESC, f.n DESC, r.id LIMIT %s",
            (limit,),
        )
        return [_to_row(r) for r in cur]

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

    def incomplete_keys(self, limit: int) -> list[str]:
        cur = self._conn().execute(
            "SELECT dedupe_key FROM items WHERE complete = 0 ORDER BY dedupe_key LIMIT %s",
            (limit,),
        )
        return [k for (k,) in cur]

    def iter_items(
        self,
        complete_only: bool = True,
        after: str | None = None,
        only: Sequence[str] | None = None,
    ) -> Iterator[StoredItem]:
        where = "complete = 1" if complete_only else "TRUE"
        if only is not None:
            keys = sorted({k for k in only if after is None or k > after})
            for chunk in _chunks(keys, CHUNK):
                rows = (
                    self._conn()
                    .execute(
                        f"SELECT {_ITEM_COLS} FROM items WHERE {where} "
                        "AND dedupe_key = ANY(%s) ORDER BY dedupe_key",
                        (list(chunk),),
                    )
                    .fetchall()
                )
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
                    f"SELECT {_ITEM_COLS} FROM items WHERE {where} AND dedupe_key > %s "
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
            f"SELECT {_ITEM_COLS} FROM items WHERE dedupe_key = %s", (dedupe_key,)
        )
        row = got.fetchone()
        return None if row is None else _to_item(row)

    def ok_attempts(self, row_ids: Sequence[int]) -> dict[int, int]:
        """How many ``ok`` attempts each of those rows has in its history (rows without
        one, or missing altogether, are absent)."""
        found: dict[int, int] = {}
        for chunk in _chunks(sorted(set(row_ids)), CHUNK):
            for row_id, n in self._conn().execute(
                "SELECT row_id, count(*) FROM attempts WHERE outcome = 'ok' "
                "AND row_id = ANY(%s) GROUP BY row_id",
                (list(chunk),),
            ):
                found[int(row_id)] = int(n)
        return found

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
                int(r[0]): _to_row(r)
                for r in self._conn().execute(
                    f"SELECT {_ROW_COLS} FROM rows WHERE id = ANY(%s) AND kind <> ALL(%s)",
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
                int(r[0]): _to_row(r)
                for r in self._conn().execute(
                    f"SELECT {_ROW_COLS} FROM rows WHERE id = ANY(%s)", (chunk,)
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

    def items_of_rows(self, row_ids: Collection[int]) -> list[tuple[int, str, str, str | None]]:
        """As :meth:`SqliteReader.items_of_rows`."""
        wanted = sorted(row_ids)
        out: list[tuple[int, str, str, str | None]] = []
        for start in range(0, len(wanted), CHUNK):
            out.extend(
                (int(r), k, d, p)
                for r, k, d, p in self._conn().execute(
                    "SELECT row_id, dedupe_key, data, parts FROM items WHERE row_id = ANY(%s)",
                    (wanted[start : start + CHUNK],),
                )
            )
        return out

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
        for kind, n in conn.execute(
            "SELECT coalesce(r.kind, '?'), count(*) FROM items i "
            "LEFT JOIN rows r ON r.id = i.row_id GROUP BY 1"
        ):
            out[kind] = {"records": int(n), "fields": {}}
        for kind, key, filled in conn.execute(
            "SELECT coalesce(r.kind, '?'), j.key, sum(CASE jsonb_typeof(j.value) "
            "WHEN 'null' THEN 0 WHEN 'string' THEN (j.value <> '\"\"'::jsonb)::int "
            "WHEN 'array' THEN (jsonb_array_length(j.value) > 0)::int "
            "WHEN 'object' THEN (j.value <> '{}'::jsonb)::int ELSE 1 END) "
            "FROM items i LEFT JOIN rows r ON r.id = i.row_id, "
            "jsonb_each(i.data::jsonb) j GROUP BY 1, 2"
        ):
            out.setdefault(kind, {"records": 0, "fields": {}})["fields"][key] = int(filled)
        return out

    def hold_counts(self) -> dict[str, Any]:
        """Held keys by status, and by broken rule (``field: rule``, the first one)."""
        out: dict[str, Any] = {"total": 0, "by_status": {}, "by_rule": {}}
        conn = self._conn()
        for status, n in conn.execute("SELECT status, count(*) FROM holds GROUP BY status"):
            out["by_status"][status] = int(n)
            out["total"] += int(n)
        for (reasons,) in conn.execute("SELECT reasons FROM holds"):
            for r in json.loads(reasons)[:1]:
                name = f"{r.get('field')}: {r.get('rule')}"
                out["by_rule"][name] = out["by_rule"].get(name, 0) + 1
        return out

    def iter_holds(self, status: str | None = None, key: str | None = None) -> Iterator[Hold]:
        """Every hold (of ``status``; of ``key``), in key order."""
        conds = [(c, v) for c, v in (("h.status = %s", status), ("h.dedupe_key = %s", key)) if v]
        where = ("WHERE " + " AND ".join(c for c, _ in conds)) if conds else ""
        got = self._conn().execute(_HOLD_SQL.format(where=where), tuple(v for _, v in conds))
        for row in got.fetchall():
            yield _to_hold(row)


__all__ = ["PgReader"]
