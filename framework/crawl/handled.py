"""What the crawl hands back to Scrapy once a response's outcome is committed, and the
URL log lines of committed (or refused) requests.

An outcome waits for its group's commit as an :class:`Entry`: the outcome with what the
URL log needs of its response, kept instead of the response (whose body is not needed
any more).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framework.workspace import Outcome, Row, redact_url, utc_now
from framework.workspace.records import page_url_meta

if TYPE_CHECKING:
    from framework.workspace.records import CommitResult
    from framework.workspace.store import Store


@dataclass
class Handled:
    """What the spider should hand back to Scrapy after a response."""

    rows: list[Row] = field(default_factory=list)  # to schedule
    items: list[dict[str, Any]] = field(default_factory=list)  # to emit
    stop: str | None = None  # a close reason, when a stop condition fired


@dataclass
class Entry:
    """An outcome waiting for its group's commit (group.py)."""

    row: Row
    outcome: Outcome
    final_url: str | None
    status: int | None
    size: int
    latency_s: float | None
    host_down: bool = False
    stop: str | None = None  # a stop decided before the commit, told after it


def url_line(entry: Entry, res: CommitResult) -> dict[str, Any]:
    """The URL log line of a committed request. Built from known fields only; the URLs
    are the one place a secret could hide (credentials, ?token=), so they are masked
    here and the log's generic walk is skipped."""
    row, final_url = entry.row, entry.final_url
    return {
        "time": utc_now(),
        "method": row.method,
        "url": redact_url(row.url),
        "final_url": redact_url(final_url) if final_url else final_url,
        "status": entry.status,
        "bytes": entry.size,
        "latency_ms": None if entry.latency_s is None else round(1000 * entry.latency_s, 1),
        "outcome": "ok" if entry.outcome.ok else str(entry.outcome.error_kind),
        "row": row.id,
        "kind": row.kind,
        "attempt": res.attempt,
    }


def fenced_line(entry: Entry, worker: Any) -> dict[str, Any]:
    """The URL log line of a request whose outcome the store refused (fenced: another
    worker took the row over); the request was made all the same, so the log says so
    (not "ok": the integrity check counts those)."""
    row = entry.row
    return {
        "time": utc_now(),
        "method": row.method,
        "url": redact_url(row.url),
        "status": entry.status,
        "outcome": "fenced",
        "row": row.id,
        "kind": row.kind,
        "lease_token": entry.outcome.lease_token,
        "worker": worker,
    }


def emitted(
    outcome: Outcome, res: CommitResult, store: Store, out: list[dict[str, Any]], url: str
) -> None:
    """The items a committed outcome completed, as Scrapy's items, onto ``out``. Items
    complete at write time are emitted from the record; items completed by a sub-tab are
    read back whole from the store (their parts came separately). Each carries the page
    it came from as ``framework export`` writes it (``url``, or ``page_url`` beside a
    field ``url``; masked): ``url`` is the committed row's, the page of the items it
    wrote; an item a sub-tab completed has its own page's, the detail page's."""
    complete_now = {i.dedupe_key: i for i in outcome.items if i.complete}
    for key in res.completed:
        if key in complete_now:
            item = complete_now[key]
            out.append(
                {
                    "dedupe_key": key,
                    "source_type": item.source_type,
                    "source_id": item.source_id,
                    **page_url_meta(item.data, url),
                    **item.data,
                }
            )
        else:
            stored = store.get_item(key)
            if stored is not None:
                out.append(
                    {
                        "dedupe_key": stored.dedupe_key,
                        "source_type": stored.source_type,
                        "source_id": stored.source_id,
                        **page_url_meta(stored.data, stored.url),
                        **stored.data,
                    }
                )
