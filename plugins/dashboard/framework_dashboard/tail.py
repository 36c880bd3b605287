"""The lines a workspace log gained after a cursor: what the live page and /metrics read.

A cursor is an integer that only grows while the log does: in a folder, the byte offset
just after a whole line of the file (``docs/workspace.md``: lines are appended whole,
a last line without its newline is torn or being written and is not read yet); in a
PostgreSQL workspace, the id of the line's row in the ``log_lines`` table. A server-sent
event carries the cursor after its line as its id, so a browser that reconnects with
``Last-Event-ID`` gets exactly the lines after the last one it saw.

The core's :class:`~framework.workspace.JsonlLog` reads a log whole or from its end; a
reader that comes back every second for what is new needs the cursor, so it is kept
here, read-only: this module never writes, locks or repairs a log.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from framework.jsontext import json_object
from framework.redact import redact
from framework.workspace import JsonlLog

Line = tuple[int, dict[str, Any]]  # (the cursor after the line, its record)

READ_MAX = 1 << 20  # bytes read from a file per call: a long backlog comes in pieces
PAGE = 1000  # rows read from the database per call


def after(log: JsonlLog, cursor: int, limit: int = PAGE) -> tuple[list[Line], int]:
    """The whole records after ``cursor`` (masked) and the cursor after the last one.
    A cursor past a file's end (the log was replaced) starts again at 0."""
    if _is_table(log):
        return _rows_after(log, cursor, limit)
    block = _block(log, lambda size: cursor if cursor <= size else 0)
    if block is None:
        return [], 0
    data, cursor = block
    found: list[Line] = []
    pos = cursor
    end = data.rfind(b"\n") + 1  # past it: a torn or growing line, read next time
    for raw in data[:end].split(b"\n")[:-1]:
        pos += len(raw) + 1
        record = _parse(raw)
        if record is not None:
            found.append((pos, record))
            if len(found) >= limit:
                return found, pos
    return found, pos


def recent(log: JsonlLog, n: int) -> tuple[list[Line], int]:
    """The last ``n`` records with their cursors, and the cursor at the log's end (what
    a page shows first, and where its live stream starts: nothing falls between)."""
    if _is_table(log):
        return _rows_recent(log, n)
    block = _block(log, lambda size: max(0, size - READ_MAX))
    if block is None:
        return [], 0
    data, start = block
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    if start > 0 and lines:
        lines.pop(0)  # cut by the block's edge
    found: list[Line] = []
    pos = start + end
    for raw in reversed(lines):
        record = _parse(raw)
        if record is not None:
            found.append((pos, record))
        pos -= len(raw) + 1
        if len(found) >= n:
            break
    found.reverse()
    return found, start + end


def _block(log: JsonlLog, start_at: Callable[[int], int]) -> tuple[bytes, int] | None:
    """The log file's bytes from ``start_at(its size)`` (at most ``READ_MAX`` of them)
    and that offset; None when there is no file. A link is not followed."""
    try:
        fd = os.open(log.path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = start_at(size)
        return os.pread(fd, min(READ_MAX, size - start), start), start
    finally:
        os.close(fd)


def _parse(raw: bytes) -> dict[str, Any] | None:
    value = json_object(raw)
    # written masked; masked again, as every report is, before it leaves for a page
    return None if value is None else redact(value)


# --- a PostgreSQL workspace: the log is the rows of `log_lines` named after it ----------


def _is_table(log: JsonlLog) -> bool:
    return getattr(log, "name", None) in ("events", "urls") and hasattr(log, "store")


def _query(log: JsonlLog, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    store: Any = log.store  # type: ignore[attr-defined]
    # the connection the core's PgLog reads with: one per thread, autocommit, no cursor
    # kept open between calls (framework/workspace/postgres_base.py)
    conn = store._conn()
    if conn.execute("SELECT to_regclass('log_lines')").fetchone()[0] is None:
        return []  # a workspace no crawl wrote a line to yet
    return list(conn.execute(sql, params).fetchall())


def _rows_after(log: JsonlLog, cursor: int, limit: int) -> tuple[list[Line], int]:
    rows = _query(
        log,
        "SELECT id, record FROM log_lines WHERE log = %s AND id > %s ORDER BY id LIMIT %s",
        (log.name, cursor, limit),  # type: ignore[attr-defined]
    )
    found: list[Line] = []
    for rid, text in rows:
        cursor = int(rid)
        record = _parse(text.encode("utf-8"))
        if record is not None:
            found.append((cursor, record))
    return found, cursor


def _rows_recent(log: JsonlLog, n: int) -> tuple[list[Line], int]:
    name = log.name  # type: ignore[attr-defined]
    top = _query(log, "SELECT coalesce(max(id), 0) FROM log_lines WHERE log = %s", (name,))
    end = int(top[0][0]) if top else 0
    rows = _query(
        log,
        "SELECT id, record FROM log_lines WHERE log = %s AND id <= %s ORDER BY id DESC LIMIT %s",
        (name, end, n),
    )
    found = [(int(rid), r) for rid, text in rows if (r := _parse(text.encode("utf-8")))]
    found.reverse()
    return found, end


__all__ = ["Line", "after", "recent"]
