"""Hosts that stopped answering: connect and DNS failures in a row (failures.py's
``HOST_FAILURES``) on one host make it *down*, and the crawl stops as a checkpoint.

A host that is down says nothing about its rows: the attempts of the outage are given
back (the runtime refunds :meth:`Outages.failed`'s rows), so the next run tries them
with a full budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from framework.workspace import redact_url

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


class Outages:
    def __init__(self, down_after: int, max_attempts: int) -> None:
        # One row's attempts are enough to tell (a job with one start URL), whatever
        # the setting says.
        self.down_after = max(1, min(down_after, max_attempts))
        # host -> row ids of its latest connect/dns failures with no answer since; the
        # runtime pops a host that answered (inline: once per response)
        self.streaks: dict[str, list[int]] = {}
        self.down: set[str] = set()

    def failed(self, host: str, row_id: int) -> tuple[list[int], bool] | None:
        """Count a connect/dns failure of ``host``: None while it is not down, else its
        streak (the rows whose attempts to give back) and whether it went down now."""
        streak = self.streaks.setdefault(host, [])
        streak.append(row_id)
        newly = host not in self.down and len(streak) >= self.down_after
        if newly:
            self.down.add(host)
        if host not in self.down:
            return None
        return streak, newly

    def tell(
        self, host: str, kind: Any, detail: str, streak: list[int], event: Callable[..., None]
    ) -> None:
        """Say that ``host`` went down (an event and a warning), once."""
        event(
            "host_down",
            host=host,
            error_kind=str(kind),
            error=detail,
            attempts=len(streak),
            rows=sorted(set(streak)),
        )
        logger.warning(
            "%s: %d attempts in a row failed (%s: %s): stopping, the rows stay "
            "retryable (run again later)",
            redact_url(f"http://{host}"),
            len(streak),
            kind,
            detail,
        )
