"""Retry-After deferrals kept in a workspace: host -> the time it asked not to be called before.

Owns the ``not_before`` meta value (a JSON object, ``{"host:port": epoch seconds}``):
reading it defensively (a hand-edited, truncated or pre-clamp value never crashes a
crawl or ``status``), clamping it to a maximum, recording a deadline (only ever later),
listing the active ones, and clearing them on purpose (``crawl --fresh``, ``requeue
--clear-deferrals``). Whether to wait for a deadline is the crawl's decision, not this
module's.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

from framework.workspace.store import Store

NOT_BEFORE_META = "not_before"


def load(store: Store) -> tuple[dict[str, float], bool]:
    """The stored deadlines, and whether the stored value needed repair (unreadable
    JSON, or entries that are not a host with a finite number: those are dropped)."""
    raw = store.get_meta(NOT_BEFORE_META)
    if raw is None:
        return {}, False
    try:
        doc: Any = json.loads(raw)
    except ValueError:
        return {}, True
    if not isinstance(doc, dict):
        return {}, True
    good: dict[str, float] = {}
    for host, until in doc.items():
        # bool is an int; NaN and infinities are valid JSON to Python but no time
        if isinstance(until, int | float) and not isinstance(until, bool):
            value = float(until)
            if math.isfinite(value):
                good[str(host)] = value
    return good, len(good) != len(doc)


def clamp(deadlines: dict[str, float], now: float, maximum: float) -> dict[str, float]:
    """Every deadline at most ``maximum`` seconds after ``now``."""
    return {host: min(until, now + maximum) for host, until in deadlines.items()}


def save(store: Store, deadlines: dict[str, float]) -> None:
    store.set_meta(NOT_BEFORE_META, json.dumps(deadlines, sort_keys=True))


def clear(store: Store) -> dict[str, float]:
    """Forget every deadline; return those that were still ahead."""
    deadlines, _ = load(store)
    if store.get_meta(NOT_BEFORE_META) is not None:
        save(store, {})
    now = time.time()
    return {host: until for host, until in deadlines.items() if until > now}


def active(store: Store, now: float | None = None) -> list[dict[str, Any]]:
    """The deadlines still ahead, soonest first, as ``status`` shows them."""
    deadlines, _ = load(store)
    now = time.time() if now is None else now
    return [
        {"host": host, "until": iso(until), "seconds_left": round(until - now, 1)}
        for host, until in sorted(deadlines.items(), key=lambda kv: (kv[1], kv[0]))
        if until > now
    ]


def iso(epoch: float) -> str:
    """UTC ISO time; a moment past what datetime holds (a value written before clamping
    existed) is shown as the end of year 9999 rather than crashing."""
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "9999-12-31T23:59:59+00:00"


__all__ = ["NOT_BEFORE_META", "active", "clamp", "clear", "iso", "load", "save"]
