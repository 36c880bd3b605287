"""A job's counts over time: rows per kind and state, requests, pages/s, ETA.

Owns the samples the live page draws and /metrics exports. A sample costs the store's
two count queries and the URL log's new lines (read after a cursor,
:mod:`~framework_dashboard.tail`): never the whole log twice. Samples are taken only
when a page or a scrape asks (at most one per ``min_interval`` per job, whoever
asks), so a dashboard nobody looks at reads nothing.

Requests are the URL log's lines (one per request actually sent), errors its lines whose
outcome is not ``ok`` (by outcome: the typed error kinds, ``blocked``), Retry-After
deferrals its ``rate_limited`` lines by host (a 429, or a 503 with ``Retry-After``: each
one set its host's deadline). Pages/s is the requests' rate over the last
``RATE_WINDOW_S``; the ETA is the rows still to fetch at the pace rows became ok over
the same window (rows found later are not in it).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from framework.workspace import RowStatus, Workspace, leases
from framework_dashboard import tail

RATE_WINDOW_S = 10.0
DEFERRED = "rate_limited"  # the URL log's outcome of an answer that deferred its host
HISTORY = 600  # samples kept per job: ten minutes at one a second


@dataclass
class Sample:
    t: float
    requests: int
    ok_rows: int
    items: int


@dataclass
class JobProgress:
    """One job's counters; :meth:`refresh` is called with its workspace open."""

    url_cursor: int = 0
    requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors_by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    deferrals_by_host: Counter[str] = field(default_factory=Counter)
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last: dict[str, Any] | None = None
    taken_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(
        self, ws: Workspace, max_attempts: int, clock: Callable[[], float]
    ) -> dict[str, Any]:
        self._read_urls(ws)
        by_kind: dict[str, dict[str, int]] = {}
        totals = {s.value: 0 for s in RowStatus}
        for kind, counts in sorted(ws.store.row_counts().items()):
            entry = {s.value: counts.get(s, 0) for s in RowStatus}
            entry["total"] = sum(counts.values())
            by_kind[kind] = entry
            for s, n in counts.items():
                totals[s.value] += n
        queue = ws.store.counts(max_attempts)
        items = ws.store.item_counts()
        now = clock()
        self.samples.append(
            Sample(now, self.requests, totals["ok"], items["complete"] + items["incomplete"])
        )
        pages_per_s, rows_per_s = self._rates()
        to_fetch = queue["pending"] + queue["retryable"]
        self.last = {
            "time": now,
            "rows": {"by_kind": by_kind, "by_status": totals, "total": sum(totals.values())},
            "to_fetch": to_fetch,
            "exhausted": queue["exhausted"],
            "items": {**items, "total": items["complete"] + items["incomplete"]},
            "requests": self.requests,
            "errors": sum(n for o, n in self.outcomes.items() if o != "ok"),
            "pages_per_s": round(pages_per_s, 2),
            "items_per_s": round(self._items_rate(), 2),
            "eta_s": round(to_fetch / rows_per_s) if to_fetch and rows_per_s > 0 else None,
            "crawl_running": ws.lock_holder("crawl") is not None or _workers_running(ws),
        }
        self.taken_at = now
        return self.last

    def series(self) -> list[tuple[float, float]]:
        """(time, pages/s) between consecutive samples: the chart's points."""
        out: list[tuple[float, float]] = []
        prev: Sample | None = None
        for s in self.samples:
            if prev is not None and s.t > prev.t:
                out.append((round(s.t, 3), round((s.requests - prev.requests) / (s.t - prev.t), 2)))
            prev = s
        return out

    def _read_urls(self, ws: Workspace) -> None:
        while True:
            lines, cursor = tail.after(ws.urls, self.url_cursor)
            if cursor < self.url_cursor:  # the log was replaced: count it afresh
                self.requests = 0
                self.outcomes.clear()
                self.errors_by_kind.clear()
                self.deferrals_by_host.clear()
            self.url_cursor = cursor
            for _, line in lines:
                outcome = str(line.get("outcome") or "unknown")
                self.requests += 1
                self.outcomes[outcome] += 1
                if outcome != "ok":
                    self.errors_by_kind[(str(line.get("kind") or ""), outcome)] += 1
                if outcome == DEFERRED:
                    self.deferrals_by_host[_host(line.get("url"))] += 1
            if not lines:
                return

    def _window(self) -> tuple[Sample, Sample] | None:
        if len(self.samples) < 2:
            return None
        newest = self.samples[-1]
        oldest = newest
        for s in reversed(self.samples):
            oldest = s
            if newest.t - s.t >= RATE_WINDOW_S:
                break
        return (oldest, newest) if newest.t > oldest.t else None

    def _rates(self) -> tuple[float, float]:
        window = self._window()
        if window is None:
            return 0.0, 0.0
        a, b = window
        dt = b.t - a.t
        return (b.requests - a.requests) / dt, max(0, b.ok_rows - a.ok_rows) / dt

    def _items_rate(self) -> float:
        window = self._window()
        if window is None:
            return 0.0
        a, b = window
        return max(0, b.items - a.items) / (b.t - a.t)


def _host(url: Any) -> str:
    """The ``host:port`` a deadline is kept under (the request's URL, as the crawl keys
    it) without its user part: read by hand, a masked one (``[redacted]@``) is no IPv6
    address to ``urlsplit``."""
    text = str(url or "")
    authority = text.partition("://")[2] if "://" in text else text
    for end in "/?#":
        authority = authority.partition(end)[0]
    return authority.rpartition("@")[2]


def _workers_running(ws: Workspace) -> bool:
    """Workers of ``crawl --processes N`` or of a database hold the crawl lock shared,
    which the probe does not see: their live rows in the workers table do (what
    ``status`` reads)."""
    store: Any = ws.store
    if ws.is_database:
        from framework.workspace import postgres_leases

        found = postgres_leases.workers(store)
    else:
        found = leases.workers(store)
    now = time.time()
    return any(w.alive(now, leases.LEASE_SECONDS) for w in found)


class Tracker:
    """Every job's :class:`JobProgress`, sampled at most once per ``min_interval``."""

    def __init__(self, min_interval: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self.min_interval = min_interval
        self.clock = clock
        self._jobs: dict[str, JobProgress] = {}
        self._lock = threading.Lock()

    def job(self, name: str) -> JobProgress:
        with self._lock:
            return self._jobs.setdefault(name, JobProgress())

    def sample(
        self, name: str, open_ws: Callable[[], Workspace], max_attempts: Callable[[Workspace], int]
    ) -> tuple[JobProgress, dict[str, Any]]:
        progress = self.job(name)
        with progress.lock:
            if progress.last is not None and self.clock() - progress.taken_at < self.min_interval:
                return progress, progress.last
            with open_ws() as ws:
                return progress, progress.refresh(ws, max_attempts(ws), self.clock)


__all__ = ["DEFERRED", "HISTORY", "RATE_WINDOW_S", "JobProgress", "Sample", "Tracker"]
