"""The units of a ship run that were handed to its pool and not yet collected.

Owns what the run learns from a finished unit: its items' final outcomes counted into
the summary, the first few rejections kept to be named at the end, the error-rate
breaker over the last ``--error-window`` items, and which stop reason wins when
several units stop at once. It keeps the run's one rule on keys: no key is in two
units in flight (:meth:`InFlight.__contains__` tells the run to wait). It never sends
(the pool's units do) and never decides what to ship (:mod:`framework_ship.run`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from framework.errors import FrameworkError, Halted
from framework.workspace import StoredItem
from framework_ship.classify import Outcome
from framework_ship.deliver import Interrupted, UnitResult
from framework_ship.pool import Inline, Pending, RunUnit, Workers
from framework_ship.summary import ShipSummary

SHOWN_REJECTIONS = 5  # rejections named on stderr at the end of a run


@dataclass(eq=False)
class InFlight:
    """Units submitted to ``pool`` running ``run_unit``, collected into ``summary``.

    ``stop_error`` is the run's stop reason so far (the run may set it too, e.g. at
    ``--max-items``); a unit's stop or a tripped breaker sets ``stop``. ``rejected``
    keeps the first few rejections of the run (key -> the server's detail)."""

    pool: Workers | Inline
    run_unit: RunUnit
    summary: ShipSummary
    error_window: int
    max_error_rate: float
    stop: threading.Event
    rejected: dict[str, str | None]
    on_collect: Callable[[ShipSummary], None] = lambda summary: None
    stop_error: FrameworkError | None = None
    _window: deque[bool] = field(init=False)
    _units: dict[Pending, list[StoredItem]] = field(default_factory=dict, init=False)
    _keys: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._window = deque(maxlen=self.error_window)

    def __len__(self) -> int:
        return len(self._units)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def submit(self, unit: list[StoredItem]) -> None:
        self._units[self.pool.submit(self.run_unit, unit)] = unit
        self._keys.update(i.dedupe_key for i in unit)

    def drain(self) -> None:
        while self._units:
            self.collect(block=True)

    def collect(self, block: bool) -> None:
        """Take in the finished units (waiting for one when ``block``)."""
        if not self._units:
            return
        for pending in self.pool.finished(self._units, block):
            items = self._units.pop(pending)
            for item in items:
                self._keys.discard(item.dedupe_key)
            self._take(items, pending.result())
        self.on_collect(self.summary)

    def _take(self, items: list[StoredItem], result: UnitResult) -> None:
        for key, detail in result.rejected.items():
            if len(self.rejected) < SHOWN_REJECTIONS:
                self.rejected[key] = detail
        for item in items:
            outcome = result.final.get(item.dedupe_key)
            if outcome is None:
                continue  # never finished (stopped): no verdict this run
            self.summary.counts[outcome] += 1
            self._window.append(outcome in (Outcome.ERROR, Outcome.REJECTED))
        if result.stop is not None and rank(result.stop) > rank(self.stop_error):
            self.stop_error = result.stop
            self.stop.set()
        window = self._window
        if self.stop_error is None and len(window) >= self.error_window:
            bad = sum(window) / len(window)
            if bad > self.max_error_rate:
                self.stop_error = Halted(
                    f"error/rejection rate {bad:.0%} over the last {len(window)} "
                    f"items exceeds --max-error-rate {self.max_error_rate:.0%}"
                )
                self.stop.set()


def rank(error: FrameworkError | None) -> int:
    """Which stop reason the run reports when several units stop at once: a halt over
    a checkpoint, and the cause over the "interrupted" of the units it stopped."""
    if error is None:
        return 0
    if isinstance(error, Halted):
        return 3
    if isinstance(error, Interrupted):
        return 1
    return 2


__all__ = ["SHOWN_REJECTIONS", "InFlight", "rank"]
