"""Whether an item ships: its verdict against the latest ship-log record of its key.

Owns the rule (ship, skip as delivered, hold as rejected with the same content) and
the size of the chunks in which a run asks the index for the latest records. It
reads no log and sends nothing: the run hands it what the index answered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

from framework.workspace import StoredItem
from framework_ship.index import SUCCESS, Latest, digest

DECIDE_CHUNK = 500  # items per index query; bounded memory, few round trips

T = TypeVar("T")


def decide(item: StoredItem, latest: Latest | None, retry_rejected: bool) -> tuple[bool, str]:
    """(ship?, why) for one item, from the latest ship-log record of its key."""
    if latest is None:
        return True, "never shipped"
    h = digest(item.content_hash)
    if latest.ok_hash == h and latest.hash == h:
        return False, "delivered with this content"
    if latest.outcome == "rejected" and latest.hash == h:
        if retry_rejected:
            return True, "rejected before; --retry-rejected"
        return False, "rejected before with this content; held for review"
    if latest.ok_hash is not None and latest.ok_hash != h:
        return True, "content changed since the last delivery"
    if latest.outcome in SUCCESS:
        return True, "content changed since the last delivery"
    return True, "previous attempts failed"


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter), read as they are needed."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


__all__ = ["DECIDE_CHUNK", "chunked", "decide"]
