"""The event outbox: every change at the door, appended in the transaction that made it.

Types: ``accepted`` and ``updated`` (a write stored a new version), ``claimed``,
``done``, ``failed`` and ``reaped`` (the handoff). A duplicate changes nothing and
appends nothing. ``seq`` is strictly increasing and has no holes.

Why a counter row and not a database sequence: PostgreSQL hands out sequence values at
``nextval`` time, so two concurrent transactions can commit 102 before 101; a reader
that saw 102 and moved its cursor past 101 would never see 101. Here every appending
transaction increments the ONE row of ``event_counter`` as its last statement; the row
lock is held until that transaction commits, so the next appender gets its numbers only
after the previous one is visible: sequence order is commit order, on both databases
(SQLite has one writer at a time anyway). Taking the counter last keeps the lock short
and keeps the lock order (item rows, then the counter) the same in every transaction.

This module owns the outbox SQL (append, page) only; HTTP framing is the app's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from framework_ingest.db import Backend, Tx

EVENT_TYPES = ("accepted", "updated", "claimed", "done", "failed", "reaped")
MAX_PAGE = 1000
_CHUNK = 200  # rows per multi-row INSERT (7 parameters each: far below both limits)


@dataclass(frozen=True, slots=True)
class Event:
    """One change to append: its type and the item version it concerns."""

    type: str
    dedupe_key: str
    version: int
    content_hash: str | None = None
    attempts: int | None = None


def append(tx: Tx, events: Sequence[Event], now: str) -> None:
    """Append ``events`` in order inside ``tx``; call it last in the transaction."""
    if not events:
        return
    rows = tx.execute(
        "UPDATE event_counter SET last_seq = last_seq + ? WHERE id = 1 RETURNING last_seq",
        (len(events),),
    )
    first = int(rows[0][0]) - len(events) + 1
    for start in range(0, len(events), _CHUNK):
        chunk = events[start : start + _CHUNK]
        params: list[Any] = []
        for offset, e in enumerate(chunk):
            seq = first + start + offset
            params += [seq, e.type, e.dedupe_key, e.version, e.content_hash, e.attempts, now]
        marks = ",".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
        tx.execute(
            "INSERT INTO events (seq, type, dedupe_key, version, content_hash, attempts, "
            f"created_at) VALUES {marks}",
            params,
        )


def page(backend: Backend, after: int, limit: int) -> list[dict[str, Any]]:
    """Events with ``seq > after``, oldest first, at most ``limit``."""
    with backend.transaction(write=False) as tx:
        rows = tx.execute(
            "SELECT seq, type, dedupe_key, version, content_hash, attempts, created_at "
            "FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        )
    return [event_dict(r) for r in rows]


def bounds(backend: Backend) -> tuple[int, int]:
    """(the lowest kept seq - 1, the last seq handed out): what a reader can still get."""
    with backend.transaction(write=False) as tx:
        last = int(tx.execute("SELECT last_seq FROM event_counter WHERE id = 1")[0][0])
        low = tx.execute("SELECT MIN(seq) FROM events")[0][0]
    return (last if low is None else int(low) - 1), last


# -- consumer cursors -------------------------------------------------------------------


def set_cursor(backend: Backend, name: str, last_seq: int, now: str) -> dict[str, Any] | None:
    """Record that consumer ``name`` has processed every event up to ``last_seq``
    (moving back is allowed: a consumer may re-read). None when ``last_seq`` is beyond
    the last event handed out."""
    with backend.transaction() as tx:
        last = int(tx.execute("SELECT last_seq FROM event_counter WHERE id = 1")[0][0])
        if last_seq > last:
            return None
        tx.execute(
            "INSERT INTO event_consumers (name, last_seq, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, "
            "updated_at = excluded.updated_at",
            (name, last_seq, now),
        )
    return {"name": name, "last_seq": last_seq, "updated_at": now}


def delete_cursor(backend: Backend, name: str) -> bool:
    with backend.transaction() as tx:
        return bool(
            tx.execute("DELETE FROM event_consumers WHERE name = ? RETURNING name", (name,))
        )


def cursors(backend: Backend) -> list[dict[str, Any]]:
    with backend.transaction(write=False) as tx:
        rows = tx.execute("SELECT name, last_seq, updated_at FROM event_consumers ORDER BY name")
    return [{"name": r[0], "last_seq": int(r[1]), "updated_at": r[2]} for r in rows]


def event_dict(row: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": int(row[0]),
        "type": row[1],
        "dedupe_key": row[2],
        "version": int(row[3]),
        "at": row[6],
    }
    if row[4] is not None:
        out["content_hash"] = row[4]
    if row[5] is not None:
        out["attempts"] = int(row[5])
    return out
