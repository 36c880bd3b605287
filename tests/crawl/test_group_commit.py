"""Group commit (framework/crawl/group.py): responses that arrive together share one
transaction, and a kill loses exactly the outcomes still waiting for theirs.

The kill test holds one answer back on the site, so a group waits (its window is made
long) while the other groups commit; the crawl is killed with SIGKILL there. The
workspace, the URL log and the site's own counters must then agree: the rows of the
committed requests are ok and are never asked for again, and the resume repeats exactly
the requests whose outcomes were not committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from framework.crawl.group import GroupCommit
from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, url_log
from tests.fixtures.hold_site import HoldSite

N = 10
HELD = f"/item/{N}"
SPEC = """\
name: held
source_type: held
start_urls: ["{base}/list"]
list:
  follow: "a.item::attr(href)"
detail:
  id: {{css: "#id::text", required: true}}
  fields:
    title: "h1::text"
"""


def _spec(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "projects" / "held" / "job.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(SPEC.format(base=base))
    return path


def _wait(what: Callable[[], bool], timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            raise AssertionError("the crawl never got there")
        time.sleep(0.05)


def _pages(counts: Counter[str]) -> Counter[str]:
    """The site's counters without robots.txt (asked by every run, not a row)."""
    return Counter({p: n for p, n in counts.items() if p != "/robots.txt"})


def _rows(ws: Path) -> dict[str, RowStatus]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return {r.url: r.status for r in w.store.iter_rows()}


@pytest.mark.kill
def test_a_kill_during_a_group_repeats_exactly_the_uncommitted_requests(
    hold_site: Callable[[int, set[str]], HoldSite], tmp_path: Path
) -> None:
    site = hold_site(N, {HELD})
    spec = _spec(tmp_path, site.url)
    ws = tmp_path / "ws"
    proc = procs.popen(
        [
            *CLI,
            "crawl",
            str(spec),
            "--workspace",
            str(ws),
            "-L",
            "WARNING",
            # groups of 4, and a window no test waits out: only a full group commits
            "-s",
            "FRAMEWORK_COMMIT_BATCH=4",
            "-s",
            "FRAMEWORK_COMMIT_WINDOW_MS=600000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # every item answered but the held one, which is in flight
        _wait(lambda: sum(_pages(site.counts()[1]).values()) == N)  # the list and N-1 items
        _wait(lambda: site.counts()[0][HELD] == 1)
        # the two full groups (8 items) are committed; a ninth answer waits for its group
        _wait(lambda: (ws / "urls.jsonl").exists() and len(url_log(ws)) >= 1 + 8)
        time.sleep(1.0)  # what would still commit, if the group did not wait, has time to
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()

    hits_at_kill, served_at_kill = map(_pages, site.counts())
    first = url_log(ws)
    committed = {line["url"].removeprefix(site.url) for line in first}
    assert all(line["outcome"] == "ok" for line in first)
    assert len(first) == len(committed)
    asked = set(hits_at_kill)
    uncommitted = asked - committed
    # the kill came during a group: answers that arrived were not committed yet ...
    assert served_at_kill.keys() - committed, (sorted(committed), served_at_kill)
    # ... and the held request was in flight
    assert HELD in uncommitted
    # a row is ok exactly when its request is in the URL log; the others stay pending
    rows = {u.removeprefix(site.url): st for u, st in _rows(ws).items()}
    assert {p for p, st in rows.items() if st is RowStatus.OK} == committed
    assert {p for p, st in rows.items() if st is not RowStatus.OK} == uncommitted
    assert all(rows[p] is RowStatus.PENDING for p in uncommitted)

    site.release()
    done = procs.run(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    hits = _pages(site.counts()[0])
    repeated = {p for p, n in hits.items() if n > 1}
    assert repeated == uncommitted
    assert all(hits[p] == 2 for p in uncommitted)
    # the resume's URL log lines name exactly the repeated requests
    second = url_log(ws)[len(first) :]
    assert {line["url"].removeprefix(site.url) for line in second} == uncommitted
    assert len(second) == len(uncommitted)
    assert set(_rows(ws).values()) == {RowStatus.OK}


def test_a_group_commits_at_its_size_and_when_nothing_more_is_coming() -> None:
    """Without a reactor the window cannot run: the buffer commits what it is given at
    once, unless told that more is coming and the group is not full yet."""
    calls: list[list[int]] = []

    def commit(entries: Sequence[int]) -> list[int]:
        calls.append(list(entries))
        return [e * 10 for e in entries]

    group: GroupCommit[int, int] = GroupCommit(commit, window_s=60.0, batch=3)
    group.may_wait = lambda work, waiting: False
    first = group.add(1)
    assert first.done
    assert first.result == 10
    assert calls == [[1]]
    # a reactor that is not running cannot time the window: committed at once as well
    group.may_wait = lambda work, waiting: True
    second = group.add(2)
    assert second.done
    assert second.result == 20
    assert calls == [[1], [2]]


@pytest.mark.parametrize("batch", [1, 0])
def test_a_batch_of_one_commits_each_outcome_alone(batch: int) -> None:
    calls: list[list[str]] = []

    def commit(entries: Sequence[str]) -> list[str]:
        calls.append(list(entries))
        return [e.upper() for e in entries]

    group: GroupCommit[str, str] = GroupCommit(commit, window_s=60.0, batch=batch)
    assert [group.add(e).result for e in "ab"] == ["A", "B"]
    assert calls == [["a"], ["b"]]


class _Timer:
    """A timer the test fires by hand, as the reactor would after the window."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.cancelled = False

    def active(self) -> bool:
        return not self.cancelled

    def cancel(self) -> None:
        self.cancelled = True


def test_a_group_waits_for_its_size_or_its_window_and_each_waiter_gets_its_own_result() -> None:
    calls: list[list[int]] = []
    timers: list[_Timer] = []

    def commit(entries: Sequence[int]) -> list[int]:
        calls.append(list(entries))
        return [e * 10 for e in entries]

    def later(delay: float, fn: Callable[[], object]) -> _Timer:
        assert delay == 60.0
        timers.append(_Timer(fn))
        return timers[-1]

    group: GroupCommit[int, int] = GroupCommit(commit, window_s=60.0, batch=3, call_later=later)
    a, b = group.add(1), group.add(2)
    assert not a.done
    assert not b.done
    assert calls == []
    assert len(timers) == 1  # one window for the group
    got: list[int] = []
    b.deferred().addCallback(got.append)
    c = group.add(3)  # the third fills the group: committed now, all three
    assert calls == [[1, 2, 3]]
    assert (a.result, b.result, c.result) == (10, 20, 30)
    assert got == [20]
    assert timers[0].cancelled
    d = group.add(4)
    assert not d.done
    timers[-1].fn()  # the window ends
    assert d.done
    assert d.result == 40
    assert calls[-1] == [4]
    # rows found wait only while the spider says the downloader has enough meanwhile
    group.may_wait = lambda work, waiting: not work
    group.add(5)
    assert calls[-1] == [4]
    group.add(6, work=True)
    assert calls[-1] == [5, 6]
    group.add(7)
    group.flush()  # a stop or the close
    assert calls[-1] == [7]
    assert group.flushes == {"full": 1, "window": 1, "no_wait": 1, "asked": 1}


def test_a_failed_group_commit_fails_every_waiter_of_the_group() -> None:
    def commit(entries: Sequence[int]) -> list[int]:
        raise OSError("disk on fire")

    group: GroupCommit[int, int] = GroupCommit(
        commit, window_s=60.0, batch=2, call_later=lambda d, fn: _Timer(fn)
    )
    first = group.add(1)
    errors: list[BaseException] = []
    first.deferred().addErrback(lambda f: errors.append(f.value))
    with pytest.raises(OSError, match="disk on fire"):
        group.add(2)
    assert isinstance(errors[0], OSError)
    assert first.done
    assert first.result is None


def test_the_window_defaults_by_workspace_and_a_bad_one_is_a_usage_error() -> None:
    from framework.crawl.group import DB_WINDOW_MS, WINDOW_MS
    from framework.crawl.runtime import commit_window_ms
    from framework.errors import UsageError

    # a commit to a database is several round trips: its groups wait longer by default
    assert commit_window_ms(None, database=False) == WINDOW_MS == 5.0
    assert commit_window_ms(None, database=True) == DB_WINDOW_MS == 50.0
    assert commit_window_ms("20", database=True) == 20.0  # -s wins on either
    assert commit_window_ms(0, database=False) == 0.0  # one transaction per response
    with pytest.raises(UsageError, match="FRAMEWORK_COMMIT_WINDOW_MS"):
        commit_window_ms("soon", database=False)
