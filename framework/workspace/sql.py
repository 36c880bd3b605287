"""The SQL layer of the workspace stores: what both engines share, written once.

SQL here and in the shared store code (:mod:`framework.workspace.read`,
:mod:`framework.workspace.write`, :mod:`framework.workspace.holds`,
:mod:`framework.workspace.leases`) is written with ``?`` placeholders; a
:class:`Dialect` translates it for its engine (PostgreSQL's psycopg takes ``%s``), once
per statement text. The few places where the engines truly differ are dialect
attributes (an index hint, a function's name, how a value list is bound) or methods of
the backend modules (batched group writes, ``SKIP LOCKED`` claims, tallies); nothing
here opens a connection.

It also owns the shape of the tables both share: the column lists, the decoding of a
row and an item, and the completeness rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from framework.workspace.records import (
    ErrorKind,
    NewRow,
    Row,
    RowStatus,
    StoredItem,
    canonical_json,
)

CHUNK = 500  # rows per page of a streaming read, and per multi-row INSERT
ROWS_RESET_META = "rows_reset_at"  # meta: when `--fresh` last deleted the rows
# meta keys `read_with:<kind>:<digest>` (Workspace.read_with): gone with the rows
READ_WITH_META = "read_with:"

# An open connection of either engine (sqlite3.Connection, psycopg.Connection): both
# have execute() returning a cursor that fetches and iterates.
Conn = Any

ROW_COLS = (
    "id, kind, url, method, body, body_type, parent_id, status, attempts, retryable, "
    "last_error_kind, last_error, last_http_status, context, created_at, updated_at"
)
N_ROW_COLS = ROW_COLS.count(",") + 1
# The last one is the page URL of the item's row, looked up by primary key (read from
# `FROM items` queries only): the item's metadata, not a column of `items`.
ITEM_COLS = (
    "dedupe_key, source_type, source_id, data, content_hash, first_scraped, "
    "last_scraped, complete, row_id, "
    "(SELECT page.url FROM rows page WHERE page.id = items.row_id)"
)
INSERT_COLS = (
    "fingerprint, kind, url, method, body, body_type, parent_id, status, context, "
    "item_key, required, created_at, updated_at"
)
N_INSERT = INSERT_COLS.count(",") + 1

# The completeness rule, one SQL expression over an `items` row (see docs/workspace.md):
# its own row is ok, every row that names it as `item_key` with `required` is ok, and an
# item written as not complete waits until at least one such row exists.
COMPLETE_EXPR = """(
    (items.row_id IS NULL
     OR EXISTS (SELECT 1 FROM rows r WHERE r.id = items.row_id AND r.status = 'ok'))
    AND NOT EXISTS (SELECT 1 FROM rows r WHERE r.item_key = items.dedupe_key
                    AND r.required = 1 AND r.status <> 'ok')
    AND (items.declared_complete = 1
         OR EXISTS (SELECT 1 FROM rows r WHERE r.item_key = items.dedupe_key
                    AND r.required = 1))
)"""

# The fence (docs/scaling.md), one fragment of the commit's row UPDATE: its WHERE gets
# FENCE_WHERE (params: token, token), its SET gets FENCE_SET (params: ok, ok). A None
# token matches any row: a single-process crawl pays nothing for it. The CAST gives
# PostgreSQL the parameter's type (a bare NULL has none); SQLite ignores it.
FENCE_WHERE = "(CAST(? AS BIGINT) IS NULL OR lease_token = CAST(? AS BIGINT))"
FENCE_SET = (
    "lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END, "
    "lease_expires_at = CASE WHEN ? THEN NULL ELSE lease_expires_at END"
)
# a row's outcome (params: status, spent, retryable, kind, ok, detail, http, now, ok,
# ok, id, token, token); an ok row drops its lease (leases.py)
OUTCOME_UPDATE = (
    "UPDATE rows SET status = ?, attempts = attempts + ?, retryable = ?, "
    "last_error_kind = coalesce(?, last_error_kind), "
    "last_error = CASE WHEN ? THEN last_error ELSE ? END, "
    f"last_http_status = ?, updated_at = ?, {FENCE_SET} WHERE id = ? "
    f"AND {FENCE_WHERE} RETURNING attempts, item_key"
)
# an item's new content (itemplan.ItemPlan.updates); None keeps the stored value
ITEM_UPDATE = (
    "UPDATE items SET data = ?, content_hash = ?, last_scraped = ?, parts = ?, "
    "row_id = coalesce(?, row_id), declared_complete = coalesce(?, declared_complete), "
    "source_type = coalesce(?, source_type), source_id = coalesce(?, source_id) "
    "WHERE dedupe_key = ?"
)
META_UPSERT = (
    "INSERT INTO meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """``sql`` with psycopg's placeholders: each ``?`` outside a quoted literal becomes
    ``%s`` and each ``%`` there ``%%`` (a ``'?'`` in the text stays a question mark)."""
    parts = sql.split("'")
    for i in range(0, len(parts), 2):  # even parts lie outside quotes ('' included)
        parts[i] = parts[i].replace("%", "%%").replace("?", "%s")
    return "'".join(parts)


class Dialect:
    """How one engine runs the shared SQL. The SQLite one is the identity: its SQL is
    the shared text as written (the commit path pays nothing for the layer)."""

    name = "sqlite"
    instr = "instr"  # position of a substring (string, substring), 0 when absent
    greatest = "max"  # the larger of two values
    lock_rows = ""  # locks the rows a SELECT reads (a write transaction locks the file)
    creates_holds = True  # the holds table is made by the first hold (holds.py)
    # a file opened read-only may predate a table (the leases', schema 3): look first
    old_files = True

    def q(self, sql: str) -> str:
        """``sql`` (``?`` placeholders) in this engine's placeholder style."""
        return sql

    def index(self, name: str) -> str:
        """A hint to read a table through the index ``name``, where the engine takes
        one (SQLite's planner can miss a partial index; PostgreSQL's finds it)."""
        return f" INDEXED BY {name}"

    def epoch(self, conn: Conn) -> float:
        """Now, in epoch seconds, by the clock leases compare: on one host, its own."""
        return time.time()

    def epoch_sql(self) -> tuple[str, tuple[Any, ...]]:
        """:meth:`epoch` as an SQL term and its parameters (no round trip of its own)."""
        return "?", (time.time(),)

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the condition and its parameters."""
        return f"{column} IN ({marks(len(values))})", list(values)

    def many(self, conn: Conn, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement per parameter set."""
        conn.executemany(sql, params)

    def has_table(self, conn: Conn, name: str) -> bool:
        got = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return bool(got)


class PgDialect(Dialect):
    name = "postgresql"
    instr = "strpos"
    greatest = "greatest"
    lock_rows = " FOR UPDATE"  # another worker's transaction on them waits
    creates_holds = False  # in the schema from the start
    old_files = False

    def q(self, sql: str) -> str:
        return to_pyformat(sql)

    def index(self, name: str) -> str:
        return ""

    def epoch(self, conn: Conn) -> float:
        # the database's: workers on machines whose clocks disagree still agree
        got = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
        return float(got[0])

    def epoch_sql(self) -> tuple[str, tuple[Any, ...]]:
        return "extract(epoch FROM now())", ()

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        # one array parameter: one statement text whatever the number of values
        return f"{column} = ANY(?)", [list(values)]

    def many(self, conn: Conn, sql: str, params: Sequence[Sequence[Any]]) -> None:
        if params:
            with conn.cursor() as cur:  # psycopg pipelines them: one round trip
                cur.executemany(to_pyformat(sql), params)

    def has_table(self, conn: Conn, name: str) -> bool:
        got = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(got and got[0])


SQLITE = Dialect()
POSTGRES = PgDialect()


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def marks(n: int) -> str:
    return ",".join("?" * n)


def row_cols_of(table: str) -> str:
    """``ROW_COLS`` qualified by a table name or alias, for a join."""
    return ", ".join(f"{table}.{c.strip()}" for c in ROW_COLS.split(","))


def to_row(r: Sequence[Any]) -> Row:
    return Row(
        id=r[0],
        kind=r[1],
        url=r[2],
        method=r[3],
        body=r[4],
        body_type=r[5],
        parent_id=r[6],
        status=RowStatus(r[7]),
        attempts=r[8],
        retryable=bool(r[9]),
        last_error_kind=ErrorKind(r[10]) if r[10] else None,
        last_error=r[11],
        last_http_status=r[12],
        context=json.loads(r[13]),
        created_at=r[14],
        updated_at=r[15],
    )


def to_item(r: Sequence[Any]) -> StoredItem:
    return StoredItem(
        dedupe_key=r[0],
        source_type=r[1],
        source_id=r[2],
        data=json.loads(r[3]),
        content_hash=r[4],
        first_scraped=r[5],
        last_scraped=r[6],
        complete=bool(r[7]),
        row_id=r[8],
        url=r[9],
    )


# A row to insert, prepared: its INSERT_COLS values, and what its Row needs beyond them.
Prepared = tuple[tuple[Any, ...], NewRow, str, "int | None"]


def prepare_rows(found: Sequence[tuple[int | None, NewRow]], now: str) -> list[Prepared]:
    """``(parent row id, row)`` pairs as INSERT_COLS values, each with what
    :func:`pending_rows` builds its Row from."""
    out: list[Prepared] = []
    for parent, new in found:
        ctx = dict(new.context)
        item_key = ctx.get("item_key")
        ctx_text = canonical_json(ctx) if ctx else "{}"
        parent_id = new.parent_id if new.parent_id is not None else parent
        values = (
            new.fingerprint,
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
        out.append((values, new, ctx_text, parent_id))
    return out


def pending_rows(
    got: Collection[tuple[Any, str]], by_fp: dict[str, Prepared], now: str
) -> list[tuple[Prepared, Row]]:
    """The rows an INSERT .. RETURNING id, fingerprint inserted, each with its prepared
    form. Built from what was inserted rather than read back: the same values, without
    a second decode of every column."""
    out: list[tuple[Prepared, Row]] = []
    for row_id, fp in got:
        prepared = by_fp[fp]
        _, new, ctx_text, parent_id = prepared
        row = Row(
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
        out.append((prepared, row))
    return out


__all__ = [
    "CHUNK",
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "PgDialect",
    "to_pyformat",
    "utc_now",
]
