"""framework/heap.py: the run freezes the heap once and thaws only its own freeze."""

from __future__ import annotations

import gc
import weakref

import pytest

from framework.heap import FrozenHeap


@pytest.fixture(autouse=True)
def _thawed():
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


def test_freeze_then_thaw() -> None:
    heap = FrozenHeap()
    kept = [object() for _ in range(10)]  # alive now: frozen with the rest
    heap.freeze()
    assert gc.get_freeze_count() >= len(kept)
    heap.freeze()  # a second call changes nothing
    heap.thaw()
    assert gc.get_freeze_count() == 0
    heap.thaw()  # nor does a second thaw
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_someone_else_is_left_to_them() -> None:
    gc.freeze()
    theirs = gc.get_freeze_count()
    heap = FrozenHeap()
    heap.freeze()
    heap.thaw()
    assert gc.get_freeze_count() == theirs


def test_frozen_cyclic_garbage_waits_for_the_thaw() -> None:
    """Why the run thaws at its end: a cycle frozen while alive is not collected."""

    class Node:
        other: Node

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    heap = FrozenHeap()
    heap.freeze()
    del a, b
    gc.collect()
    assert gone() is not None  # frozen: the collector did not look at the cycle
    heap.thaw()
    gc.collect()
    assert gone() is None


# A crawl in its own process (Twisted's reactor cannot restart), with FrozenHeap watched:
# the crawl freezes once its start-up is done and thaws when it closes.
_WATCHED_CRAWL = """
import gc, sys
from framework import heap
real_freeze, real_thaw = heap.FrozenHeap.freeze, heap.FrozenHeap.thaw
def freeze(self):
    real_freeze(self)
    print("froze", gc.get_freeze_count() > 1000, flush=True)
def thaw(self):
    real_thaw(self)
    print("thawed", gc.get_freeze_count(), flush=True)
heap.FrozenHeap.freeze, heap.FrozenHeap.thaw = freeze, thaw
from framework.cli import main
code = main(sys.argv[1:])
sys.exit(code)
"""


@pytest.mark.process
def test_a_crawl_freezes_after_start_up_and_thaws_at_its_end(make_site, tmp_path) -> None:
    import sys

    from tests.fixtures import procs
    from tests.fixtures.site import write_good_spec

    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    argv = ["crawl", str(spec), "--workspace", str(tmp_path / "ws"), "-q"]
    proc = procs.run(
        [sys.executable, "-c", _WATCHED_CRAWL, *argv],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 4, proc.stderr[-2000:]  # the fixture site's broken pages
    assert proc.stdout.split("\n")[:2] == ["froze True", "thawed 0"]
