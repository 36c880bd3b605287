"""Retention: what the door may forget, and when, in small transactions.

Rules (each age configurable; ``None`` keeps that kind forever):

- ``item_history``: replaced versions whose ``replaced_at`` is older than ``history_age``.
- ``idempotency_keys``: keys registered longer than ``idempotency_age`` ago. A replay of
  a forgotten key is stored again and, as its item row is still there, answers
  ``duplicate`` (or ``updated``), never a second ``accepted``.
- ``events``: the oldest events, as long as every one of them is older than
  ``event_age`` and, when consumers registered cursors (``event_consumers``), at or
  below the lowest cursor. "Delivered" means: on the stream for ``event_age`` AND
  acknowledged by every registered consumer (without any registered consumer, age
  alone: one that falls behind is told ``410 events-purged``). Only a prefix of the
  sequence is dropped, so a reader never meets a hole.
- done items: the ``data`` of items ``done`` for longer than ``done_age`` is dropped and
  ``purged_at`` set; the key row (key, content hash, version, status) stays as the
  tombstone that keeps replays from creating the item again. ``queued``, ``running`` and
  ``failed`` items are never touched.
- ``used_signatures``: always, once their time has left the clock-skew window.

Every statement deletes at most ``batch`` rows and commits, so a purge never holds locks
long on a busy server. This module owns that SQL; the CLI and the server's periodic task
call :func:`purge`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from framework_ingest.db import Backend, format_time
from framework_ingest.store import retrying

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Ages in seconds; ``None`` keeps that kind of row forever."""

    history_age: float | None = 30 * DAY
    idempotency_age: float | None = 7 * DAY
    event_age: float | None = 7 * DAY
    done_age: float | None = 30 * DAY


def _cutoff(now: datetime, age: float) -> str:
    return format_time(now - timedelta(seconds=age))


# One bounded statement per kind; ``?`` are (cutoff, batch) unless noted.
_HISTORY = (
    "DELETE FROM item_history WHERE id IN "
    "(SELECT id FROM item_history WHERE replaced_at < ? ORDER BY id LIMIT ?)"
)
_IDEMPOTENCY = (
    "DELETE FROM idempotency_keys WHERE key IN "
    "(SELECT key FROM idempotency_keys WHERE created_at < ? LIMIT ?)"
)
# Only events below the first one that is still young (a prefix, never a hole) and, when
# consumers registered cursors, not above the lowest cursor.
_EVENTS = (
    "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE seq < "
    "COALESCE((SELECT MIN(seq) FROM events WHERE created_at >= ?), "
    "(SELECT last_seq + 1 FROM event_counter WHERE id = 1)) "
    "AND seq <= COALESCE((SELECT MIN(last_seq) FROM event_consumers), seq) "
    "ORDER BY seq LIMIT ?)"
)
# (now, cutoff, batch): the outer status check re-runs on the locked row, so an item a
# concurrent write just put back to queued is left alone.
_DONE = (
    "UPDATE items SET data = 'null', purged_at = ? WHERE status = 'done' AND purged_at IS NULL "
    "AND dedupe_key IN (SELECT dedupe_key FROM items WHERE status = 'done' "
    "AND purged_at IS NULL AND finished_at < ? LIMIT ?)"
)
_SIGNATURES = (
    "DELETE FROM used_signatures WHERE signature IN "
    "(SELECT signature FROM used_signatures WHERE expires_at < ? LIMIT ?)"
)


def _drain(backend: Backend, sql: str, params: tuple[object, ...], batch: int) -> int:
    def once() -> int:
        with backend.transaction() as tx:
            # RETURNING 1 counts rows the same way on both databases
            return len(tx.execute(sql + " RETURNING 1", (*params, batch)))

    total = 0
    while True:
        n = retrying(once)  # a deadlock with a concurrent write: run that batch again
        total += n
        if n < batch:
            return total


def purge_signatures(backend: Backend, *, batch: int = 1000, now: datetime | None = None) -> int:
    """Forget signatures whose time has left the skew window (a signing server runs this
    on its own, whether or not the rest of retention is on)."""
    return _drain(backend, _SIGNATURES, (format_time(now or datetime.now(UTC)),), batch)


def purge(
    backend: Backend,
    policy: RetentionPolicy,
    *,
    batch: int = 1000,
    now: datetime | None = None,
) -> dict[str, int]:
    """Apply ``policy``; return how many rows of each kind were deleted (or purged)."""
    now = now or datetime.now(UTC)
    stamp = format_time(now)
    work: list[tuple[str, str, tuple[object, ...]]] = []
    if policy.history_age is not None:
        work.append(("history", _HISTORY, (_cutoff(now, policy.history_age),)))
    if policy.idempotency_age is not None:
        work.append(("idempotency_keys", _IDEMPOTENCY, (_cutoff(now, policy.idempotency_age),)))
    if policy.event_age is not None:
        work.append(("events", _EVENTS, (_cutoff(now, policy.event_age),)))
    if policy.done_age is not None:
        work.append(("done_items", _DONE, (stamp, _cutoff(now, policy.done_age))))
    work.append(("signatures", _SIGNATURES, (stamp,)))
    return {name: _drain(backend, sql, params, batch) for name, sql, params in work}
