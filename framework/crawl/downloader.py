"""Scrapy's downloader with its per-host concurrency made to hold on asyncio.

Scrapy 2.19's ``Downloader._process_queue`` starts each download of a slot's queue in a
task (``_schedule_coro``) while it loops ``while slot.queue and
slot.free_transfer_slots() > 0``. On the asyncio reactor that task runs only after the
loop has finished, and the request enters ``slot.transferring`` only when it runs, so
the loop sees the same free count every time and starts the whole queue: measured on
the blocking fixture site, 8 pages in flight under ``CONCURRENT_REQUESTS_PER_DOMAIN:
2`` (tests/crawl/test_crawl_politeness_slots.py). On Twisted's reactor the coroutine runs at
once and the limit holds. A spec's per-host concurrency is politeness towards somebody
else's server, so it must hold: this class counts a request as transferring from the
moment its task is scheduled (``_download`` adds it again, a no-op on a set, and
removes it when the download ends).

Second change: a slot's queue is served by request priority (the first of the highest
priority, in arrival order among equals), where Scrapy's takes the oldest. The engine
moves requests from its scheduler to the downloader while fewer than
``CONCURRENT_REQUESTS`` are active in all, so under a lower per-host limit most of a
host's requests wait in this queue, and a priority given in the scheduler (the next
page of a list, ahead of the details it found: :mod:`framework.crawl.spider`) was lost
there: measured on the demo site with ``--processes 2``, the next list page waited
behind the ten details of the page before it, ~25 ms per page of the chain.

The loop is Scrapy's own otherwise, line for line; Scrapy is pinned to 2.19.x, and a
test compares the in-flight maximum at the site with the setting, so an upgrade that
changes the loop is noticed.
"""

from __future__ import annotations

from collections import deque
from time import monotonic
from typing import TYPE_CHECKING, Any

from scrapy.core.downloader import Downloader as ScrapyDownloader
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import _schedule_coro

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.core.downloader import Slot


class Downloader(ScrapyDownloader):
    def _process_queue(self, slot: Slot) -> None:
        if slot.latercall:
            return  # a delayed call will process the queue
        now = monotonic()
        delay = slot.download_delay()
        if delay:
            penalty = delay - now + slot.lastseen
            if penalty > 0:
                slot.latercall = call_later(penalty, self._latercall, slot)
                return
        while slot.queue and slot.free_transfer_slots() > 0:
            slot.lastseen = now
            request, queue_dfd = first_by_priority(slot.queue)
            # the first change: counted before its task runs (see the module docstring)
            slot.transferring.add(request)
            _schedule_coro(self._wait_for_download(slot, request, queue_dfd))
            if delay:
                self._process_queue(slot)
                break


def first_by_priority(queue: deque[tuple[Request, Any]]) -> tuple[Request, Any]:
    """Take the first entry of the highest request priority out of ``queue``: a slot's
    queue is a few requests (at most ``CONCURRENT_REQUESTS``), so a scan is cheap."""
    best = 0
    top = queue[0][0].priority
    for i, (request, _) in enumerate(queue):
        if request.priority > top:
            best, top = i, request.priority
    if best == 0:
        return queue.popleft()
    entry = queue[best]
    del queue[best]
    return entry
