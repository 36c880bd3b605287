"""The ok pages' bodies the crawl keeps for `framework reparse`, within the
workspace's budget (``FRAMEWORK_RESPONSES_BUDGET_MB``): once the stored bodies reach it,
the pages fetched from then on are not stored (said once; those stored stay)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from framework.workspace.records import ResponseWrite

if TYPE_CHECKING:
    from scrapy.http import Response

    from framework.crawl.counters import RunCounters
    from framework.crawl.secrets import Secrets
    from framework.workspace import Row

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


class ResponseKeeper:
    def __init__(
        self,
        storing: bool,
        budget: int,
        secrets: Secrets,
        counters: RunCounters,
        event: Callable[..., None],
    ) -> None:
        self.storing = storing
        self.budget = budget  # bytes of stored (compressed) bodies; 0: no budget
        self.secrets = secrets
        self.counters = counters
        self.event = event
        self.stored_bytes = 0  # the workspace's, once the run began

    def keep(self, row: Row, response: Response) -> ResponseWrite:
        """The response as the store keeps it: no secret value (a page may echo one)."""
        body = response.body
        final_url = response.url
        if self.secrets.values:
            # surrogateescape: any bytes round-trip unchanged where nothing is masked
            text = body.decode("utf-8", "surrogateescape")
            body = self.secrets.mask(text).encode("utf-8", "surrogateescape")
            final_url = self.secrets.mask(final_url)
        ctype = response.headers.get(b"Content-Type")
        return ResponseWrite(
            url=row.url,
            final_url=final_url,
            status=response.status,
            content_type=ctype.decode("latin-1") if ctype else None,
            body=body,
        )

    def stored(self, size: int) -> None:
        """A kept body was committed, ``size`` bytes as stored."""
        self.counters.responses_stored += 1
        self.stored_bytes += size
        budget = self.budget
        if budget and self.stored_bytes >= budget and self.storing:
            self.storing = False  # said once: the pages stored so far stay
            mb = budget / 2**20
            logger.warning(
                "stored responses reached FRAMEWORK_RESPONSES_BUDGET_MB (%.0f MB): the "
                "pages fetched from now on are not stored (`framework reparse` skips them)",
                mb,
            )
            self.event("responses_budget_reached", budget_mb=mb, stored_bytes=self.stored_bytes)
