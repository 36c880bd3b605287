"""Held items: candidates the workspace keeps aside instead of storing them as items.

Owns the ``holds`` table of ``state.sqlite``: one row per dedupe key whose latest
candidate was held back, with a status:

* ``invalid``: it broke a rule of the spec (a field's ``pattern``, ``enum``,
  ``min``/``max``, ``min_length``/``max_length``, ``expected``, or a record's
  ``required_any``);
* ``review_required``: it broke a change limit (``max_change``, ``frozen``, a vanished
  value) against the accepted version of its key, and waits for ``framework review``.

The candidate's data and every broken rule (rule, field, value; ``was`` for a change)
are kept there; the ``items`` table is not touched, so

* a held candidate is never shipped (ship reads ``items`` only), and
* a key that had a good version keeps it: that last accepted version stays the one
  that ships.

A later crawl whose candidate for the key passes stores it as an item and drops the
hold. Accepting a ``review_required`` hold (:func:`decide`) makes its candidate the item
(a new content hash: it ships); rejecting drops it.
The table is created by the first commit that holds a candidate (workspaces written
before it have none: every read here treats a missing table as no holds), so the
workspace's schema version is unchanged and an older reader ignores it safely.

It runs inside the store's commit transaction (:meth:`SqliteStore.commit`) and never
opens a connection of its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from framework.errors import UsageError
from framework.workspace.itemplan import keep_parts
from framework.workspace.records import HoldWrite, canonical_json, content_hash

__all__ = ["INVALID", "REVIEW", "Hold", "counts", "decide", "iter_holds", "settle"]

INVALID = "invalid"
REVIEW = "review_required"

_DDL = """
CREATE TABLE IF NOT EXISTS holds (
    dedupe_key  TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    source_type TEXT NOT NULL,
    source_id   TEXT NOT NULL,
    data        TEXT NOT NULL,
    reasons     TEXT NOT NULL,
    row_id      INTEGER,
    first_held  TEXT NOT NULL,
    last_held   TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class Hold:
    dedupe_key: str
    status: str
    source_type: str
    source_id: str
    data: dict[str, Any]
    reasons: list[dict[str, Any]]  # {"rule", "field", "value"}
    row_id: int | None
    first_held: str
    last_held: str
    has_item: bool  # an earlier accepted version exists (and is the one that ships)


def _exists(conn: sqlite3.Connection) -> bool:
    return bool(
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'holds'"
        ).fetchone()
    )


def any_held(conn: sqlite3.Connection) -> bool:
    """Whether the workspace holds any candidate at all (no table: none)."""
    return _exists(conn) and conn.execute("SELECT 1 FROM holds LIMIT 1").fetchone() is not None


def settle(
    conn: sqlite3.Connection,
    holds: Sequence[HoldWrite],
    stored_keys: Sequence[str],
    row_id: int,
    now: str,
) -> None:
    """In the commit's transaction: keep ``holds``, and drop the holds of keys this
    commit stored as items (their candidate passes now: the held one is outdated)."""
    if holds:
        conn.execute(_DDL)
        conn.executemany(
            "INSERT INTO holds (dedupe_key, status, source_type, source_id, data, reasons, "
            "row_id, first_held, last_held) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (dedupe_key) DO UPDATE SET status = excluded.status, "
            "source_type = excluded.source_type, source_id = excluded.source_id, "
            "data = excluded.data, reasons = excluded.reasons, row_id = excluded.row_id, "
            "last_held = excluded.last_held",
            [
                (
                    h.dedupe_key,
                    h.status,
                    h.source_type,
                    h.source_id,
                    json.dumps(h.data, ensure_ascii=False, sort_keys=True, default=str),
                    json.dumps(list(h.reasons), ensure_ascii=False, default=str),
                    row_id,
                    now,
                    now,
                )
                for h in holds
            ],
        )
    if stored_keys and (holds or _exists(conn)):
        conn.executemany("DELETE FROM holds WHERE dedupe_key = ?", [(k,) for k in stored_keys])


def counts(conn: sqlite3.Connection) -> dict[str, Any]:
    """Held keys by status, and by broken rule (``field: rule``, the first one of each)."""
    out: dict[str, Any] = {"total": 0, "by_status": {}, "by_rule": {}}
    if not _exists(conn):
        return out
    for status, n in conn.execute("SELECT status, count(*) FROM holds GROUP BY status"):
        out["by_status"][status] = int(n)
        out["total"] += int(n)
    for (reasons,) in conn.execute("SELECT reasons FROM holds"):
        for r in json.loads(reasons)[:1]:
            name = f"{r.get('field')}: {r.get('rule')}"
            out["by_rule"][name] = out["by_rule"].get(name, 0) + 1
    return out


def iter_holds(
    conn: sqlite3.Connection, status: str | None = None, key: str | None = None
) -> Iterator[Hold]:
    """Every hold (of ``status``; of ``key``), in key order, with whether an accepted
    item exists."""
    if not _exists(conn):
        return
    sql = (
        "SELECT h.dedupe_key, h.status, h.source_type, h.source_id, h.data, h.reasons, "
        "h.row_id, h.first_held, h.last_held, "
        "EXISTS (SELECT 1 FROM items i WHERE i.dedupe_key = h.dedupe_key) "
        "FROM holds h {where} ORDER BY h.dedupe_key"
    )
    conds = [(c, v) for c, v in (("h.status = ?", status), ("h.dedupe_key = ?", key)) if v]
    where = ("WHERE " + " AND ".join(c for c, _ in conds)) if conds else ""
    params = tuple(v for _, v in conds)
    for row in conn.execute(sql.format(where=where), params).fetchall():
        yield Hold(
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


def decide(conn: sqlite3.Connection, key: str, accept: bool, now: str) -> Hold:
    """In a write transaction: settle the ``review_required`` hold of ``key``. Accepted,
    its candidate becomes the item (the sub-tab data the item merged is kept, as a
    re-crawl keeps it); rejected, it is dropped and the item stays as it was."""
    found = list(iter_holds(conn, key=key))
    if not found or found[0].status != REVIEW:
        what = f"held as {found[0].status}" if found else "not held"
        raise UsageError(f"{key}: {what}, nothing to review (see `framework review`)")
    hold = found[0]
    if accept:
        row = conn.execute("SELECT data, parts FROM items WHERE dedupe_key = ?", (key,)).fetchone()
        data = dict(hold.data)
        if row is not None:
            keep_parts(data, json.loads(row[0]), json.loads(row[1]) if row[1] else [])
            conn.execute(
                "UPDATE items SET data = ?, content_hash = ?, last_scraped = ? "
                "WHERE dedupe_key = ?",
                (canonical_json(data), content_hash(data), now, key),
            )
    conn.execute("DELETE FROM holds WHERE dedupe_key = ?", (key,))
    return hold
