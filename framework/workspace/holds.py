"""Held items: candidates the workspace keeps aside instead of storing them as items.

Owns the ``holds`` table of a workspace (both engines: SQL through the store's
:class:`~framework.workspace.sql.Dialect`): one row per dedupe key whose latest
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
In a SQLite file the table is created by the first commit that holds a candidate
(workspaces written before it have none: every read here treats a missing table as no
holds), so the workspace's schema version is unchanged and an older reader ignores it
safely; PostgreSQL's schema has it from the start.

It runs inside the store's commit transaction (:meth:`Store.commit`) and never opens a
connection of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from framework.errors import UsageError
from framework.workspace.itemplan import keep_parts
from framework.workspace.records import HoldWrite, canonical_json, content_hash
from framework.workspace.sql import CHUNK, Conn, Dialect, chunks

__all__ = [
    "HELD_KEYS_MAX",
    "INVALID",
    "REVIEW",
    "Hold",
    "counts",
    "decide",
    "iter_holds",
    "settle",
    "tally",
]

INVALID = "invalid"
REVIEW = "review_required"
HELD_KEYS_MAX = 20  # keys `status` lists under each status and rule of the held ones

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


# a held candidate with whether an accepted item exists: what :class:`Hold` decodes
_HOLD_SQL = (
    "SELECT h.dedupe_key, h.status, h.source_type, h.source_id, h.data, h.reasons, "
    "h.row_id, h.first_held, h.last_held, "
    "EXISTS (SELECT 1 FROM items i WHERE i.dedupe_key = h.dedupe_key) "
    "FROM holds h {where} ORDER BY h.dedupe_key"
)


def _exists(conn: Conn, d: Dialect) -> bool:
    # PostgreSQL's schema has the table from the start: no look-up on its commit path
    return not d.creates_holds or d.has_table(conn, "holds")


def any_held(conn: Conn, d: Dialect) -> bool:
    """Whether the workspace holds any candidate at all (no table: none)."""
    return _exists(conn, d) and conn.execute("SELECT 1 FROM holds LIMIT 1").fetchone() is not None


def settle(
    conn: Conn,
    d: Dialect,
    held: Sequence[tuple[HoldWrite, int]],
    stored_keys: Sequence[str],
    now: str,
) -> None:
    """In the commit's transaction: keep the ``held`` candidates (each with the row that
    held it), and drop the holds of keys this commit stored as items (their candidate
    passes now: the held one is outdated)."""
    if held:
        if d.creates_holds:
            conn.execute(_DDL)
        d.many(
            conn,
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
                for h, row_id in held
            ],
        )
    if stored_keys and (held or _exists(conn, d)):
        for chunk in chunks(list(stored_keys), CHUNK):
            cond, params = d.in_("dedupe_key", chunk)
            conn.execute(d.q(f"DELETE FROM holds WHERE {cond}"), params)


# every hold, for :func:`tally`
HOLD_ROWS = "SELECT dedupe_key, status, reasons FROM holds ORDER BY dedupe_key"


def tally(rows: Iterable[Sequence[Any]], keys: int = 0) -> dict[str, Any]:
    """Held keys by status, and by broken rule (``field: rule``, every one each
    breaks), from ``(dedupe_key, status, reasons)`` rows in key order; ``keys`` > 0 adds
    the first ``keys`` keys under each status and rule (``keys``)."""
    out: dict[str, Any] = {"total": 0, "by_status": {}, "by_rule": {}}
    listed: dict[str, dict[str, list[str]]] = {"by_status": {}, "by_rule": {}}
    for key, status, reasons in rows:
        out["total"] += 1
        out["by_status"][status] = out["by_status"].get(status, 0) + 1
        # every rule the key breaks, once each: a key that breaks two counts under both
        named = list(
            dict.fromkeys(f"{r.get('field')}: {r.get('rule')}" for r in json.loads(reasons))
        )
        for name in named:
            out["by_rule"][name] = out["by_rule"].get(name, 0) + 1
        if keys:
            for group, name in [("by_status", status)] + [("by_rule", n) for n in named]:
                some = listed[group].setdefault(name, [])
                if len(some) < keys:
                    some.append(str(key))
    if keys:
        out["keys"] = listed
    return out


def counts(conn: Conn, d: Dialect, keys: int = 0) -> dict[str, Any]:
    """Held keys by status and by broken rule (:func:`tally`); none without a table."""
    if not _exists(conn, d):
        return tally((), keys)
    return tally(conn.execute(HOLD_ROWS).fetchall(), keys)


def iter_holds(
    conn: Conn, d: Dialect, status: str | None = None, key: str | None = None, lock: str = ""
) -> Iterator[Hold]:
    """Every hold (of ``status``; of ``key``), in key order, with whether an accepted
    item exists. ``lock``: a locking clause for the holds read (a decision's)."""
    if not _exists(conn, d):
        return
    conds = [(c, v) for c, v in (("h.status = ?", status), ("h.dedupe_key = ?", key)) if v]
    where = ("WHERE " + " AND ".join(c for c, _ in conds)) if conds else ""
    params = tuple(v for _, v in conds)
    for row in conn.execute(d.q(_HOLD_SQL.format(where=where) + lock), params).fetchall():
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


def decide(conn: Conn, d: Dialect, key: str, accept: bool, now: str) -> Hold:
    """In a write transaction: settle the ``review_required`` hold of ``key``. Accepted,
    its candidate becomes the item (the sub-tab data the item merged is kept, as a
    re-crawl keeps it); rejected, it is dropped and the item stays as it was. The hold
    and the item are locked where the engine locks rows (another reviewer waits)."""
    found = list(iter_holds(conn, d, key=key, lock=d.lock_rows and f"{d.lock_rows} OF h"))
    if not found or found[0].status != REVIEW:
        what = f"held as {found[0].status}" if found else "not held"
        raise UsageError(f"{key}: {what}, nothing to review (see `framework review`)")
    hold = found[0]
    if accept:
        row = conn.execute(
            d.q(f"SELECT data, parts FROM items WHERE dedupe_key = ?{d.lock_rows}"), (key,)
        ).fetchone()
        data = dict(hold.data)
        if row is not None:
            keep_parts(data, json.loads(row[0]), json.loads(row[1]) if row[1] else [])
            conn.execute(
                d.q(
                    "UPDATE items SET data = ?, content_hash = ?, last_scraped = ? "
                    "WHERE dedupe_key = ?"
                ),
                (canonical_json(data), content_hash(data), now, key),
            )
    conn.execute(d.q("DELETE FROM holds WHERE dedupe_key = ?"), (key,))
    return hold
