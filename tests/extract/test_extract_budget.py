"""The page's regex budget (framework/extract/patterns.py): a clock that starts at the
page's first regex and counts only the extracting thread's CPU."""

from __future__ import annotations

import threading
import time

import pytest

from framework.extract import patterns
from framework.extract.patterns import LimitExceeded, Limits, budget, page_budget


def test_outside_a_page_there_is_no_deadline() -> None:
    assert budget().timeout("regex 'x'") is None


def test_a_page_reads_no_clock_until_its_first_regex(monkeypatch) -> None:
    reads: list[str] = []
    monkeypatch.setattr(patterns.time, "thread_time", lambda: reads.append("t") or 100.0)
    with page_budget(Limits(timeout=2.0)) as b:
        assert b.deadline is None
        assert reads == []  # a page without regexes never asks
        assert b.timeout("regex 'a'") == pytest.approx(2.0)
        assert b.deadline == pytest.approx(102.0)
        assert b.timeout("regex 'b'") == pytest.approx(2.0)  # the same deadline
    assert len(reads) == 2


def test_the_page_spends_its_budget_and_then_fails(monkeypatch) -> None:
    now = [50.0]
    monkeypatch.setattr(patterns.time, "thread_time", lambda: now[0])
    with page_budget(Limits(timeout=1.0)) as b:
        b.timeout("regex 'a'")
        now[0] += 0.6
        assert b.timeout("regex 'a'") == pytest.approx(0.4)
        now[0] += 0.5
        with pytest.raises(LimitExceeded, match="FRAMEWORK_EXTRACT_TIMEOUT"):
            b.timeout("regex 'a'")


def test_other_threads_do_not_spend_the_page_budget() -> None:
    """The crawl's commit and checkpoint threads run beside the parse: their CPU is
    not the page's (a process clock would count it)."""

    def burn() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.4:  # 0.4 s of this thread's CPU
            pass

    with page_budget(Limits(timeout=0.25)) as b:
        b.timeout("regex 'a'")
        other = threading.Thread(target=burn)
        other.start()
        other.join()
        left = b.timeout("regex 'a'")
    assert left is not None
    assert left > 0
