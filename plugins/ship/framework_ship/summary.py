"""What a ship run reports: its :class:`ShipSummary` and its progress line.

Owns the counts of final outcomes, how they read (the summary line, the record of
``ship_finished`` and of the last run) and the live progress on stderr. It decides
nothing: :mod:`framework_ship.run` fills the counts in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from framework import progress

OUTCOME_ORDER = ("accepted", "updated", "duplicate", "skipped", "rejected", "error")
_SENT = ("accepted", "updated", "duplicate")  # the endpoint has the item


def sent(counts: Mapping[str, int]) -> int:
    """How many items the endpoint has, of those counted."""
    return sum(counts.get(k, 0) for k in _SENT)


@dataclass
class ShipSummary:
    counts: Counter[str] = field(default_factory=Counter)
    held: int = 0  # rejected earlier, same content: waits for review (--retry-rejected)
    elapsed: float = 0.0
    reason: str = "drained"
    exit_code: int = 0
    order: tuple[str, ...] = OUTCOME_ORDER  # the outcomes shown, in this order

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {k: self.counts.get(k, 0) for k in self.order},
            "held_rejected": self.held,
            "elapsed_s": round(self.elapsed, 3),
            "reason": self.reason,
            "exit_code": self.exit_code,
        }

    def line(self) -> str:
        parts = [f"{k} {self.counts.get(k, 0)}" for k in self.order]
        rate = sent(self.counts) / self.elapsed if self.elapsed > 0 else 0.0
        held = f" (held for review: {self.held})" if self.held else ""
        return (
            f"ship: {', '.join(parts)}{held}; {self.elapsed:.1f} s, {rate:.0f} items/s; "
            f"{self.reason}"
        )


class RunProgress:
    """The run's progress on stderr, as the crawl's (:mod:`framework.progress`): a live
    line on a terminal, a plain line every ``FRAMEWORK_PROGRESS_INTERVAL`` seconds
    elsewhere, none when quiet. Counts items with a verdict this run of those to look at."""

    def __init__(self, stream: TextIO, quiet: bool = False) -> None:
        self.stream = stream
        self.mode = progress.mode(quiet, stream)
        self._meter: progress.Meter | None = None
        self._counts: Counter[str] = Counter()

    def start(self, total: int | None) -> None:
        self._meter = progress.Meter(
            "ship",
            total,
            "items",
            self.mode,
            every=progress.interval(self.mode),
            stream=self.stream,
            detail=self._detail,
        ).start()

    def _detail(self) -> str:
        c = self._counts
        return (
            f"shipped {sent(c)}, skipped {c.get('skipped', 0)}, rejected "
            f"{c.get('rejected', 0)}, error {c.get('error', 0)}"
        )

    def update(self, summary: ShipSummary) -> None:
        if self._meter is not None:
            self._counts = summary.counts
            self._meter.update(sum(summary.counts.values()) + summary.held)

    def done(self) -> None:
        if self._meter is not None:
            self._meter.stop()
            self._meter = None


__all__ = ["OUTCOME_ORDER", "RunProgress", "ShipSummary", "sent"]
