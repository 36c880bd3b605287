"""Where a ship run's units run: a few daemon threads, or the calling thread.

Owns starting units and saying which have finished (:meth:`Workers.finished`). It
does not know what a unit does (:mod:`framework_ship.deliver`) nor what its result
means (:mod:`framework_ship.flight`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait

from framework.workspace import StoredItem
from framework_ship.deliver import UnitResult

RunUnit = Callable[[list[StoredItem]], UnitResult]


class Completed:
    """The finished unit of an inline run: what a Future says, without its lock and
    condition (one per item one by one)."""

    __slots__ = ("_exception", "_result")

    def __init__(self, result: UnitResult | None, exception: BaseException | None) -> None:
        self._result = result
        self._exception = exception

    def result(self) -> UnitResult:
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result


Pending = Future[UnitResult] | Completed


class Workers:
    """``n`` daemon threads running units, for what a ThreadPoolExecutor would do here.

    Daemon threads, because an aborted run (a second Ctrl-C) must not wait for a hung
    request's ``--timeout`` to end: an executor's workers are joined at exit. Normal
    ends join them; queued units that start after a stop find it set and send nothing."""

    def __init__(self, n: int) -> None:
        self._queue: queue.SimpleQueue[
            tuple[Future[UnitResult], RunUnit, list[StoredItem]] | None
        ] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"ship-{i}", daemon=True) for i in range(n)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: RunUnit, unit: list[StoredItem]) -> Future[UnitResult]:
        future: Future[UnitResult] = Future()
        self._queue.put((future, fn, unit))
        return future

    def finished(self, pending: Iterable[Pending], block: bool) -> Iterable[Pending]:
        """Of ``pending``, those done: at least one when ``block``."""
        done, _ = wait(
            list(pending),  # type: ignore[arg-type]  # futures of this pool
            timeout=None if block else 0,
            return_when=FIRST_COMPLETED,
        )
        return done

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            future, fn, unit = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(unit))
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        for _ in self._threads:
            self._queue.put(None)
        if exc_type is None:
            for thread in self._threads:
                thread.join()


class Inline:
    """Runs each unit in the calling thread. One by one at concurrency 1, a thread
    handoff (and a GIL hand-over) per item costs more than the overlap it buys."""

    def submit(self, fn: RunUnit, unit: list[StoredItem]) -> Completed:
        try:
            return Completed(fn(unit), None)
        except BaseException as exc:  # handed to the caller, as a pool's future would
            return Completed(None, exc)

    def finished(self, pending: Iterable[Pending], block: bool) -> Iterable[Pending]:
        return list(pending)  # ran in this thread: all finished

    def __enter__(self) -> Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def make_pool(concurrency: int, batch_size: int) -> Workers | Inline:
    """Threads, except one by one (concurrency 1, batch size 1): the calling thread."""
    if concurrency == 1 and batch_size == 1:
        return Inline()
    return Workers(concurrency)


__all__ = ["Completed", "Inline", "Pending", "RunUnit", "Workers", "make_pool"]
