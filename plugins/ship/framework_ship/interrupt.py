"""SIGINT and SIGTERM during a ship run.

Owns what a signal does to a run: the first one starts nothing new, gives the
requests in flight the stop grace to finish (then they are abandoned; logged either
way) and says what the run waits for; a second one aborts the wait at once
(:class:`~framework_ship.deliver.Aborted`, raised in the main thread). It installs its
handler only in the main thread and gives the previous ones back. It never sends and
never writes the log: the run and its client do.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from framework_ship.client import IngestClient
from framework_ship.deliver import Aborted


@dataclass(eq=False)
class StopSignals:
    """The handler of one run: sets ``stop`` and ``reason`` on the first signal.

    ``client`` is the run's client while it sends (its requests are the ones waited
    for); ``timeout`` and ``grace`` are the run's ``--timeout`` and ``--stop-grace``."""

    stop: threading.Event
    notice: Callable[[str], None]
    timeout: float
    grace: float
    reason: str | None = None  # "interrupted (SIGINT)" once one came
    client: IngestClient | None = None
    _aborting: bool = field(default=False, init=False)

    def install(self) -> dict[int, Any]:
        """This handler for SIGINT and SIGTERM (main thread only); the previous ones."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, self)
        return previous

    @staticmethod
    def restore(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def __call__(self, signum: int, frame: Any) -> None:
        """First SIGINT/SIGTERM: start nothing new, give what is in flight the stop grace
        to finish (then it is abandoned), log it either way, and say what the run waits
        for. Second: abort the wait at once."""
        name = signal.Signals(signum).name
        if self._aborting:
            return  # the abort is recording what it can
        if self.reason is not None:
            self._aborting = True
            # Raised in the main thread wherever it waits (a socket read one by one, the
            # pool's futures otherwise): the run records the stop and exits 3.
            raise Aborted(
                f"aborted ({name} twice): the answer waited for was abandoned; that "
                "delivery goes out again next run"
            )
        self.reason = f"interrupted ({name})"
        self.stop.set()
        if self.client is not None:
            self.client.stop_within(self.grace)
        self.notice(self._waiting_notice(name))

    def _waiting_notice(self, name: str) -> str:
        waiting = self.client.waiting() if self.client is not None else []
        if not waiting:
            return (
                f"interrupted ({name}): finishing the current step, then stopping; "
                f"{name} again to abort at once"
            )
        path, so_far, items = max(waiting, key=lambda w: w[1])
        others = f" (and {len(waiting) - 1} more requests)" if len(waiting) > 1 else ""
        timeout, grace = self.timeout, self.grace
        left = max(0.0, timeout - so_far)
        if left < grace:
            bound = f"its --timeout ends it within {left:.0f} s"
        else:
            bound = f"it gets {grace:g} s more (--stop-grace), then it is abandoned"
        return (
            f"interrupted ({name}): waiting for the answer to POST {path} "
            f"({items} item{'s' if items != 1 else ''}, {so_far:.0f} s so far{others}, "
            f"--timeout {timeout:g} s); {bound}; logged either way, then the run stops; "
            f"{name} again to abort at once"
        )


__all__ = ["StopSignals"]
