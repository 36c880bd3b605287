"""Copy a workspace's state between stores: SQLite to PostgreSQL and back.

Owns ``framework workspace copy``'s work: every queue row (its id, fingerprint, status,
attempts and notes), the attempt history, the items, the stored responses, the held
candidates and the meta keys go from a source store to an empty destination store, so
a job started on a laptop continues on a cluster without fetching anything again, and
back. Row ids are kept (the URL and event logs name rows by id), and the destination
hands out new ids above the source's highest ever (ids are never reused, even across a
copy).

What it does not carry: leases and workers (a moved job has no live worker; every row
arrives free), the fencing counter, and the workspace folder's files (JSONL logs, the
ship index): the caller copies those. It takes no lock: the caller holds the source
still (no crawl running) while it copies.

The source is read in ONE snapshot (a read transaction), in bounded keyset chunks; the
destination is written in ONE transaction: a copy that fails leaves the destination as
empty as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace import holds
from framework.workspace.sql import CHUNK, POSTGRES, Dialect

# table, its keyset column, the columns copied (leases are left behind: rows arrive free)
_TABLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "rows",
        "id",
        (
            "id",
            "fingerprint",
            "kind",
            "url",
            "method",
            "body",
            "body_type",
            "parent_id",
            "status",
            "attempts",
            "retryable",
            "last_error_kind",
            "last_error",
            "last_http_status",
            "context",
            "item_key",
            "required",
            "created_at",
            "updated_at",
        ),
    ),
    (
        "attempts",
        "id",
        ("id", "row_id", "n", "attempt", "time", "outcome", "http_status", "error_kind", "error"),
    ),
    (
        "items",
        "id",
        (
            "id",
            "dedupe_key",
            "source_type",
            "source_id",
            "data",
            "content_hash",
            "first_scraped",
            "last_scraped",
            "complete",
            "declared_complete",
            "parts",
            "row_id",
        ),
    ),
    (
        "responses",
        "row_id",
        (
            "row_id",
            "url",
            "final_url",
            "status",
            "content_type",
            "codec",
            "body",
            "size",
            "stored_at",
        ),
    ),
    (
        "holds",
        "dedupe_key",
        (
            "dedupe_key",
            "status",
            "source_type",
            "source_id",
            "data",
            "reasons",
            "row_id",
            "first_held",
            "last_held",
        ),
    ),
)
# meta keys that describe the store itself, not the job: never copied
_OWN_META = frozenset({"schema_version", "lease_token"})
_IDENTITY_TABLES = ("rows", "attempts", "items")


@dataclass(frozen=True)
class CopyCounts:
    rows: int
    attempts: int
    items: int
    responses: int
    holds: int
    meta: int


class _Side:
    """One store seen as tables: the few SQL differences of the two backends."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.d: Dialect = store.dialect  # the SQL layer of the store (sql.py)
        self.pg = self.d is POSTGRES
        self.conn: Any = None

    def sql(self, text: str) -> str:
        return self.d.q(text)

    def query(self, text: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self.conn.execute(self.sql(text), params).fetchall())

    def many(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.d.many(self.conn, text, rows)

    def has(self, table: str) -> bool:
        return self.d.has_table(self.conn, table)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every chunk read inside sees the same state."""
        self.conn = self.store._conn()
        if self.pg:
            with self.conn.transaction():
                self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield
            return
        self.conn.execute("BEGIN")  # deferred: a WAL reader's snapshot, no write lock
        try:
            yield
        finally:
            self.conn.execute("ROLLBACK")

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self.store._tx() as conn:
            self.conn = conn
            yield

    def row_id_high_water(self) -> int:
        """The highest row id ever handed out (rows deleted by a reset included)."""
        if self.pg:
            (name,) = self.query("SELECT pg_get_serial_sequence('rows', 'id')")[0]
            got = self.query(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {name}")
            return int(got[0][0])
        got = self.query("SELECT seq FROM sqlite_sequence WHERE name = 'rows'")
        return int(got[0][0]) if got else 0

    def continue_ids_above(self, high_water: int) -> None:
        """New ids in the destination start above the copied ones and the source's
        high-water mark."""
        if self.pg:
            for table in _IDENTITY_TABLES:
                (top,) = self.query(f"SELECT coalesce(max(id), 0) FROM {table}")[0]
                floor = max(int(top), high_water if table == "rows" else 0)
                if floor > 0:
                    self.query(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), ?)", (floor,)
                    )
            return
        if high_water > self.row_id_high_water():
            self.conn.execute("DELETE FROM sqlite_sequence WHERE name = 'rows'")
            self.conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('rows', ?)", (high_water,)
            )


def copy_state(
    source: Any, destination: Any, *, progress: Callable[[str, int], None] | None = None
) -> CopyCounts:
    """Copy everything of ``source``'s state into ``destination`` (an empty store of
    either backend). ``progress(table, rows so far)`` is called after each chunk."""
    src, dst = _Side(source), _Side(destination)
    counts: dict[str, int] = {}
    with src.snapshot(), dst.writing():
        for table in ("rows", "attempts", "items", "responses", "holds"):
            if dst.has(table) and dst.query(f"SELECT 1 FROM {table} LIMIT 1"):
                raise WorkspaceError(
                    f"the destination already has {table}: copy into an empty workspace"
                )
        for table, key, cols in _TABLES:
            counts[table] = 0
            if not src.has(table):
                continue  # a holds table is created by the first held candidate only
            if not dst.has(table) and table == "holds":
                dst.conn.execute(holds._DDL)
            names = ", ".join(cols)
            insert = f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(cols))})"
            last: Any = None
            while True:
                where = "" if last is None else f"WHERE {key} > ?"
                chunk = src.query(
                    f"SELECT {names} FROM {table} {where} ORDER BY {key} LIMIT {CHUNK}",
                    () if last is None else (last,),
                )
                dst.many(insert, chunk)
                counts[table] += len(chunk)
                if progress is not None:
                    progress(table, counts[table])
                if len(chunk) < CHUNK:
                    break
                last = chunk[-1][cols.index(key)]
        meta = [(k, v) for k, v in src.query("SELECT key, value FROM meta") if k not in _OWN_META]
        dst.many(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            meta,
        )
        dst.continue_ids_above(src.row_id_high_water())
    return CopyCounts(
        rows=counts["rows"],
        attempts=counts["attempts"],
        items=counts["items"],
        responses=counts["responses"],
        holds=counts["holds"],
        meta=len(meta),
    )


__all__ = ["CopyCounts", "copy_state"]
