"""When a request may be sent: the hosts' Retry-After deadlines of a crawl
(:class:`HostDeadlines`), and the backoff between a row's attempts (:class:`RetryWaits`).

The deadlines are loaded at the run's start, moved
later by every demand, kept in the workspace (and, on a database, shared by every
worker: framework/workspace/hosts) so a restarted crawl honours them too.

A deadline only moves later, and never further ahead than ``FRAMEWORK_RETRY_AFTER_MAX``.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from framework.crawl.politeness import backoff_delay
from framework.workspace import deferrals, redact_url

if TYPE_CHECKING:
    from framework.crawl.limits import Limits
    from framework.workspace import Workspace

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


class HostDeadlines:
    def __init__(
        self, ws: Workspace, limits: Limits, fresh: bool, event: Callable[..., None]
    ) -> None:
        self.ws = ws
        self.limits = limits
        self.fresh = fresh
        self.event = event
        # host -> epoch seconds before which it asked not to be called
        self.not_before: dict[str, float] = {}

    def load(self, now: float) -> bool:
        """Load the deadlines kept by earlier runs (and every worker's, on a database);
        False (said) when a host's is further ahead than the cap: no fetch now."""
        self.not_before = self._load(now)
        if self.ws.hosts is not None:  # a database's: the deadlines every worker shares
            for host, until in self.ws.hosts.deadlines().items():
                self.not_before[host] = max(self.not_before.get(host, 0.0), until)
        for host, until in sorted(self.not_before.items()):
            if until - now > self.limits.retry_after_cap:
                when = deferrals.iso(until)
                self.event("run_deferred", host=host, until=when)
                logger.warning(
                    "%s asked not to be called before %s (Retry-After): run again later",
                    host,
                    when,
                )
                return False
        return True

    def asked(self, url: str, meta: Mapping[str, Any], final_url: str) -> bool:
        """A response's Retry-After (politeness.py put it in ``meta``): the host's
        deadline moves; True (said) when it was over the cap: the run stops."""
        self.defer(url, float(meta["fw_retry_after"]))
        if not meta.get("fw_retry_after_over_cap"):
            return False
        logger.warning(
            "Retry-After of %.0fs from %s is over the cap: stopping (run again later)",
            meta["fw_retry_after"],
            redact_url(final_url),
        )
        return True

    def _load(self, now: float) -> dict[str, float]:
        """The hosts' Retry-After deadlines kept by earlier runs: none on a fresh run
        (it clears them on purpose), and never further ahead than the maximum (a value
        kept before the clamp existed, or written by hand, is repaired in place)."""
        store = self.ws.store
        if self.fresh:
            cleared = deferrals.clear(store)
            if cleared:
                self.event(
                    "deferrals_cleared",
                    why="fresh run requested",
                    hosts={h: deferrals.iso(u) for h, u in sorted(cleared.items())},
                )
            return {}
        stored, repaired = deferrals.load(store)
        clamped = deferrals.clamp(stored, now, self.limits.retry_after_max)
        if repaired or clamped != stored:
            deferrals.save(store, clamped)
            self.event(
                "deferrals_clamped",
                max_s=self.limits.retry_after_max,
                hosts={h: deferrals.iso(u) for h, u in sorted(clamped.items())},
            )
            logger.warning(
                "Retry-After deadlines in the workspace were unreadable or further ahead "
                "than FRAMEWORK_RETRY_AFTER_MAX (%.0fs): repaired",
                self.limits.retry_after_max,
            )
        return clamped

    def defer(self, url: str, delay: float) -> None:
        host = urlsplit(url).netloc
        if not math.isfinite(delay) or delay > self.limits.retry_after_max:
            delay = self.limits.retry_after_max
        if self.ws.hosts is not None:  # shared by every worker (politeness.py reads it)
            self.ws.hosts.defer(host, delay)
        until = time.time() + delay
        if until > self.not_before.get(host, 0.0):
            self.not_before[host] = until
            deferrals.save(self.ws.store, self.not_before)

    def until(self, url: str) -> float | None:
        """The persisted Retry-After deadline of the URL's host, if still ahead."""
        host = urlsplit(url).netloc
        until = self.not_before.get(host)
        if self.ws.hosts is not None:  # another worker's deadline counts as much
            wait = self.ws.hosts.wait(host)
            if wait > 0:
                until = max(until or 0.0, time.time() + wait)
        return until if until is not None and until > time.time() else None


class RetryWaits:
    """Waiting between a row's attempts: failed attempts per row in this run, and the
    epoch time before which its retry must not be sent (read by the spider)."""

    def __init__(self, base: float, most: float, rng: random.Random | None = None) -> None:
        self.base = base
        self.most = most
        self._rng = rng or random.Random()
        self._failed: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}

    def failed(self, row_id: int) -> None:
        """The row failed once more in this run: its retry waits longer."""
        failed = self._failed[row_id] = self._failed.get(row_id, 0) + 1
        delay = backoff_delay(failed, self.base, self.most, self._rng)
        if delay > 0:
            self._retry_at[row_id] = time.time() + delay

    def pop(self, row_id: int) -> float | None:
        return self._retry_at.pop(row_id, None)
