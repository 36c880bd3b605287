"""A run's counts, and the error-rate breaker that reads them.

:class:`RunCounters` is what ``run_finished`` and the progress line report
(output.py); :class:`ErrorRateBreaker` trips when the failed share of the last
``FRAMEWORK_ERROR_RATE_WINDOW`` attempts is over ``FRAMEWORK_ERROR_RATE_MAX``.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.workspace.records import CommitResult, Outcome

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


@dataclass
class RunCounters:
    requests: int = 0
    ok: int = 0
    errors: int = 0
    rows_new: int = 0
    items_new: int = 0
    items_changed: int = 0
    items_unchanged: int = 0
    items_completed: int = 0
    records_invalid: int = 0
    items_invalid: int = 0  # broke a rule of the spec: held as invalid, not stored
    items_review: int = 0  # over a change limit: held as review_required
    fallbacks: int = 0
    responses_stored: int = 0
    commit_groups: int = 0  # transactions that committed responses' outcomes (group.py)
    fenced: int = 0  # outcomes refused: the row's lease was taken over (leases.py)
    by_error: dict[str, int] = field(default_factory=dict)

    def outcome(self, outcome: Outcome, res: CommitResult) -> None:
        """Count a committed outcome: its request, its result, its new rows and items."""
        if outcome.ok:
            self.ok += 1
        else:
            self.errors += 1
            key = str(outcome.error_kind)
            self.by_error[key] = self.by_error.get(key, 0) + 1
        self.rows_new += len(res.inserted)
        self.items_new += res.items_new

    def as_event(self) -> dict[str, Any]:
        """The counts of a crawl's ``run_finished`` event (its names, its order)."""
        return {
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "errors_by_kind": self.by_error,
            "rows_new": self.rows_new,
            "items_new": self.items_new,
            "items_changed": self.items_changed,
            "items_completed": self.items_completed,
            "records_invalid": self.records_invalid,
            "items_invalid": self.items_invalid,
            "items_review": self.items_review,
            "fallbacks": self.fallbacks,
            "responses_stored": self.responses_stored,
            "fenced": self.fenced,
        }


class ErrorRateBreaker:
    """Idle until its window of attempts is full; then tripped while more than
    ``rate_max`` of them failed. Says so once: the requests in flight when it tripped
    still arrive while Scrapy closes (it was one line per late answer, ~20 of them)."""

    def __init__(self, rate_max: float, window: int) -> None:
        self.rate_max = rate_max
        self._window: deque[bool] = deque(maxlen=max(1, window))
        self._said = False

    def tripped(self, ok: bool) -> bool:
        """Count one attempt; whether the breaker is tripped now."""
        window = self._window
        window.append(ok)
        if len(window) != window.maxlen:
            return False
        failed = window.count(False) / len(window)
        if failed <= self.rate_max:
            return False
        if not self._said:
            self._said = True
            logger.error(
                "error rate %.0f%% over the last %d requests: stopping (a human must look)",
                100 * failed,
                len(window),
            )
        return True
