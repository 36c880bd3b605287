"""How a crawl stops early and still leaves an exact workspace: signals and disk faults.

Owns two stops that Scrapy alone gets wrong for a resumable crawl:

* **Signals** (:class:`SignalStop`). Scrapy's first SIGINT/SIGTERM waits for every
  request in flight, so one slow-drip response holds the stop for the whole download
  timeout and then records the row as a ``timeout`` error; its second signal stops the
  reactor before the spider closes, so the run is never recorded. Here the first signal
  asks Scrapy to stop gracefully and gives requests in flight :data:`GRACE_S` seconds;
  past that, or at a second signal, the run is recorded (``run_finished``, reason
  ``shutdown`` or ``aborted``, exit 3) and the reactor is stopped at once. A response
  that never came committed nothing, so its row stays ``pending``: nothing is lost and
  the next run fetches it.
* **A full disk or a damaged state file** (:func:`stops_on_workspace_fault`): the
  commit that failed was rolled back, so its row stays ``pending``; the crawl stops at
  that first failure (reason ``disk_full`` or ``workspace_broken``, exit 4) instead of
  failing every later response with a traceback.

It never decides what a row's outcome is (the runtime does) and never writes the
workspace itself: it asks the runtime to close.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from scrapy import signals
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.ossignal import install_shutdown_handlers, signal_names

from framework.crawl.verdict import REASON_ABORTED, REASON_BROKEN, REASON_DISK_FULL
from framework.errors import WorkspaceBroken, WorkspaceFull
from framework.settings import default

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

GRACE_S = default("FRAMEWORK_STOP_GRACE")  # what requests in flight get at a stop
REASON_SHUTDOWN = "shutdown"

F = TypeVar("F", bound=Callable[..., Any])
_BY_CRAWLER: weakref.WeakKeyDictionary[Crawler, SignalStop] = weakref.WeakKeyDictionary()


def stops_on_workspace_fault(method: F) -> F:
    """Decorate the runtime's commit step: a :class:`~framework.errors.WorkspaceFull` or
    :class:`~framework.errors.WorkspaceBroken` becomes a stop of the crawl (the
    runtime's ``Handled`` with its ``stop`` reason) and is kept as the runtime's
    ``workspace_fault``, the one line the crawl command prints."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (WorkspaceFull, WorkspaceBroken) as exc:
            from framework.crawl.handled import Handled

            if getattr(self, "workspace_fault", None) is None:
                self.workspace_fault = exc
            return Handled(
                stop=REASON_DISK_FULL if isinstance(exc, WorkspaceFull) else REASON_BROKEN
            )

    return cast(F, wrapper)


class SignalStop:
    """SIGINT/SIGTERM handling for one crawler: a Scrapy extension (enabled in every
    job's settings), so ``framework crawl`` and ``scrapy crawl`` stop alike. Its handlers
    replace Scrapy's once the engine has started (Scrapy installs its own when the
    reactor starts, which is earlier)."""

    def __init__(self, crawler: Crawler, grace: float = GRACE_S) -> None:
        self.crawler = crawler
        self.grace = grace
        self.signals = 0
        self.forced: str | None = None  # the reason of a stop that did not wait
        self._timer: Any = None
        self._first_at: float | None = None  # monotonic time of the first signal

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SignalStop:
        stop = cls(crawler, crawler.settings.getfloat("FRAMEWORK_STOP_GRACE", GRACE_S))
        crawler.signals.connect(stop._engine_started, signal=signals.engine_started)
        _BY_CRAWLER[crawler] = stop
        return stop

    @classmethod
    def of(cls, crawler: Crawler) -> SignalStop | None:
        """The extension of ``crawler``, if it was enabled."""
        return _BY_CRAWLER.get(crawler)

    def _engine_started(self) -> None:
        # on the next turn of the loop, surely after the reactor's startup triggers
        # (where Scrapy installs its handlers)
        call_later(0, self.install)

    def install(self) -> None:
        install_shutdown_handlers(self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Nothing may log or touch the reactor's state inside a signal handler: hand
        # the work to the reactor thread, as Scrapy's own handlers do.
        from twisted.internet import reactor

        self.signals += 1
        if self._first_at is None:
            self._first_at = time.monotonic()
        step = self._stop if self.signals == 1 else self._abort
        reactor.callFromThread(step, signal_names.get(signum, str(signum)))

    def past_grace(self) -> bool:
        """True once a stop no longer waits for pages: a second signal, or the grace
        over. The runtime then reads no more downloaded pages (their rows stay pending).
        The timer that forces the stop cannot fire while the reactor's thread is busy
        reading pages one after another (each may take FRAMEWORK_EXTRACT_TIMEOUT of
        regex work), so the clock is read here instead of waiting for it."""
        if self.signals == 0 or self._first_at is None:
            return False
        return self.signals > 1 or time.monotonic() - self._first_at >= self.grace

    def _stop(self, name: str) -> None:
        logger.warning(
            "%s received: stopping; requests in flight get %.0fs to answer, the rest stay "
            "pending (send it again to stop at once)",
            name,
            self.grace,
        )
        self._timer = call_later(self.grace, self._force, REASON_SHUTDOWN)
        # stop_async, not stop(): Scrapy 2.19 deprecates stop() and warned on every Ctrl-C
        stopping = deferred_from_coro(self.crawler.stop_async())
        stopping.addErrback(lambda failure: logger.debug("stop: %s", failure))

    def _abort(self, name: str) -> None:
        logger.warning("%s received again: stopping now; requests in flight stay pending", name)
        self._force(REASON_ABORTED)

    def _force(self, reason: str) -> None:
        """Record the run and stop the reactor without waiting for anything in flight."""
        from twisted.internet import reactor

        if self.forced is not None:
            return
        self.forced = reason
        if self._timer is not None:
            self._timer.cancel()  # does nothing once it fired
        spider: Any = getattr(self.crawler, "spider", None)
        runtime = getattr(spider, "runtime", None)
        if runtime is not None and type(spider).close_reason is None:
            # the spider did not close yet (it would have recorded the run): do it now
            type(spider).close_reason = runtime.close(reason)
        # The reactor's shutdown would stop its thread pool; crash() skips it, and an
        # idle pool thread would keep the process from exiting.
        pool = getattr(reactor, "threadpool", None)
        if pool is not None:
            pool.stop()
        # crash, not stop: stop() runs Scrapy's shutdown, which waits for downloads
        reactor.crash()  # type: ignore[misc]


__all__ = ["GRACE_S", "SignalStop", "stops_on_workspace_fault"]
