"""The start-up heap, frozen while a run works.

A crawl or a reparse imports Scrapy, Twisted, pydantic and the spec's models, and
compiles the spec, before its first page: hundreds of thousands of objects that live as
long as the run. CPython's garbage collector walks all of them on each full collection,
which a run's own allocations set off every few thousand pages. ``gc.freeze()`` moves what
is alive into a generation the collector ignores (Python's own advice before a fork: the
reparse's workers inherit it). Frozen objects still die by reference counting; only a
frozen cycle that becomes garbage waits until :meth:`FrozenHeap.thaw`, which the run
calls at its end so that a caller's (a test's) later garbage stays collectable.
docs/benchmarks.md ("The garbage collector") has the measurements.
"""

from __future__ import annotations

import gc


class FrozenHeap:
    """Freezes the heap once and thaws only what it froze: a heap someone else froze
    (an embedding program, a run inside a run) is left to them."""

    __slots__ = ("_mine",)

    def __init__(self) -> None:
        self._mine = False

    def freeze(self) -> None:
        if not self._mine and gc.get_freeze_count() == 0:
            gc.freeze()
            self._mine = True

    def thaw(self) -> None:
        if self._mine:
            gc.unfreeze()
            self._mine = False


__all__ = ["FrozenHeap"]
