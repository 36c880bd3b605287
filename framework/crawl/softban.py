"""Soft bans seen by the crawl: a page (or a refused redirect) that matches a
``blocked:`` rule (framework/crawl/blocking.py) is not committed; its row stays pending
with its attempts untouched, and the crawl stops as a checkpoint.

:class:`SoftBans` tells whether a response or a failure is one, logs the request (outcome
``blocked``, no attempt) and says the first match of the run once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from framework.crawl.blocking import REASON_BLOCKED, Block, Detector
from framework.workspace import ErrorKind, redact_url, utc_now

if TYPE_CHECKING:
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from framework.workspace import Row, Workspace

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


class SoftBans:
    def __init__(self, detector: Detector, ws: Workspace, event: Callable[..., None]) -> None:
        self.detector = detector
        self.ws = ws
        self.event = event
        self.first: Block | None = None  # the first page that matched a blocked rule

    def response(self, row: Row, response: Response) -> bool:
        """Is ``response`` a soft ban (then told, and the crawl is to stop)?"""
        if not self.detector:
            return False
        block = self.detector.check(row.kind, response)
        if block is None:
            return False
        self._told(row, block, response.url, response.status, len(response.body))
        return True

    def refused(self, row: Row, failure: Failure) -> bool:
        """The same for a redirect the crawl refused to follow (an off-site captcha)."""
        request = getattr(failure, "request", None)
        if not self.detector or request is None or not request.meta.get("redirect_urls"):
            return False
        if getattr(failure.value, "error_kind", None) is not ErrorKind.OFFSITE:
            return False
        block = self.detector.check_refused(row.kind, request.url)
        if block is None:
            return False
        self._told(row, block, request.url, None, 0)
        return True

    def _told(self, row: Row, block: Block, final_url: str, status: int | None, size: int) -> None:
        """The request is still logged (outcome ``blocked``, no attempt), and the first
        match of the run is an event and a warning naming the URL and the rule."""
        self.ws.urls.append(
            {
                "time": utc_now(),
                "method": row.method,
                "url": redact_url(row.url),
                "final_url": redact_url(final_url),
                "status": status,
                "bytes": size,
                "outcome": REASON_BLOCKED,
                "row": row.id,
                "kind": row.kind,
                "attempt": None,  # none was spent
            },
            redacted=True,
        )
        if self.first is not None:
            return
        self.first = block
        self.event(
            "blocked",
            row=row.id,
            kind=row.kind,
            url=redact_url(row.url),
            matched_url=redact_url(block.url),
            status=status,
            rule=block.rule,
        )
        logger.warning(
            "blocked: %s (%s) matched the blocked rule %s: stopping; the row stays "
            "pending, nothing of the page is stored (run again once the site lets "
            "the crawler in)",
            redact_url(row.url),
            redact_url(block.url) if block.url != row.url else f"HTTP {status}",
            block.rule,
        )
