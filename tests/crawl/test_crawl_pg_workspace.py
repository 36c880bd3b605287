"""`Workspace.open(postgresql://...)`: the folder workspace's API on a database.

The logs are a table whose lines name their worker and keep the JSONL log's redaction;
the locks are advisory locks that a killed holder leaves behind for nobody (the server
drops them with its connection), shared for crawl workers and exclusive for `requeue`;
the hosts' Retry-After deadline and request slots are shared by every connection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from framework.errors import LockHeld, WorkspaceError
from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg


@pytest.fixture
def pg_url(make_workspace_backend: Callable[[str], Backend]) -> str:
    return make_workspace_backend("postgres").where


def test_logs_are_a_table_whose_lines_name_their_worker(pg_url: str) -> None:
    with Workspace.open(pg_url) as ws:
        assert ws.is_database
        assert ws.where.startswith("postgresql://")
        ws.urls.append({"url": "http://h/?token=abc", "worker": 7})
        ws.urls.append_many([{"url": f"http://h/{n}"} for n in range(3)])
        ws.events.append({"event": "run_started"})
        lines = list(ws.urls)
        assert [line["url"] for line in lines] == [
            "http://h/?token=[redacted]",
            "http://h/0",
            "http://h/1",
            "http://h/2",
        ]
        assert ws.urls.tail(2) == lines[-2:]
        assert list(ws.events) == [{"event": "run_started"}]
        workers = [
            w
            for (w,) in ws.store._conn().execute(
                "SELECT worker FROM log_lines WHERE log = 'urls' ORDER BY id"
            )
        ]
    assert workers[0] == "7"
    assert workers[1] == f"{os.uname().nodename}:{os.getpid()}"
    with Workspace.open(pg_url, readonly=True) as ro:
        assert len(list(ro.urls)) == 4


def test_logs_read_newest_first_across_pages(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("framework.workspace.pg_workspace.PAGE", 3)  # several pages
    with Workspace.open(pg_url) as ws:
        assert ws.events.last({"run_finished"}) is None
        ws.events.append_many([{"event": "run_finished", "n": n} for n in range(7)])
        ws.events.append({"event": "items_changed"})
        ws.urls.append({"url": "http://h/other-log"})  # another log's lines are not read
        assert [e.get("n") for e in ws.events.newest_first()] == [None, 6, 5, 4, 3, 2, 1, 0]
        assert ws.events.last({"run_finished"}) == {"event": "run_finished", "n": 6}
        assert ws.events.last({"items_changed"}) == {"event": "items_changed"}
        assert [e["n"] for e in ws.events.newest_first({"run_finished"})] == [6, 5, 4, 3, 2, 1, 0]
        assert list(ws.events.newest_first(set())) == []
        # a line that is not a record (hand-edited) is counted either way, as in a file
        ws.store._conn().execute(
            "INSERT INTO log_lines (log, worker, time, record) VALUES ('events', 'w', 't', '[1')"
        )
        for read in (ws.events.newest_first, ws.events.read, ws.events.newest_first):
            assert len(list(read())) == 8
            assert ws.events.skipped == 1  # each read counts its own


def test_a_database_without_a_workspace_is_refused_read_only(
    make_workspace_backend: Callable[[str], Backend],
) -> None:
    url = make_workspace_backend("postgres").where
    with pytest.raises(WorkspaceError):
        Workspace.open(url, readonly=True)
    with pytest.raises(WorkspaceError):
        Workspace.open(url, create=False)


def test_crawl_lock_shared_by_workers_exclusive_for_requeue(pg_url: str) -> None:
    with Workspace.open(pg_url) as ws, Workspace.open(pg_url) as other:
        assert ws.lock_holder("crawl") is None
        with ws.lock("crawl", shared=True), other.lock("crawl", shared=True):
            holder = other.lock_holder("crawl")
            assert holder is not None
            assert holder["pid"] == os.getpid()
            assert holder["holders"] == 2
            with pytest.raises(LockHeld, match=r"held by"), other.lock("crawl"):
                pass
        with ws.lock("crawl"), pytest.raises(LockHeld), other.lock("crawl", shared=True):
            pass
        assert other.lock_holder("crawl") is None


def test_a_killed_holder_leaves_no_lock(pg_url: str) -> None:
    code = (
        "import sys, time\n"
        "from framework.workspace import Workspace\n"
        "ws = Workspace.open(sys.argv[1])\n"
        "with ws.lock('crawl'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = procs.popen([sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        with Workspace.open(pg_url) as ws:
            holder = ws.lock_holder("crawl")
            assert holder is not None
            assert holder["pid"] == proc.pid
            with pytest.raises(LockHeld, match=f"pid {proc.pid}"), ws.lock("crawl"):
                pass
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            # the server notices the connection's end on its own; wait for it
            for _ in range(200):
                if ws.lock_holder("crawl") is None:
                    break
                procs.run(["sleep", "0.05"], check=True)
            with ws.lock("crawl") as info:
                assert info["pid"] == os.getpid()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_hosts_deadline_and_slots_are_shared(pg_url: str) -> None:
    with Workspace.open(pg_url) as ws, Workspace.open(pg_url) as other:
        assert ws.hosts is not None
        assert other.hosts is not None
        assert other.hosts.wait("h:1") == 0.0
        until = ws.hosts.defer("h:1", 30.0)
        assert 25.0 < other.hosts.wait("h:1") <= 30.0
        assert other.hosts.defer("h:1", 1.0) == until  # only ever later
        assert set(other.hosts.deadlines()) == {"h:1"}
        # a rate of one request per 10 s across both: the second waits for a slot
        assert ws.hosts.reserve("h:2", 10.0) == 0.0
        assert 9.0 < other.hosts.reserve("h:2", 10.0) <= 10.0
        assert 19.0 < ws.hosts.reserve("h:2", 10.0) <= 20.0
