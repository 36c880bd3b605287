"""Many shippers of one PostgreSQL workspace: real `framework ship --workspace
postgresql://...` processes against a real ingest server (and the fault endpoint for
Retry-After). Every key is claimed by one shipper at a time (a lease with a fencing
token, expiry by the database clock), the ship log is the shared `ship_log` table
(every row names its shipper), and the server keeps one row per key with the right
content. PostgreSQL from FRAMEWORK_TEST_PG (skips without it unless
FRAMEWORK_REQUIRE_PG=1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from framework.workspace import StoredItem
from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer
from tests.fixtures.ship import Fault, FaultEndpoint, item_data, put_items
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg

FRAMEWORK = str(Path(sys.executable).parent / "framework")
TOKEN = "tok-7f3a9c-secret-bearer"


@pytest.fixture
def pg_workspace(make_workspace_backend: Callable[[str], Backend]) -> Backend:
    return make_workspace_backend("postgres")


def _fill(backend: Backend, n: int, version: int = 1, ids: range | None = None) -> None:
    store = backend.open()
    put_items(
        SimpleNamespace(store=store),  # type: ignore[arg-type]
        {f"{i:06d}": item_data(i, version) for i in (ids if ids is not None else range(n))},
    )


def _items(backend: Backend) -> dict[str, StoredItem]:
    return {i.dedupe_key: i for i in backend.open(readonly=True).iter_items()}


def _query(backend: Backend, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg  # the postgres extra; imported only when PostgreSQL is used

    with psycopg.connect(backend.where, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def _ship(backend: Backend, endpoint: str, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "FRAMEWORK_HOME": str(tmp_path), "INGEST_TOKEN": TOKEN}
    return procs.popen(
        [
            FRAMEWORK, "ship", "job", "--workspace", backend.where, "--endpoint", endpoint,
            "--token-env", "INGEST_TOKEN", "-q", *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _wait_for(check: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll a condition (never a timing assertion: the bound only ends a stuck test)."""
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def _summaries(backend: Backend) -> list[dict[str, Any]]:
    return [
        json.loads(s)
        for (s,) in _query(backend, "SELECT summary FROM shippers WHERE summary IS NOT NULL")
    ]


def _assert_one_row_per_key(server: IngestServer, items: dict[str, StoredItem]) -> None:
    rows = server.rows()
    keys = [r["dedupe_key"] for r in rows]
    assert len(keys) == len(set(keys)) == len(items)  # one row per key, no stray key
    for row in rows:
        item = items[row["dedupe_key"]]
        assert row["content_hash"] == item.content_hash, row["dedupe_key"]
        assert row["data"] == dict(item.data)


def _delivered(backend: Backend) -> dict[str, list[tuple[str, int]]]:
    """key -> [(content hash, shipper)] of the unfenced successes in the ship log."""
    got: dict[str, list[tuple[str, int]]] = {}
    for key, h, shipper in _query(
        backend,
        "SELECT dedupe_key, content_hash, shipper FROM ship_log "
        "WHERE outcome IN ('accepted', 'updated', 'duplicate') AND NOT fenced ORDER BY id",
    ):
        got.setdefault(key, []).append((h, int(shipper)))
    return got


def _no_secret_stored(backend: Backend) -> None:
    for table in ("ship_log", "shippers", "ship_deadlines", "log_lines"):
        for row in _query(backend, f"SELECT * FROM {table}"):
            assert TOKEN not in repr(row), table


def test_three_shippers_at_once_deliver_every_item_once(
    pg_workspace: Backend,
    make_ingest_server: Callable[..., IngestServer],
    tmp_path: Path,
) -> None:
    n = 360
    _fill(pg_workspace, n)
    server = make_ingest_server(token=TOKEN, backend="postgresql")
    procs = [
        _ship(pg_workspace, server.url, tmp_path, *args)
        for args in (
            ("--batch-size", "1"),
            ("--batch-size", "1"),
            ("--batch-size", "7", "--concurrency", "2"),
        )
    ]
    results = [_finish(p) for p in procs]
    for code, _, err in results:
        assert code == 0, err

    items = _items(pg_workspace)
    _assert_one_row_per_key(server, items)
    # claims: no key was delivered twice, and each server row is its first version
    delivered = _delivered(pg_workspace)
    assert set(delivered) == set(items)
    assert all(len(v) == 1 for v in delivered.values()), [
        k for k, v in delivered.items() if len(v) > 1
    ]
    assert {r["version"] for r in server.rows()} == {1}
    # the shared log: every row names one of the three shippers; nothing was fenced
    shippers = {int(s) for (s,) in _query(pg_workspace, "SELECT id FROM shippers")}
    assert len(shippers) == 3
    assert {s for v in delivered.values() for _, s in v} <= shippers
    assert _query(pg_workspace, "SELECT count(*) FROM ship_log WHERE fenced") == [(0,)]
    assert _query(pg_workspace, "SELECT count(*) FROM ship_claims") == [(0,)]
    summaries = _summaries(pg_workspace)
    assert sum(s["counts"]["accepted"] for s in summaries) == n
    # the run's events name their shipper (the workspace's events table)
    events = [
        json.loads(r)
        for (r,) in _query(pg_workspace, "SELECT record FROM log_lines WHERE log = 'events'")
    ]
    finished = [e for e in events if e["event"] == "ship_finished"]
    assert {e["shipper"] for e in finished} == shippers

    # a re-run ships nothing
    lines = _query(pg_workspace, "SELECT count(*) FROM ship_log")
    code, out, err = _finish(_ship(pg_workspace, server.url, tmp_path))
    assert code == 0, err
    assert f"accepted 0, updated 0, duplicate 0, skipped {n}," in out
    assert _query(pg_workspace, "SELECT count(*) FROM ship_log") == lines
    _no_secret_stored(pg_workspace)


def test_a_shipper_killed_mid_run_the_others_finish(
    pg_workspace: Backend,
    make_ingest_server: Callable[..., IngestServer],
    tmp_path: Path,
) -> None:
    n = 400
    _fill(pg_workspace, n)
    server = make_ingest_server(backend="postgresql")
    procs = [_ship(pg_workspace, server.url, tmp_path, "--batch-size", "1") for _ in range(3)]
    victim = procs[0]

    def victim_shipped() -> bool:
        if _query(pg_workspace, "SELECT to_regclass('ship_log') IS NULL")[0][0]:
            return False  # no shipper has created the ship tables yet
        got = _query(
            pg_workspace,
            "SELECT count(*) FROM ship_log l JOIN shippers s ON s.id = l.shipper WHERE s.pid = %s",
            (victim.pid,),
        )
        return bool(got[0][0] >= 20)

    _wait_for(victim_shipped, "the first shipper to deliver 20 items")
    victim.send_signal(signal.SIGKILL)
    code, _, _ = _finish(victim)
    assert code == -signal.SIGKILL
    for proc in procs[1:]:
        code, _, err = _finish(proc)
        assert code == 0, err

    items = _items(pg_workspace)
    _assert_one_row_per_key(server, items)
    assert set(_delivered(pg_workspace)) == set(items)  # the others delivered the rest

    # a re-run completes (nothing, or the victim's last unrecorded delivery, is left)
    code, out, err = _finish(_ship(pg_workspace, server.url, tmp_path))
    assert code == 0, err
    assert "error 0" in out
    _assert_one_row_per_key(server, items)
    assert {r["version"] for r in server.rows()} == {1}


def test_a_shipper_stopped_past_its_lease_cannot_record_over_the_newer_delivery(
    pg_workspace: Backend,
    make_ingest_server: Callable[..., IngestServer],
    tmp_path: Path,
) -> None:
    _fill(pg_workspace, 1)
    key = "test:000000"
    server = make_ingest_server(backend="postgresql")
    arrived, release = threading.Event(), threading.Event()
    held: list[str] = []

    def hold_first(idempotency_key: str) -> None:
        if not held:  # only the first request (shipper A's, content v1) is held
            held.append(idempotency_key)
            arrived.set()
            release.wait(60)

    server.store.on_in_flight = hold_first
    a = _ship(pg_workspace, server.url, tmp_path, "--batch-size", "1", "--lease-seconds", "1")
    try:
        assert arrived.wait(60), "shipper A never sent"
        os.kill(a.pid, signal.SIGSTOP)  # A is paused with its request in flight

        def expired() -> bool:
            if _query(pg_workspace, "SELECT to_regclass('ship_claims') IS NULL")[0][0]:
                return False
            got = _query(
                pg_workspace,
                "SELECT expires_at < extract(epoch FROM now()) FROM ship_claims "
                "WHERE dedupe_key = %s",
                (key,),
            )
            return bool(got and got[0][0])

        _wait_for(expired, "A's claim to expire by the database clock")
        # the item changes meanwhile; shipper B takes the key over and delivers v2
        _fill(pg_workspace, 1, version=2)
        v2 = _items(pg_workspace)[key].content_hash
        code, out, err = _finish(_ship(pg_workspace, server.url, tmp_path, "--batch-size", "1"))
        assert code == 0, err
        assert "accepted 1" in out
        assert server.row(key)["content_hash"] == v2  # type: ignore[index]
        # A's late v1 reaches the server after B's v2 (the server keeps the last write)
        release.set()
        _wait_for(lambda: server.row(key)["content_hash"] != v2, "A's late write")  # type: ignore[index]
    finally:
        release.set()
        os.kill(a.pid, signal.SIGCONT)
    code, out, err = _finish(a)
    assert code == 3, (out, err)  # fenced: come back later
    assert "fenced 1" in out

    (a_id,) = _query(pg_workspace, "SELECT id FROM shippers WHERE pid = %s", (a.pid,))[0]
    log = _query(
        pg_workspace,
        "SELECT shipper, content_hash, outcome, fenced, token FROM ship_log ORDER BY id",
    )
    # B's delivery stands in the log; A's is there, named and marked fenced, with an
    # older token than B's
    (b_row,) = [r for r in log if r[0] != a_id]
    (a_row,) = [r for r in log if r[0] == a_id]
    assert b_row[1:4] == (v2, "accepted", False)
    assert a_row[2:4] == ("updated", True)
    assert a_row[1] != v2
    assert a_row[4] < b_row[4]
    # A did not record its success over B's: since A's other content may now be at the
    # door (the server keeps the last write), the key is marked to ship again
    assert _query(pg_workspace, "SELECT outcome, ok_hash FROM ship_latest") == [("fenced", None)]

    # the next run restores the current content at the door: one row, v2
    code, out, err = _finish(_ship(pg_workspace, server.url, tmp_path))
    assert code == 0, err
    assert "updated 1" in out
    items = _items(pg_workspace)
    _assert_one_row_per_key(server, items)
    assert server.row(key)["content_hash"] == v2  # type: ignore[index]


class _HoldingEndpoint(FaultEndpoint):
    """The fault endpoint, holding the answer to every request that arrives after the
    first ``answered`` until :attr:`released` is set. The test sets it once the 429's
    deadline is in the database: a request another shipper had on its way at the 429 is
    answered after the deadline is recorded, whatever the scheduler does meanwhile (on
    a loaded machine the shipper that got the 429 may be descheduled between reading it
    and recording it, while another completes a whole request and sends the next; that
    race no shipper can close, and a count of requests would make it a timing test)."""

    def __init__(self, answered: int) -> None:
        self.answered = answered
        self.arrivals = 0
        self.released = threading.Event()
        self._order = threading.Lock()
        super().__init__()

    def _handle(self, h: Any) -> None:
        with self._order:
            self.arrivals += 1
            held = self.arrivals > self.answered
        if held:
            self.released.wait(120)  # the test fails on its own if the deadline never comes
        super()._handle(h)

    def close(self) -> None:
        self.released.set()
        super().close()


def _deadline_recorded(backend: Backend) -> bool:
    (made,) = _query(backend, "SELECT to_regclass('ship_deadlines') IS NOT NULL")[0]
    return bool(made) and bool(_query(backend, "SELECT 1 FROM ship_deadlines"))


@pytest.fixture
def endpoint() -> Iterator[_HoldingEndpoint]:
    site = _HoldingEndpoint(answered=41)  # the 41st is the 429
    yield site
    site.close()


def test_retry_after_holds_back_every_shipper(
    pg_workspace: Backend, endpoint: _HoldingEndpoint, tmp_path: Path
) -> None:
    _fill(pg_workspace, 300)
    # 40 normal answers, then a Retry-After far over the cap (--retry-after-cap 300)
    endpoint.script("/v1/items", *[Fault(kind="slow", delay=0)] * 40)
    endpoint.script(
        "/v1/items", Fault(status=429, headers={"Retry-After": "3600"}, body={"status": 429})
    )
    url = f"{endpoint.url}"
    procs = [_ship(pg_workspace, url, tmp_path, "--batch-size", "1") for _ in range(3)]
    _wait_for(lambda: _deadline_recorded(pg_workspace), "the 429's deadline in the database")
    endpoint.released.set()  # the other shippers' requests on their way are answered now
    results = [_finish(p) for p in procs]
    for code, _, err in results:
        assert code == 3, err  # every shipper stopped: come back later
    assert any("Retry-After 3600" in err for _, _, err in results)
    # order and counts: after the 429 only the requests the two other shippers already
    # had on their way (one each, concurrency 1) arrived; none once they could see it
    paths = endpoint.paths()
    assert 41 <= len(paths) <= 41 + 2, len(paths)
    # the deadline is the workspace's, by the database clock: a new shipper sends nothing
    (ahead,) = _query(pg_workspace, "SELECT until - extract(epoch FROM now()) FROM ship_deadlines")[
        0
    ]
    assert 3000 < ahead <= 3600
    before = len(endpoint.requests)
    code, _, err = _finish(_ship(pg_workspace, url, tmp_path))
    assert code == 3
    assert "rate limited" in err
    assert len(endpoint.requests) == before
    # every request but the 429 delivered a key of its own, recorded once
    delivered = _delivered(pg_workspace)
    assert len(delivered) == len(paths) - 1
    assert all(len(v) == 1 for v in delivered.values())


class _TimedEndpoint(FaultEndpoint):
    """The fault endpoint, noting when each request arrived (epoch seconds: the same
    host clock as the database's, which keeps the shared deadline)."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        super().__init__()

    def _handle(self, h: Any) -> None:
        self.arrived.append(time.time())
        super()._handle(h)


def test_a_short_retry_after_pauses_every_shipper_until_the_deadline(
    pg_workspace: Backend, tmp_path: Path
) -> None:
    _fill(pg_workspace, 120)
    site = _TimedEndpoint()
    try:
        site.script("/v1/items", *[Fault(kind="slow", delay=0)] * 30)
        site.script(
            "/v1/items", Fault(status=429, headers={"Retry-After": "2"}, body={"status": 429})
        )
        procs = [_ship(pg_workspace, site.url, tmp_path, "--batch-size", "1") for _ in range(3)]
        for code, _, err in (_finish(p) for p in procs):
            assert code == 0, err  # under the cap: everyone waited, then finished
    finally:
        site.close()
    until, set_at = _query(pg_workspace, "SELECT until, set_at FROM ship_deadlines")[0]
    statuses = [r.path for r in site.requests]
    assert len(statuses) == 121  # every item once, plus the one answered 429
    assert set_at >= site.arrived[30]  # set after the 429 (request 31) arrived
    # order: once the deadline was set, only the requests already on their way (one per
    # other shipper: each reads the deadline before each send) came before it ended;
    # every later one came after it. Before it was set (a loaded machine can take a
    # while between the 429 and the write), the others had no deadline to keep.
    early = [t for t in site.arrived[31:] if set_at < t < until - 0.01]
    assert len(early) <= 2, (len(early), set_at, until)
    assert len(_delivered(pg_workspace)) == 120


def test_framework_workspace_names_the_database_and_a_dry_run_writes_nothing(
    pg_workspace: Backend, tmp_path: Path
) -> None:
    _fill(pg_workspace, 3)
    env = {**os.environ, "FRAMEWORK_HOME": str(tmp_path), "FRAMEWORK_WORKSPACE": pg_workspace.where}
    run = procs.run(
        [FRAMEWORK, "ship", "job", "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert sum(line.startswith("ship ") for line in run.stdout.splitlines()) == 3
    # a dry run claims nothing and creates no ship table
    assert _query(pg_workspace, "SELECT to_regclass('ship_log') IS NULL") == [(True,)]
