"""The handoff to the application: downstream status of stored items.

Every stored item starts ``queued`` (an updated one goes back to ``queued``).
``claim`` moves up to N rows ``queued -> running`` in ONE conditional statement (a row
another claimer took first is simply not returned: a lost race is a skip; PostgreSQL
also skips rows locked by a concurrent claim), ``done``/``failed`` finish only rows that
are ``running``, and ``reap`` returns rows ``running`` for longer than a timeout to
``queued`` without touching their attempt count. This module owns that SQL only.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from framework_ingest.db import Backend, format_time, utcnow
from framework_ingest.store import ITEM_COLUMNS, item_dict


def claim(backend: Backend, limit: int, source_type: str | None = None) -> list[dict[str, Any]]:
    """Claim up to ``limit`` queued items, oldest update first; return them."""
    where = "status = 'queued'" + (" AND source_type = ?" if source_type is not None else "")
    pick = f"SELECT dedupe_key FROM items WHERE {where} ORDER BY updated_at, dedupe_key LIMIT ?"
    if backend.dialect == "postgresql":
        # A materialized CTE picks the rows once; PostgreSQL may otherwise re-run an IN
        # subquery with LIMIT and claim more than asked. SKIP LOCKED leaves rows another
        # claimer is taking.
        sql = (
            f"WITH picked AS MATERIALIZED ({pick} FOR UPDATE SKIP LOCKED) "
            "UPDATE items SET status = 'running', attempts = attempts + 1, claimed_at = ? "
            "FROM picked WHERE items.dedupe_key = picked.dedupe_key AND items.status = 'queued' "
            f"RETURNING {_qualified('items')}"
        )
    else:  # SQLite runs one writer at a time: the conditional UPDATE is the whole claim.
        sql = (
            "UPDATE items SET status = 'running', attempts = attempts + 1, claimed_at = ? "
            f"WHERE status = 'queued' AND dedupe_key IN ({pick}) RETURNING {ITEM_COLUMNS}"
        )
    pick_params: list[Any] = [] if source_type is None else [source_type]
    pick_params.append(limit)
    params = (
        [*pick_params, utcnow()] if backend.dialect == "postgresql" else [utcnow(), *pick_params]
    )
    with backend.transaction() as tx:
        rows = tx.execute(sql, params)
    items = [item_dict(r) for r in rows]
    return sorted(items, key=lambda i: (i["updated_at"], i["dedupe_key"]))


def _qualified(table: str) -> str:
    return ", ".join(f"{table}.{c.strip()}" for c in ITEM_COLUMNS.split(","))


def _finish(
    backend: Backend, keys: Iterable[str], status: str, reason: str | None
) -> dict[str, str]:
    outcome: dict[str, str] = {}
    now = utcnow()
    with backend.transaction() as tx:
        for key in keys:
            rows = tx.execute(
                "UPDATE items SET status = ?, finished_at = ?, last_error = ? "
                "WHERE dedupe_key = ? AND status = 'running' RETURNING dedupe_key",
                (status, now, reason, key),
            )
            outcome[key] = status if rows else "skipped"
    return outcome


def done(backend: Backend, keys: Iterable[str]) -> dict[str, str]:
    """Mark running items done; a key that is not ``running`` comes back ``skipped``."""
    return _finish(backend, keys, "done", None)


def failed(backend: Backend, keys: Iterable[str], reason: str) -> dict[str, str]:
    """Mark running items failed with ``reason``; others come back ``skipped``."""
    return _finish(backend, keys, "failed", reason)


def reap(backend: Backend, older_than: float, *, now: datetime | None = None) -> list[str]:
    """Return items ``running`` for more than ``older_than`` seconds to ``queued``."""
    cutoff = format_time((now or datetime.now(UTC)) - timedelta(seconds=older_than))
    with backend.transaction() as tx:
        rows = tx.execute(
            "UPDATE items SET status = 'queued', claimed_at = NULL "
            "WHERE status = 'running' AND claimed_at < ? RETURNING dedupe_key",
            (cutoff,),
        )
    return sorted(str(r[0]) for r in rows)
