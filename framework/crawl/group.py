"""Group commit: the outcomes of responses that arrive close together share one commit.

A transaction costs more than the rows it writes (``BEGIN IMMEDIATE``, the WAL frames of
the table and index pages every commit rewrites, the ``COMMIT``). :class:`GroupCommit`
holds the outcomes handed to it until ``batch`` of them wait, ``window_s`` seconds have
passed since the first, waiting would only cost (:attr:`GroupCommit.may_wait`: nothing
else is in flight, so no response can join; or the group holds rows the downloader is
short of), or someone asks (:meth:`GroupCommit.flush`: a stop, the close). Then one
call of ``commit`` writes them all, and each waiter learns its own result.

Rules it keeps for the crawl (see :mod:`framework.crawl.runtime`): an outcome is not
committed until its group is, so a kill loses exactly the waiting outcomes, whose rows
are still ``pending`` and are fetched again; a waiter's result (its items, the rows it
found) exists only after the commit, so nothing reaches Scrapy's pipelines or the
scheduler before it is durable.

It knows nothing of rows or SQLite: ``commit`` maps a list of entries to a list of
results. The timer runs on the Twisted reactor when it runs; outside one (a test, a
tool) a group is committed as soon as it is added.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

E = TypeVar("E")
R = TypeVar("R")

WINDOW_MS = 5.0  # default of FRAMEWORK_COMMIT_WINDOW_MS on SQLite (docs/benchmarks.md)
# ...and on a database workspace, whose commit is several round trips to the server: with
# the next list page sent first (crawl/spider.py), responses arrive evenly and 5 ms held
# ~2.8 pages per group there, 50 ms ~9.5 (docs/benchmarks.md, "PostgreSQL workspace")
DB_WINDOW_MS = 50.0
BATCH = 32  # default of FRAMEWORK_COMMIT_BATCH


class Waiting(Generic[E, R]):
    """One entry of a group: done once its group is committed."""

    __slots__ = ("_deferred", "done", "entry", "failure", "result")

    def __init__(self, entry: E) -> None:
        self.entry = entry
        self.done = False
        self.result: R | None = None
        self.failure: BaseException | None = None
        self._deferred: Deferred[R] | None = None

    def deferred(self) -> Deferred[R]:
        """Fires with the result at the group's commit (or at once when done)."""
        d: Deferred[R] = Deferred()
        if self.done:
            self._fire(d)
        else:
            self._deferred = d
        return d

    def _settle(self, result: R | None, failure: BaseException | None) -> None:
        self.done = True
        self.result, self.failure = result, failure
        if self._deferred is not None:
            d, self._deferred = self._deferred, None
            self._fire(d)

    def _fire(self, d: Deferred[R]) -> None:
        if self.failure is not None:
            d.errback(self.failure)
        else:
            d.callback(self.result)  # type: ignore[arg-type]


class GroupCommit(Generic[E, R]):
    """Entries waiting for their shared commit. ``batch`` <= 1 or ``window_s`` <= 0:
    every entry is committed alone, as it is added."""

    def __init__(
        self,
        commit: Callable[[Sequence[E]], Sequence[R]],
        window_s: float = WINDOW_MS / 1000,
        batch: int = BATCH,
        call_later: Callable[[float, Callable[[], Any]], Any] | None = None,
    ) -> None:
        self._commit = commit
        # (delay, fn) -> a cancellable timer, or None without a running reactor
        self._call_later = call_later or _call_later
        self.window_s = window_s
        self.batch = batch
        self._waiting: list[Waiting[E, R]] = []
        self._timer: Any = None  # a reactor's DelayedCall
        self._work = False  # a waiting entry holds new work (rows to fetch)
        # Whether the group may wait for more, given whether it holds new work and how
        # many entries wait: the spider answers (responses that can still join, and,
        # when the group holds new work, enough queued for the downloader meanwhile)
        self.may_wait: Callable[[bool, int], bool] = lambda work, waiting: True
        self.groups = 0  # commits made, for the stats
        self.entries = 0
        self.flushes: dict[str, int] = {}  # why groups were committed, and how often

    def __len__(self) -> int:
        return len(self._waiting)

    def entries_waiting(self) -> list[E]:
        return [w.entry for w in self._waiting]

    def add(self, entry: E, *, now: bool = False, work: bool = False) -> Waiting[E, R]:
        """Queue ``entry``; committed with its group (``now``: with what waits, at once).
        ``work``: the entry holds new work (rows found), which waits with it."""
        waiting: Waiting[E, R] = Waiting(entry)
        self._waiting.append(waiting)
        self._work = self._work or work
        if now:
            self.flush("now")
        elif len(self._waiting) >= self.batch or self.window_s <= 0:
            self.flush("full")
        elif not self.may_wait(self._work, len(self._waiting)):
            self.flush("no_wait")
        elif self._timer is None:
            self._timer = self._call_later(self.window_s, self._on_timer)
            if self._timer is None:  # no reactor running: nothing would ever flush
                self.flush("no_reactor")
        return waiting

    def _on_timer(self) -> None:
        self._timer = None
        self.flush("window")

    def flush(self, why: str = "asked") -> None:
        """Commit every waiting entry now, in one call; tell each its result. ``why``
        is counted (:attr:`flushes`: the crawl's stats say how its groups ended)."""
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None
        group, self._waiting = self._waiting, []
        self._work = False
        if not group:
            return
        try:
            results = self._commit([w.entry for w in group])
        except BaseException as exc:  # each waiter raises it; nothing was committed
            for w in group:
                w._settle(None, exc)
            raise
        self.groups += 1
        self.entries += len(group)
        self.flushes[why] = self.flushes.get(why, 0) + 1
        for w, result in zip(group, results, strict=True):
            w._settle(result, None)


def _call_later(delay: float, fn: Callable[[], Any]) -> Any:
    from twisted.internet import reactor

    r: Any = reactor
    return r.callLater(delay, fn) if r.running else None


__all__ = ["BATCH", "DB_WINDOW_MS", "WINDOW_MS", "GroupCommit", "Waiting"]
