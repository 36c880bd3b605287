"""What a crawl shows a person: a progress line, a quiet start, a summary table.

* :class:`Progress`, a Scrapy extension (enabled in every job's settings, off unless
  ``FRAMEWORK_PROGRESS`` is ``live`` or ``lines``; ``framework crawl`` sets it): on a
  terminal a live line (rich) of rows ok/pending/error, pages/s, items and the ETA;
  elsewhere the same as a log line every ``FRAMEWORK_PROGRESS_INTERVAL`` seconds.
  It costs nothing per response: the numbers come from the crawl's own counters
  (:class:`~framework.crawl.runtime.RunCounters`), and the workspace's row and item
  counts are read again only every ``FRAMEWORK_PROGRESS_RESYNC`` seconds (two
  ``GROUP BY`` queries), in between moved on by the counters (so pending and error
  are estimates between two reads, exact at each).
* :func:`output_settings` quiets Scrapy's start-up (its version lines, overridden
  settings, the enabled components, "Spider opened", the periodic "Crawled N pages"
  and the final stats dict: about 100 lines) unless ``-v``.
* :func:`summary` is the end of a crawl as a small table instead of Python dicts.

It reads the workspace only through the running crawl's own store, and never writes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from framework.progress import LINES_INTERVAL, LIVE_INTERVAL, LiveLine, duration, terminal
from framework.settings import default

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from framework.crawl.process import CrawlResult

logger = logging.getLogger(__name__)

# Scrapy's loggers whose INFO lines are start-up and shut-down boilerplate.
STARTUP_LOGGERS = (
    "scrapy.utils.log",  # versions
    "scrapy.crawler",  # overridden settings
    "scrapy.addons",
    "scrapy.middleware",  # enabled extensions, middlewares, pipelines
    "scrapy.core.engine",  # spider opened / closing / closed
    "scrapy.extensions.logstats",  # "Crawled N pages (at N pages/min)"
    "scrapy.extensions.telnet",
    "scrapy.statscollectors",  # "Dumping Scrapy stats" and the dict
)


def output_settings(*, quiet: bool, verbose: bool, loglevel: str | None) -> dict[str, Any]:
    """The settings of ``framework crawl``'s output, and Scrapy's start-up loggers set
    to WARNING (unless ``verbose`` or DEBUG): call before the crawler process exists,
    which logs the versions when it is created. ``quiet``: warnings and errors only,
    no progress; ``verbose``: Scrapy's whole log and its stats dict at the end."""
    level = loglevel or ("WARNING" if quiet else "INFO")
    keep = verbose or level == "DEBUG"
    for name in STARTUP_LOGGERS:
        # a filter, not a level: Scrapy's logging set-up (dictConfig) resets the levels
        # of the loggers under "scrapy", and keeps their filters
        log = logging.getLogger(name)
        for old in [f for f in log.filters if isinstance(f, _WarningsOnly)]:
            log.removeFilter(old)
        if not keep:
            log.addFilter(_WarningsOnly())
    out: dict[str, Any] = {"LOG_LEVEL": level, "STATS_DUMP": verbose}
    if not quiet:
        out["FRAMEWORK_PROGRESS"] = "live" if terminal() else "lines"
    return out


class _WarningsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


# ------------------------------------------------------------------- progress
@dataclass(frozen=True)
class Snapshot:
    ok: int
    pending: int
    error: int
    items: int
    pages_per_s: float
    eta_s: float | None  # None: not known yet (no rate, or nothing measured)

    def line(self) -> str:
        eta = "" if self.eta_s is None else f" | ETA {duration(self.eta_s)}"
        return (
            f"rows {self.ok} ok, {self.pending} pending, {self.error} error"
            f" | {self.pages_per_s:.1f} pages/s | items {self.items}{eta}"
        )


class Tally:
    """Row and item totals from a periodic read of the workspace, moved on between
    reads by the run's counters; pages/s and ETA over a sliding window. Plain values
    in, a :class:`Snapshot` out, so tests drive it without a crawl."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._base: dict[str, int] | None = None  # ok, pending, error, items at the read
        self._at_base: dict[str, int] = {}  # the counters at that read
        self._rates: deque[tuple[float, int]] = deque()  # (time, requests so far)

    def synced(self) -> bool:
        return self._base is not None

    def sync(
        self, rows: Mapping[str, Mapping[Any, int]], items: Mapping[str, int], counters: Any
    ) -> None:
        totals = {"ok": 0, "pending": 0, "error": 0}
        for by_status in rows.values():
            for status, n in by_status.items():
                key = str(status)
                if key in totals:
                    totals[key] += n
        totals["items"] = sum(items.values())
        self._base = totals
        self._at_base = _counts(counters)

    def snapshot(self, counters: Any, now: float) -> Snapshot:
        c = _counts(counters)
        base = self._base or {"ok": 0, "pending": 0, "error": 0, "items": 0}
        d = {k: c[k] - self._at_base.get(k, 0) for k in c}
        ok = base["ok"] + d["ok"]
        # Each answered request settles a pending row or retries an error row: between
        # two reads of the workspace the split is not known, the next read corrects it.
        pending = max(0, base["pending"] + d["rows_new"] - d["ok"] - d["errors"])
        error = max(0, base["error"] + d["errors"])
        items = base["items"] + d["items_new"]
        self._rates.append((now, c["requests"]))
        while len(self._rates) > 2 and now - self._rates[0][0] > self.window_s:
            self._rates.popleft()
        t0, r0 = self._rates[0]
        rate = (c["requests"] - r0) / (now - t0) if now > t0 else 0.0
        eta = pending / rate if rate > 0 and pending and self._base is not None else None
        return Snapshot(ok, pending, error, items, rate, eta)


def _counts(counters: Any) -> dict[str, int]:
    return {
        k: int(getattr(counters, k, 0))
        for k in ("requests", "ok", "errors", "rows_new", "items_new")
    }


class Progress:
    """The crawl's progress on stderr: a live line on a terminal, log lines elsewhere.
    Never stops a crawl: anything it cannot read is skipped until the next tick."""

    def __init__(
        self, crawler: Crawler, mode: str, interval: float, resync: float, *, console: Any = None
    ) -> None:
        self.crawler = crawler
        self.mode = mode
        self.interval = interval
        self.resync = resync
        self.tally = Tally()
        self._console = console
        self._live: Any = None
        self._task: Any = None
        self._synced_at = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Progress:
        s = crawler.settings
        mode = str(s.get("FRAMEWORK_PROGRESS") or "").lower()
        if mode not in ("live", "lines"):
            raise NotConfigured  # without a message: Scrapy would warn that it is off
        # unset (the table's default: None) or 0: the mode's own (framework.progress)
        raw = s.get("FRAMEWORK_PROGRESS_INTERVAL", default("FRAMEWORK_PROGRESS_INTERVAL"))
        interval = float(raw or 0) or (LIVE_INTERVAL if mode == "live" else LINES_INTERVAL)
        resync = s.getfloat("FRAMEWORK_PROGRESS_RESYNC", default("FRAMEWORK_PROGRESS_RESYNC"))
        progress = cls(crawler, mode, interval, resync)
        crawler.signals.connect(progress.opened, signal=signals.spider_opened)
        # before the spider's own spider_closed handler closes the workspace
        crawler.signals.connect(progress.closed, signal=signals.engine_stopped)
        crawler.signals.connect(progress.closing, signal=signals.spider_closed)
        return progress

    # ---------------------------------------------------------------- lifecycle
    def opened(self, spider: Any) -> None:
        from scrapy.utils.asyncio import create_looping_call

        if self.mode == "live":
            self._start_live()
        self._task = create_looping_call(self.tick)
        self._task.start(self.interval, now=False)

    def closing(self, spider: Any, reason: str) -> None:
        self._stop_task()

    def closed(self) -> None:
        self._stop_task()
        self._stop_live()

    def _stop_task(self) -> None:
        if self._task is not None and self._task.running:
            self._task.stop()

    # --------------------------------------------------------------------- tick
    def tick(self) -> None:
        runtime = getattr(getattr(self.crawler, "spider", None), "runtime", None)
        if runtime is None:
            return
        now = time.monotonic()
        try:
            if not self.tally.synced() or now - self._synced_at >= self.resync:
                store = runtime.ws.store
                self.tally.sync(store.row_counts(), store.item_counts(), runtime.counters)
                self._synced_at = now
            snap = self.tally.snapshot(runtime.counters, now)
        except Exception:  # a closed or busy workspace: the crawl says what matters
            logger.debug("progress: workspace not readable now", exc_info=True)
            return
        self.show(snap)

    def show(self, snap: Snapshot) -> None:
        if self._live is not None:
            name = getattr(self.crawler.spider, "name", "crawl")
            self._live.update(f"{name}: {snap.line()}")
        else:
            logger.info("progress: %s", snap.line())

    # --------------------------------------------------------------------- live
    def _start_live(self) -> None:
        live = LiveLine(console=self._console)  # shared with reparse and ship
        live.start()
        self._live = live

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


# -------------------------------------------------------------------- summary
STATUSES = ("ok", "pending", "error")


def summary(result: CrawlResult) -> str:
    """The end of a crawl: how it ended, rows per kind and status, items."""
    lines = [f"{result.job}: {result.reason} (workspace {result.workspace})"]
    rows = result.rows
    width = max([len("kind"), len("total"), *(len(k) for k in rows)])
    lines.append(f"  {'kind':<{width}}" + "".join(f"{s:>9}" for s in STATUSES))
    totals = dict.fromkeys(STATUSES, 0)
    for kind in sorted(rows):
        counts = rows[kind]
        for s in STATUSES:
            totals[s] += counts.get(s, 0)
        lines.append(f"  {kind:<{width}}" + "".join(f"{counts.get(s, 0):>9}" for s in STATUSES))
    if len(rows) > 1:
        lines.append(f"  {'total':<{width}}" + "".join(f"{totals[s]:>9}" for s in STATUSES))
    complete = result.items.get("complete", 0)
    incomplete = result.items.get("incomplete", 0)
    lines.append(f"  items: {complete} complete, {incomplete} incomplete")
    return "\n".join(lines)
