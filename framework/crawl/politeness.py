"""Retry-After, honoured per host, for unattended runs.

A 429 or 503 with ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110) pushes that
host's "not before" time later; every later request to the host waits for it in
``process_request``, which also holds its download slot, so the crawl slows down
instead of hammering. A demand over ``FRAMEWORK_RETRY_AFTER_CAP`` is not slept
through: the response is marked, and the spider records the attempt and stops the run
as a checkpoint (come back later). The deadline only ever moves later.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.utils.asyncio import sleep

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

RATE_LIMIT_STATUSES = frozenset({429, 503})


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


class RetryAfterMiddleware:
    def __init__(self, cap: float, default: float) -> None:
        self.cap = cap
        self.default = default
        self.not_before: dict[str, float] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        return cls(
            cap=s.getfloat("FRAMEWORK_RETRY_AFTER_CAP", 120.0),
            default=s.getfloat("FRAMEWORK_RETRY_AFTER_DEFAULT", 5.0),
        )

    async def process_request(self, request: Request) -> None:
        host = urlsplit(request.url).netloc
        wait = self.not_before.get(host, 0.0) - time.monotonic()
        if wait > 0:
            await sleep(wait)

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
