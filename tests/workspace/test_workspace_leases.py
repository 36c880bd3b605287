"""The lease protocol on one SQLite file (framework/workspace/leases.py): claims never
overlap, an expired or dead owner's rows are taken over with a newer fencing token, the
heartbeat keeps what a worker holds and names what it lost, and an older workspace
gains the lease columns free."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from framework.workspace import NewRow, Outcome, RowStatus
from framework.workspace.leases import DEAD_CHECK_S, Leases, leased_rows, reset, workers
from framework.workspace.sqlite import SqliteStore
from tests.fixtures import procs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "state.sqlite"
    with SqliteStore.open(p) as s:
        s.seed([NewRow(kind="detail", url=f"http://h/{i}") for i in range(10)])
    return p


def open_worker(path: Path, clock: Clock, lease: float = 10.0) -> Leases:
    leases = Leases(SqliteStore.open(path), lease, clock=clock)
    leases.register()
    return leases


def test_two_workers_never_claim_the_same_row(path: Path) -> None:
    clock = Clock()
    a, b = open_worker(path, clock), open_worker(path, clock)
    got_a = [r.id for r in a.claim(4, 3)]
    got_b = [r.id for r in b.claim(100, 3)]
    assert len(got_a) == 4
    assert len(got_b) == 6
    assert not set(got_a) & set(got_b)
    assert a.claim(5, 3) == []
    assert b.claim(5, 3) == []
    assert b.token(got_b[0]) > a.token(got_a[0])  # type: ignore[operator]
    assert a.others_working(3)
    assert b.others_working(3)


def test_an_expired_lease_is_taken_over_with_a_newer_token(path: Path) -> None:
    clock = Clock()
    a, b = open_worker(path, clock, lease=5), open_worker(path, clock, lease=5)
    rows = a.claim(10, 3)
    old = a.token(rows[0].id)
    clock.now += 3
    assert a.heartbeat() == set()  # renewed: good for 5 more seconds
    clock.now += 4
    assert b.claim(10, 3) == []  # still a's
    clock.now += 2  # past the renewed expiry: a was away
    taken = b.claim(10, 3)
    assert [r.id for r in taken] == [r.id for r in rows]
    assert b.token(rows[0].id) > old  # type: ignore[operator]
    assert a.heartbeat() == {r.id for r in rows}  # a learns it lost them
    assert not b.others_working(3)


@pytest.mark.process
def test_a_dead_workers_rows_are_taken_at_once(path: Path) -> None:
    clock = Clock()
    a, b = open_worker(path, clock, lease=600), open_worker(path, clock, lease=600)
    a.claim(10, 3)
    dead = procs.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    with sqlite3.connect(path) as conn:  # a's process is gone (its pid exited)
        conn.execute("UPDATE workers SET pid = ? WHERE id = ?", (int(dead.stdout), a.worker_id))
    assert len(b.claim(10, 3)) == 10
    assert [w.stopped_at is not None for w in workers(b.store) if w.id == a.worker_id] == [True]


def test_stop_releases_and_reset_frees_everything(path: Path) -> None:
    clock = Clock()
    a, b = open_worker(path, clock), open_worker(path, clock)
    a.claim(3, 3)
    b.claim(3, 3)
    assert {w.id: w.leased for w in workers(a.store)} == {a.worker_id: 3, b.worker_id: 3}
    a.stop()
    assert {w.id: w.leased for w in workers(b.store)} == {a.worker_id: 0, b.worker_id: 3}
    assert reset(b.store) == 3
    assert all(w.stopped_at is not None for w in workers(b.store))
    c = open_worker(path, clock)
    assert len(c.claim(100, 3)) == 10


def test_exhausted_error_rows_are_not_work(path: Path) -> None:
    clock = Clock()
    with SqliteStore.open(path) as s:
        for row in list(s.resumable(3))[:9]:
            s.commit(Outcome(row_id=row.id, ok=True, http_status=200))
        (last,) = list(s.resumable(3))
        s.commit(Outcome(row_id=last.id, ok=False, retryable=False, error="gone"))
        assert s.get_row(last.id).status is RowStatus.ERROR  # type: ignore[union-attr]
    a = open_worker(path, clock)
    assert a.claim(10, 3) == []
    assert not a.others_working(3)


def test_a_schema_2_workspace_gains_free_leases(path: Path) -> None:
    with sqlite3.connect(path) as conn:  # what a version 2 file looks like
        conn.execute("DROP INDEX rows_leased")
        for col in ("lease_owner", "lease_expires_at", "lease_token"):
            conn.execute(f"ALTER TABLE rows DROP COLUMN {col}")
        conn.execute("DROP TABLE workers")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with SqliteStore.open(path, readonly=True) as ro:  # status on an old workspace
        assert workers(ro) == []
        assert leased_rows(ro) == 0
    a = open_worker(path, Clock())
    assert a.store.get_meta("schema_version") == "3"
    assert len(a.claim(100, 3)) == 10


def test_a_claim_takes_the_first_kinds_before_older_rows(path: Path) -> None:
    # a next page found after ten details: a pagination chain waits behind nothing
    with SqliteStore.open(path) as s:
        s.seed([NewRow(kind="list", url="http://h/list?page=2")])
        (nxt,) = [r.id for r in s.resumable(3) if r.kind == "list"]
    clock = Clock()
    a, b = open_worker(path, clock), open_worker(path, clock)
    got = a.claim(3, 3, first=("list",))
    assert [r.id for r in got] == [nxt, 1, 2]  # the next page, then the oldest
    assert [r.kind for r in got] == ["list", "detail", "detail"]
    rest = b.claim(100, 3, first=("list",))  # none left of that kind: the oldest others
    assert [r.id for r in rest] == list(range(3, 11))
    assert b.claim(5, 3, first=("list",)) == []


@pytest.mark.process
def test_a_claim_that_finds_nothing_free_looks_for_dead_workers_within_the_check_time(
    path: Path,
) -> None:
    # the read that answers "nothing free" stands for the write transaction only for
    # DEAD_CHECK_S after a full claim: a dead worker's rows are taken by the next one
    clock = Clock()
    a, b = open_worker(path, clock, lease=600), open_worker(path, clock, lease=600)
    assert len(a.claim(10, 3)) == 10
    assert b.claim(10, 3) == []  # a full claim: a is alive
    dead = procs.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE workers SET pid = ? WHERE id = ?", (int(dead.stdout), a.worker_id))
    clock.now += DEAD_CHECK_S / 2
    assert b.claim(10, 3) == []  # a read: nothing free, a not yet looked at
    assert [w.stopped_at for w in workers(b.store) if w.id == a.worker_id] == [None]
    clock.now += DEAD_CHECK_S
    assert len(b.claim(10, 3)) == 10  # the full claim finds a dead
