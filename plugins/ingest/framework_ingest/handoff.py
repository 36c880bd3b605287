"""The handoff to the application: downstream status of stored items, under leases.

Every stored item starts ``queued`` (an updated one goes back to ``queued``).
``claim`` moves up to N rows ``queued -> running`` in ONE conditional statement (a row
another claimer took first is simply not returned: a lost race is a skip; PostgreSQL
also skips rows locked by a concurrent claim) and stamps them with a fresh ``claim_id``:
the fencing token of that lease. ``done``/``failed`` finish a row only when it is
``running`` under the claim id presented; ``reap`` returns rows ``running`` for longer
than a timeout to ``queued`` (clearing the claim id, not touching the attempt count).
So a worker whose lease was reaped (and maybe re-claimed by another) is told ``stale``
and cannot overwrite the current holder's outcome. Every change appends its event
(:mod:`framework_ingest.events`) in the same transaction. This module owns that SQL only.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from framework_ingest import events
from framework_ingest.db import Backend, format_time, utcnow
from framework_ingest.store import ITEM_COLUMNS, item_dict, retrying

# What done/failed answer per key.
FINISHED = ("done", "failed")  # the change was made
STALE = "stale"  # the lease presented is not the row's current one: reaped, re-claimed or updated
SKIPPED = "skipped"  # nothing to do: no such key, or this lease already finished it


def new_claim_id() -> str:
    """A fencing token: unguessable, unique per claim call."""
    return "c-" + secrets.token_hex(12)


def claim(backend: Backend, limit: int, source_type: str | None = None) -> list[dict[str, Any]]:
    """Claim up to ``limit`` queued items, oldest update first; return them, each with
    the ``claim_id`` that ``done``/``failed`` must present."""
    where = "status = 'queued'" + (" AND source_type = ?" if source_type is not None else "")
    pick = f"SELECT dedupe_key FROM items WHERE {where} ORDER BY updated_at, dedupe_key LIMIT ?"
    if backend.dialect == "postgresql":
        # A materialized CTE picks the rows once; PostgreSQL may otherwise re-run an IN
        # subquery with LIMIT and claim more than asked. SKIP LOCKED leaves rows another
        # claimer is taking.
        sql = (
            f"WITH picked AS MATERIALIZED ({pick} FOR UPDATE SKIP LOCKED) "
            "UPDATE items SET status = 'running', attempts = attempts + 1, claimed_at = ?, "
            "claim_id = ? FROM picked "
            "WHERE items.dedupe_key = picked.dedupe_key AND items.status = 'queued' "
            f"RETURNING {_qualified('items')}"
        )
    else:  # SQLite runs one writer at a time: the conditional UPDATE is the whole claim.
        sql = (
            "UPDATE items SET status = 'running', attempts = attempts + 1, claimed_at = ?, "
            f"claim_id = ? WHERE status = 'queued' AND dedupe_key IN ({pick}) "
            f"RETURNING {ITEM_COLUMNS}"
        )
    pick_params: list[Any] = [] if source_type is None else [source_type]
    pick_params.append(limit)
    now, claim_id = utcnow(), new_claim_id()
    params = (
        [*pick_params, now, claim_id]
        if backend.dialect == "postgresql"
        else [now, claim_id, *pick_params]
    )
    with backend.transaction() as tx:
        rows = tx.execute(sql, params)
        items = sorted(
            (item_dict(r) for r in rows), key=lambda i: (i["updated_at"], i["dedupe_key"])
        )
        claimed = [
            events.Event("claimed", i["dedupe_key"], i["version"], attempts=i["attempts"])
            for i in items
        ]
        events.append(tx, claimed, now)
    for item in items:
        item["claim_id"] = claim_id
    return items


def _qualified(table: str) -> str:
    return ", ".join(f"{table}.{c.strip()}" for c in ITEM_COLUMNS.split(","))


def _finish(
    backend: Backend, claim_id: str, keys: Iterable[str], status: str, reason: str | None
) -> dict[str, str]:
    asked = list(dict.fromkeys(keys))
    return retrying(lambda: _finish_once(backend, claim_id, asked, status, reason))


def _finish_once(
    backend: Backend, claim_id: str, asked: list[str], status: str, reason: str | None
) -> dict[str, str]:
    outcome: dict[str, str] = {}
    changed: list[events.Event] = []
    now = utcnow()
    with backend.transaction() as tx:
        # rows are locked in key order, as batches do, so two finishes cannot deadlock
        for key in sorted(asked):
            rows = tx.execute(
                "UPDATE items SET status = ?, finished_at = ?, last_error = ? "
                "WHERE dedupe_key = ? AND status = 'running' AND claim_id = ? "
                "RETURNING version, attempts",
                (status, now, reason, key, claim_id),
            )
            if rows:
                outcome[key] = status
                changed.append(events.Event(status, key, int(rows[0][0]), attempts=int(rows[0][1])))
                continue
            found = tx.execute("SELECT status, claim_id FROM items WHERE dedupe_key = ?", (key,))
            if found and found[0][1] == claim_id and found[0][0] in FINISHED:
                outcome[key] = SKIPPED  # this lease finished it already: a repeat
            elif found:
                outcome[key] = STALE
            else:
                outcome[key] = SKIPPED
        events.append(tx, changed, now)
    return {key: outcome[key] for key in asked}


def done(backend: Backend, claim_id: str, keys: Iterable[str]) -> dict[str, str]:
    """Mark items done that are running under ``claim_id``; per key ``done``, ``stale``
    (the lease is no longer this one's) or ``skipped`` (unknown key, or a repeat)."""
    return _finish(backend, claim_id, keys, "done", None)


def failed(backend: Backend, claim_id: str, keys: Iterable[str], reason: str) -> dict[str, str]:
    """Mark items failed with ``reason``; outcomes as for :func:`done`."""
    return _finish(backend, claim_id, keys, "failed", reason)


def reap(backend: Backend, older_than: float, *, now: datetime | None = None) -> list[str]:
    """Return items ``running`` for more than ``older_than`` seconds to ``queued``; their
    leases end (a late ``done`` from the old holder is ``stale``)."""
    cutoff = format_time((now or datetime.now(UTC)) - timedelta(seconds=older_than))
    return retrying(lambda: _reap_once(backend, cutoff))


def _reap_once(backend: Backend, cutoff: str) -> list[str]:
    stamp = utcnow()
    with backend.transaction() as tx:
        rows = tx.execute(
            "UPDATE items SET status = 'queued', claimed_at = NULL, claim_id = NULL "
            "WHERE status = 'running' AND claimed_at < ? RETURNING dedupe_key, version, attempts",
            (cutoff,),
        )
        rows.sort(key=lambda r: str(r[0]))
        events.append(
            tx,
            [events.Event("reaped", str(r[0]), int(r[1]), attempts=int(r[2])) for r in rows],
            stamp,
        )
    return [str(r[0]) for r in rows]
