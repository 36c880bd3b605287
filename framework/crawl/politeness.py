"""Retry-After, honoured per host, for unattended runs.

A 429 or 503 with ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110) pushes that
host's "not before" time later; every later request to the host waits for it in
``process_request``, which also holds its download slot, so the crawl slows down
instead of hammering. A demand over ``FRAMEWORK_RETRY_AFTER_CAP`` is not slept
through: the response is marked, and the spider records the attempt and stops the run
as a checkpoint (come back later). The deadline only ever moves later, and the runtime
keeps it in the workspace: a restarted crawl waits for it (or, when it is still over the
cap, stops before sending anything), so a cron loop cannot hammer a site that asked it
to wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.asyncio import sleep

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

RATE_LIMIT_STATUSES = frozenset({429, 503})
WAIT_SLICE = 0.25  # seconds


def _engine_closing(crawler: Crawler) -> bool:
    # Scrapy has no public "closing" flag or signal before spider_closed; its engine
    # slot's `closing` is set the moment close_spider starts (SIGINT, a stop, the end).
    slot = getattr(crawler.engine, "_slot", None)
    return slot is not None and getattr(slot, "closing", None) is not None


def parse_retry_after(value: str | bytes | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value, or None when absent or unreadable."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 HTTP-dates are GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Abandoned(IgnoreRequest):
    """A request dropped unsent because the crawl is stopping; its row stays pending."""


class RetryAfterMiddleware:
    def __init__(
        self, cap: float, default: float, is_closing: Callable[[], bool] = lambda: False
    ) -> None:
        self.cap = cap
        self.default = default
        self.is_closing = is_closing
        self.not_before: dict[str, float] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        return cls(
            cap=s.getfloat("FRAMEWORK_RETRY_AFTER_CAP", 120.0),
            default=s.getfloat("FRAMEWORK_RETRY_AFTER_DEFAULT", 5.0),
            is_closing=lambda: _engine_closing(crawler),
        )

    async def process_request(self, request: Request) -> None:
        # Wait in slices: the deadline may move later meanwhile, and a crawl that is
        # stopping must not sit out a Retry-After for requests it will never send.
        while (wait := self._wait(request)) > 0:
            if self.is_closing():
                raise Abandoned(f"stopping: not waiting {wait:.0f}s for Retry-After")
            await sleep(min(wait, WAIT_SLICE))

    def _wait(self, request: Request) -> float:
        host = urlsplit(request.url).netloc
        wait = self.not_before.get(host, 0.0) - time.monotonic()
        earlier_run = request.meta.get("fw_not_before")  # epoch seconds, kept in the workspace
        if earlier_run is not None:
            wait = max(wait, float(earlier_run) - time.time())
        return wait

    def process_response(self, request: Request, response: Response) -> Response:
        if response.status not in RATE_LIMIT_STATUSES:
            return response
        asked = parse_retry_after(response.headers.get(b"Retry-After"))
        if asked is None and response.status == 503:
            return response  # a plain outage, not a rate limit: the row's attempts apply
        delay = self.default if asked is None else asked
        # The response is not bound to its request yet; the spider reads these through
        # response.meta, which is the request's meta.
        request.meta["fw_retry_after"] = delay
        if delay > self.cap:
            request.meta["fw_retry_after_over_cap"] = True
            return response
        host = urlsplit(request.url).netloc
        self.not_before[host] = max(self.not_before.get(host, 0.0), time.monotonic() + delay)
        return response
