"""SqliteStore against real SQLite files: transactions, uniqueness, completeness,
streaming reads, requeue, and consistency after kill -9 and concurrent writers."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.errors import WorkspaceBroken, WorkspaceError
from framework.workspace import (
    ErrorKind,
    ItemWrite,
    NewRow,
    Outcome,
    PartWrite,
    RequeueFilter,
    RowStatus,
    SqliteStore,
    content_hash,
)
from framework.workspace.records import ERROR_DETAIL_MAX
from framework.workspace.sqlite import CHUNK
from tests.fixtures import procs
from tests.paths import REPO


def ticking_clock() -> Callable[[], str]:
    """A clock that moves one second per call, so timestamp changes are visible."""
    counter = itertools.count()

    def now() -> str:
        n = next(counter)
        return f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000+00:00"

    return now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore.open(tmp_path / "state.sqlite", clock=ticking_clock())
    yield s
    s.close()


def subtab(key: str, tab: str, required: bool = True) -> NewRow:
    return NewRow(
        kind=f"detail.{tab}",
        url=f"http://site/{key}/tab/{tab}",
        context={"item_key": key, "tab": tab, "required": required},
    )


def raw(store: SqliteStore, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(store.path) as conn:
        return conn.execute(sql, params).fetchall()


# schema ----------------------------------------------------------------------------


def test_open_creates_wal_schema_with_version(store: SqliteStore) -> None:
    assert store.get_meta("schema_version") == "3"
    assert raw(store, "PRAGMA journal_mode") == [("wal",)]
    tables = {r[0] for r in raw(store, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "rows", "attempts", "items", "responses"} <= tables


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    with SqliteStore.open(path) as s:
        s.set_meta("schema_version", "99")
    with pytest.raises(WorkspaceError, match="schema 99"):
        SqliteStore.open(path)
    with pytest.raises(WorkspaceError, match="schema 99"):
        SqliteStore.open(path, readonly=True)


def test_a_file_that_is_not_sqlite_is_a_broken_workspace(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not a database, just text that is long enough" * 100)
    with pytest.raises(WorkspaceBroken, match=r"damaged .* restore .* --fresh") as caught:
        SqliteStore.open(path)
    assert caught.value.exit_code == 4


def test_readonly_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    SqliteStore.open(path).close()
    with (
        SqliteStore.open(path, readonly=True) as ro,
        pytest.raises(WorkspaceError, match="read-only"),
    ):
        ro.seed([NewRow("list", "http://site/")])


# rows --------------------------------------------------------------------------------


def test_seed_returns_only_new_rows(store: SqliteStore) -> None:
    a, b = NewRow("list", "http://site/a"), NewRow("list", "http://site/b")
    first = store.seed([a, b, a])
    assert [r.url for r in first] == ["http://site/a", "http://site/b"]
    assert all(r.status is RowStatus.PENDING and r.attempts == 0 for r in first)
    assert store.seed([b, NewRow("list", "http://site/c")])[0].url == "http://site/c"
    assert len(store.seed([a, b])) == 0
    assert sum(store.row_counts()["list"].values()) == 3


def test_same_url_with_another_method_or_body_is_another_row(store: SqliteStore) -> None:
    rows = store.seed(
        [
            NewRow("detail.tab", "http://site/t"),
            NewRow("detail.tab", "http://site/t", method="POST", body="a=1", body_type="form"),
            NewRow("detail.tab", "http://site/t", method="POST", body="a=2", body_type="form"),
            NewRow("detail.tab", "http://site/t", method="post", body="a=2", body_type="form"),
        ]
    )
    assert [(r.method, r.body) for r in rows] == [("GET", None), ("POST", "a=1"), ("POST", "a=2")]


def test_duplicate_discovery_inserts_one_row_once(store: SqliteStore) -> None:
    page1, page2 = store.seed([NewRow("list", "http://site/1"), NewRow("list", "http://site/2")])
    shared = NewRow("detail", "http://site/case/7")
    r1 = store.commit(Outcome(page1.id, ok=True, new_rows=[shared, NewRow("detail", "http://x/8")]))
    r2 = store.commit(Outcome(page2.id, ok=True, new_rows=[shared]))
    assert [r.url for r in r1.inserted] == ["http://site/case/7", "http://x/8"]
    assert r1.inserted[0].parent_id == page1.id
    assert r2.inserted == []
    assert raw(store, "SELECT count(*) FROM rows WHERE url = 'http://site/case/7'") == [(1,)]


def test_row_ids_are_stable_and_never_reused(store: SqliteStore) -> None:
    (row,) = store.seed([NewRow("list", "http://site/1")])
    store.commit(Outcome(row.id, ok=True))
    assert store.get_row(row.id).url == "http://site/1"  # type: ignore[union-attr]
    store.reset_rows()
    (again,) = store.seed([NewRow("list", "http://site/1")])
    assert again.id > row.id


def test_commit_records_attempts_and_typed_errors(store: SqliteStore) -> None:
    (row,) = store.seed([NewRow("detail", "http://site/d")])
    r1 = store.commit(
        Outcome(row.id, ok=False, http_status=503, error_kind=ErrorKind.HTTP_5XX, error="x" * 9000)
    )
    assert (r1.status, r1.attempt) == (RowStatus.ERROR, 1)
    r2 = store.commit(Outcome(row.id, ok=False, error_kind=ErrorKind.TIMEOUT, error="slow"))
    r3 = store.commit(Outcome(row.id, ok=True, http_status=200))
    assert (r2.attempt, r3.attempt, r3.status) == (2, 3, RowStatus.OK)
    history = store.attempts(row.id)
    assert [(a["n"], a["outcome"], a["http_status"], a["error_kind"]) for a in history] == [
        (1, "error", 503, "http_5xx"),
        (2, "error", None, "timeout"),
        (3, "ok", 200, None),
    ]
    assert len(history[0]["error"]) == ERROR_DETAIL_MAX
    final = store.get_row(row.id)
    assert final is not None
    assert (final.status, final.attempts, final.last_http_status) == (RowStatus.OK, 3, 200)
    assert (final.last_error_kind, final.last_error) == (ErrorKind.TIMEOUT, "slow")


def test_commit_of_unknown_row_is_refused(store: SqliteStore) -> None:
    with pytest.raises(WorkspaceError, match="unknown row"):
        store.commit(Outcome(12345, ok=True))


def test_a_commit_that_fails_midway_leaves_nothing(store: SqliteStore) -> None:
    (page,) = store.seed([NewRow("list", "http://site/1")])
    before = {t: raw(store, f"SELECT * FROM {t} ORDER BY 1") for t in ("rows", "attempts", "items")}
    bad = Outcome(
        page.id,
        ok=True,
        new_rows=[NewRow("detail", f"http://site/d{i}") for i in range(5)],
        items=[
            ItemWrite("t:1", "t", "1", {"a": 1}),
            ItemWrite("t:2", "t", "2", {"not json": object()}),  # fails after the rest ran
        ],
    )
    with pytest.raises(TypeError):
        store.commit(bad)
    after = {t: raw(store, f"SELECT * FROM {t} ORDER BY 1") for t in ("rows", "attempts", "items")}
    assert after == before
    # the store is still usable, in the same thread, after the rollback
    assert store.commit(Outcome(page.id, ok=True)).attempt == 1


def test_unknown_part_rolls_back(store: SqliteStore) -> None:
    (row,) = store.seed([subtab("t:404", "rulings")])
    with pytest.raises(WorkspaceError, match="unknown item"):
        store.commit(Outcome(row.id, ok=True, parts=[PartWrite("t:404", "rulings", [1])]))
    assert store.get_row(row.id).status is RowStatus.PENDING  # type: ignore[union-attr]
    assert store.attempts(row.id) == []


# items ---------------------------------------------------------------------------------


def test_identical_rewrite_changes_nothing_and_new_content_updates_hash(
    store: SqliteStore,
) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/d")])
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1, "b": "é"})]))
    assert (r.items_new, r.items_changed, r.items_unchanged) == (1, 0, 0)
    first = store.get_item("t:1")
    assert first is not None
    assert first.content_hash == content_hash({"b": "é", "a": 1})
    snapshot = raw(store, "SELECT * FROM items")
    store.requeue(RequeueFilter(kind="detail"), 3)
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"b": "é", "a": 1})]))
    assert (r.items_new, r.items_changed, r.items_unchanged) == (0, 0, 1)
    assert raw(store, "SELECT * FROM items") == snapshot
    store.requeue(RequeueFilter(kind="detail"), 3)
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 2, "b": "é"})]))
    assert (r.items_new, r.items_changed, r.items_unchanged) == (0, 1, 0)
    second = store.get_item("t:1")
    assert second is not None
    assert second.content_hash == content_hash({"a": 2, "b": "é"}) != first.content_hash
    assert second.first_scraped == first.first_scraped
    assert second.last_scraped > first.last_scraped
    assert dict(second.data) == {"a": 2, "b": "é"}


def test_completeness_follows_required_subtab_rows(store: SqliteStore) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/case/1")])
    r = store.commit(
        Outcome(
            d.id,
            ok=True,
            items=[ItemWrite("t:1", "t", "1", {"title": "one"}, complete=False)],
            new_rows=[
                subtab("t:1", "rulings"),
                subtab("t:1", "hearings"),
                subtab("t:1", "notes", False),
            ],
        )
    )
    assert r.completed == []
    rulings, hearings, notes = r.inserted
    assert store.item_counts() == {"complete": 0, "incomplete": 1}
    r = store.commit(Outcome(rulings.id, ok=True, parts=[PartWrite("t:1", "rulings", [{"n": 1}])]))
    assert r.completed == []
    assert r.items_changed == 1
    r = store.commit(Outcome(hearings.id, ok=False, error_kind=ErrorKind.HTTP_5XX, error="500"))
    assert store.get_item("t:1").complete is False  # type: ignore[union-attr]
    r = store.commit(Outcome(notes.id, ok=False, error_kind=ErrorKind.HTTP_4XX, error="404"))
    assert store.get_item("t:1").complete is False  # type: ignore[union-attr]
    r = store.commit(Outcome(hearings.id, ok=True, parts=[PartWrite("t:1", "hearings", [])]))
    assert r.completed == ["t:1"]  # the optional `notes` tab is in error: not required
    item = store.get_item("t:1")
    assert item is not None
    assert item.complete
    assert dict(item.data) == {"title": "one", "rulings": [{"n": 1}], "hearings": []}
    assert item.content_hash == content_hash(item.data)
    # a required tab fetched again on purpose makes the item incomplete until it is ok
    assert store.requeue(RequeueFilter(kind="detail.rulings"), 3) == 1
    assert store.item_counts() == {"complete": 0, "incomplete": 1}
    r = store.commit(Outcome(rulings.id, ok=True, parts=[PartWrite("t:1", "rulings", [{"n": 1}])]))
    assert r.completed == ["t:1"]
    assert r.items_unchanged == 1


def test_rewrite_of_detail_keeps_merged_parts(store: SqliteStore) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/case/1")])
    tab = store.commit(
        Outcome(
            d.id,
            ok=True,
            items=[ItemWrite("t:1", "t", "1", {"title": "one"}, complete=False)],
            new_rows=[subtab("t:1", "rulings")],
        )
    ).inserted[0]
    store.commit(Outcome(tab.id, ok=True, parts=[PartWrite("t:1", "rulings", ["r"])]))
    merged = store.get_item("t:1")
    store.requeue(RequeueFilter(kind="detail"), 3)
    r = store.commit(
        Outcome(
            d.id,
            ok=True,
            items=[ItemWrite("t:1", "t", "1", {"title": "one"}, complete=False)],
            new_rows=[subtab("t:1", "rulings")],
        )
    )
    assert (r.inserted, r.items_unchanged, r.completed) == ([], 1, ["t:1"])
    assert store.get_item("t:1") == merged


def test_declared_incomplete_item_without_rows_stays_incomplete(store: SqliteStore) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/case/1")])
    store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {}, complete=False)]))
    assert store.item_counts() == {"complete": 0, "incomplete": 1}


def test_failed_item_row_makes_its_item_incomplete(store: SqliteStore) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/case/1")])
    store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    store.requeue(RequeueFilter(kind="detail"), 3)
    assert store.get_item("t:1").complete is False  # type: ignore[union-attr]
    store.commit(Outcome(d.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    assert store.get_item("t:1").complete is False  # type: ignore[union-attr]
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    assert r.completed == ["t:1"]


def test_iter_items_keyset_order_after_and_only(store: SqliteStore) -> None:
    n = CHUNK * 2 + 37
    (page,) = store.seed([NewRow("list", "http://site/")])
    keys = [f"t:{i:05d}" for i in range(n)]
    random.Random(7).shuffle(keys)
    items = [
        ItemWrite(k, "t", k[2:], {"k": k}, complete=int(k[2:]) % 10 != 3)
        for k in keys  # every id ending in 3 declared incomplete, without rows
    ]
    store.commit(Outcome(page.id, ok=True, items=items))
    everything = [i.dedupe_key for i in store.iter_items(complete_only=False)]
    assert everything == sorted(keys)
    done = [i.dedupe_key for i in store.iter_items()]
    assert done == sorted(k for k in keys if int(k[2:]) % 10 != 3)
    after = [i.dedupe_key for i in store.iter_items(after="t:00500")]
    assert after == [k for k in done if k > "t:00500"]
    only = ["t:00003", "t:00002", "t:99999", "t:00600", "t:00002"]
    assert [i.dedupe_key for i in store.iter_items(only=only)] == ["t:00002", "t:00600"]
    assert [i.dedupe_key for i in store.iter_items(only=only, after="t:00002")] == ["t:00600"]
    assert [i.dedupe_key for i in store.iter_items(complete_only=False, only=only)] == [
        "t:00002",
        "t:00003",
        "t:00600",
    ]


def test_iterating_while_committing_sees_a_consistent_stream(store: SqliteStore) -> None:
    rows = store.seed([NewRow("detail", f"http://site/{i}") for i in range(CHUNK + 10)])
    seen = []
    for row in store.resumable(3):  # commit while streaming on the same thread
        seen.append(row.id)
        store.commit(Outcome(row.id, ok=True))
    assert seen == [r.id for r in rows]
    assert list(store.resumable(3)) == []


# queue reads ---------------------------------------------------------------------------


def test_resumable_has_pending_and_retryable_errors_only(store: SqliteStore) -> None:
    rows = store.seed([NewRow("detail", f"http://site/{i}") for i in range(6)])
    ok, pending, retry, spent, gone, requeued = rows
    store.commit(Outcome(ok.id, ok=True))
    store.commit(Outcome(retry.id, ok=False, error_kind=ErrorKind.CONNECT))
    for _ in range(3):
        store.commit(Outcome(spent.id, ok=False, error_kind=ErrorKind.RATE_LIMITED))
    store.commit(Outcome(gone.id, ok=False, error_kind=ErrorKind.HTTP_4XX, http_status=404))
    for _ in range(3):
        store.commit(Outcome(requeued.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    store.requeue(RequeueFilter(url_contains="/5"), 3)
    assert [r.id for r in store.resumable(3)] == [pending.id, retry.id, requeued.id]
    assert [r.id for r in store.resumable(4)] == [pending.id, retry.id, spent.id, requeued.id]
    assert store.counts(3) == {"pending": 2, "retryable": 1, "exhausted": 2}
    assert [r.id for r in store.exhausted(3)] == [spent.id, gone.id]
    assert store.get_row(gone.id).retryable is False  # type: ignore[union-attr]


def test_not_retryable_outcome_flag_wins(store: SqliteStore) -> None:
    (row,) = store.seed([NewRow("detail", "http://site/x")])
    store.commit(Outcome(row.id, ok=False, error_kind=ErrorKind.HTTP_5XX, retryable=False))
    assert list(store.resumable(3)) == []


def test_resumable_uses_the_open_rows_index(store: SqliteStore) -> None:
    plan = store._conn().execute(
        "EXPLAIN QUERY PLAN SELECT id FROM rows INDEXED BY rows_open WHERE status != 'ok' "
        "AND (status = 'pending' OR (retryable = 1 AND attempts < 3)) AND id > 0 ORDER BY id"
    )
    detail = " ".join(str(r[-1]) for r in plan)
    assert "USING INDEX rows_open" in detail
    assert "SCAN rows" not in detail.replace("SCAN rows USING INDEX", "")


def test_row_counts_and_misbehaving_order(store: SqliteStore) -> None:
    rows = store.seed(
        [NewRow("list", "http://site/l")]
        + [NewRow("detail", f"http://site/d{i}") for i in range(4)]
    )
    lst, d0, d1, d2, d3 = rows
    store.commit(Outcome(lst.id, ok=True))
    store.commit(Outcome(d0.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    store.commit(Outcome(d0.id, ok=True))
    for _ in range(2):
        store.commit(Outcome(d1.id, ok=False, error_kind=ErrorKind.HTTP_5XX, http_status=500))
    store.commit(Outcome(d2.id, ok=False, error_kind=ErrorKind.HTTP_4XX, http_status=404))
    assert store.row_counts() == {
        "detail": {RowStatus.OK: 1, RowStatus.ERROR: 2, RowStatus.PENDING: 1},
        "list": {RowStatus.OK: 1},
    }
    assert [r.id for r in store.misbehaving(10)] == [d1.id, d2.id, d0.id]
    assert [r.id for r in store.misbehaving(1)] == [d1.id]
    assert store.failures(d1.id) == 2
    assert store.failures(d3.id) == 0
    assert [r.id for r in store.iter_rows(status=RowStatus.ERROR)] == [d1.id, d2.id]
    assert [r.id for r in store.iter_rows(kind="list")] == [lst.id]


def test_requeue_filters(store: SqliteStore) -> None:
    rows = store.seed(
        [NewRow("detail", f"http://site/case/{i}") for i in range(4)]
        + [NewRow("detail.tab", f"http://site/case/{i}/tab") for i in range(2)]
    )
    c0, c1, c2, c3, t0, t1 = rows
    store.commit(Outcome(c0.id, ok=True))
    store.commit(Outcome(c1.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    for _ in range(3):
        store.commit(Outcome(c2.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    store.commit(Outcome(t0.id, ok=False, error_kind=ErrorKind.HTTP_4XX))
    store.commit(Outcome(t1.id, ok=True))

    def status() -> dict[int, str]:
        return {r.id: r.status.value for r in store.iter_rows()}

    assert store.requeue(RequeueFilter(exhausted=True, kind="detail"), 3) == 1  # c2 only
    assert status()[c2.id] == "pending"
    assert store.get_row(c2.id).attempts == 0
    assert len(store.attempts(c2.id)) == 3  # history kept
    assert store.requeue(RequeueFilter(errors=True, url_contains="/tab"), 3) == 1  # t0
    assert store.get_row(t0.id).retryable is True  # type: ignore[union-attr]
    assert store.requeue(RequeueFilter(errors=True), 3) == 1  # c1
    assert store.requeue(RequeueFilter(errors=True), 3) == 0
    assert status()[c0.id] == "ok"
    # without --errors/--exhausted ok rows match too (t0 is already pending)
    assert store.requeue(RequeueFilter(url_contains="case/0"), 3) == 1
    assert status() == {
        c0.id: "pending",
        c1.id: "pending",
        c2.id: "pending",
        c3.id: "pending",
        t0.id: "pending",
        t1.id: "ok",
    }


def test_reset_rows_keeps_items_and_relinks_them(store: SqliteStore) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/d")])
    store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    store.reset_rows()
    assert store.row_counts() == {}
    item = store.get_item("t:1")
    assert item is not None
    assert item.row_id is None
    assert item.complete
    (d2,) = store.seed([NewRow("detail", "http://site/d")])
    r = store.commit(Outcome(d2.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    assert r.items_unchanged == 1
    assert store.get_item("t:1").row_id == d2.id  # type: ignore[union-attr]


def test_one_connection_per_thread(store: SqliteStore) -> None:
    import threading

    (row,) = store.seed([NewRow("list", "http://site/")])
    store.commit(Outcome(row.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    got: list[object] = []

    def reader() -> None:
        got.append([i.dedupe_key for i in store.iter_items()])
        got.append(store._conn())

    t = threading.Thread(target=reader)
    t.start()
    t.join()
    assert got[0] == ["t:1"]
    assert got[1] is not store._conn()


def test_checkpoints_run_in_the_background_and_stop_on_close(tmp_path: Path) -> None:
    from framework.workspace.sqlite_base import CHECKPOINT_EVERY

    store = SqliteStore.open(tmp_path / "state.sqlite")
    rows = store.seed([NewRow("detail", f"http://site/{i}") for i in range(CHECKPOINT_EVERY * 3)])
    for row in rows:
        store.commit(Outcome(row.id, ok=True, items=[ItemWrite(f"t:{row.id}", "t", "1", {})]))
    checkpointer = store._checkpointer
    assert checkpointer is not None
    assert checkpointer.is_alive()
    deadline = time.monotonic() + 30  # a wait for the thread, not a timing assertion
    while checkpointer.runs < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpointer.runs >= 1
    store.close()
    assert not checkpointer.is_alive()
    with SqliteStore.open(tmp_path / "state.sqlite", readonly=True) as again:
        assert again.item_counts() == {"complete": CHECKPOINT_EVERY * 3, "incomplete": 0}


# processes -------------------------------------------------------------------------------

CRAWLER = textwrap.dedent(
    """
    import sys
    from framework.workspace import ItemWrite, NewRow, Outcome, PartWrite, SqliteStore

    N = int(sys.argv[2])
    store = SqliteStore.open(sys.argv[1])
    store.seed([NewRow("detail", "n:0")])
    while True:
        todo = list(store.resumable(3))
        if not todo:
            break
        for row in todo:
            if row.kind == "detail.tab":
                key = row.context["item_key"]
                store.commit(Outcome(row.id, ok=True, parts=[PartWrite(key, "tab", [key])]))
                continue
            i = int(row.url[2:])
            new = [NewRow("detail", f"n:{c}") for c in (2 * i + 1, 2 * i + 2) if c < N]
            if i % 3 == 0:
                new.append(NewRow("detail.tab", f"tab:{i}",
                                  context={"item_key": f"t:{i}", "tab": "tab", "required": True}))
            items = [ItemWrite(f"t:{i}", "t", str(i), {"i": i, "sq": i * i}, complete=i % 3 != 0)]
            store.commit(Outcome(row.id, ok=True, http_status=200, new_rows=new, items=items))
            if i % 50 == 0:
                print(i, flush=True)  # progress: the test kills only once commits flow
    store.close()
    """
)


def check_consistent(path: Path) -> dict[str, int]:
    """The invariants a kill at any instant must keep."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'items'").fetchone():
            return {"rows": 0, "ok": 0, "items": 0}  # killed before the schema committed
        q = conn.execute
        # every ok row has its ok attempt, and the attempt count matches the history
        assert q(
            "SELECT count(*) FROM rows r WHERE status = 'ok' AND NOT EXISTS "
            "(SELECT 1 FROM attempts a WHERE a.row_id = r.id AND a.outcome = 'ok')"
        ).fetchone() == (0,)
        assert q(
            "SELECT count(*) FROM rows r WHERE attempts != "
            "(SELECT count(*) FROM attempts a WHERE a.row_id = r.id)"
        ).fetchone() == (0,)
        # every item's row exists and is ok; every ok detail row has its item
        assert q(
            "SELECT count(*) FROM items i LEFT JOIN rows r ON r.id = i.row_id "
            "WHERE r.id IS NULL OR r.status != 'ok'"
        ).fetchone() == (0,)
        assert q(
            "SELECT count(*) FROM rows r WHERE kind = 'detail' AND status = 'ok' AND NOT EXISTS "
            "(SELECT 1 FROM items i WHERE i.dedupe_key = 't:' || substr(r.url, 3))"
        ).fetchone() == (0,)
        # every discovered row's parent exists and is ok (discovered in the same commit)
        assert q(
            "SELECT count(*) FROM rows c LEFT JOIN rows p ON p.id = c.parent_id "
            "WHERE c.parent_id IS NOT NULL AND (p.id IS NULL OR p.status != 'ok')"
        ).fetchone() == (0,)
        # an ok tab row's part is in its item, and completeness matches the rows
        assert q(
            "SELECT count(*) FROM rows r JOIN items i ON i.dedupe_key = r.item_key "
            "WHERE r.status = 'ok' AND json_extract(i.data, '$.tab') IS NULL"
        ).fetchone() == (0,)
        assert q(
            "SELECT count(*) FROM items i WHERE complete != (NOT EXISTS (SELECT 1 FROM rows r "
            "WHERE r.item_key = i.dedupe_key AND r.status != 'ok'))"
        ).fetchone() == (0,)
        return {
            "rows": q("SELECT count(*) FROM rows").fetchone()[0],
            "ok": q("SELECT count(*) FROM rows WHERE status = 'ok'").fetchone()[0],
            "items": q("SELECT count(*) FROM items").fetchone()[0],
        }
    finally:
        conn.close()


@pytest.mark.kill
def test_sigkill_during_commits_leaves_a_consistent_store(tmp_path: Path) -> None:
    path, n = tmp_path / "state.sqlite", 12000
    argv = [sys.executable, "-c", CRAWLER, str(path), str(n)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(42)
    progress = []
    for _ in range(6):
        proc = procs.popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # commits are flowing (or the run already ended)
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        if path.exists():
            progress.append(check_consistent(path))
    tabs = len(range(0, n, 3))
    # the kills landed mid-run, after some commits (else this test proves nothing)
    assert sum(0 < p["ok"] < n + tabs for p in progress) >= 5, progress
    procs.run(argv, env=env, check=True, timeout=240, stdout=subprocess.DEVNULL)
    final = check_consistent(path)
    assert final == {"rows": n + tabs, "ok": n + tabs, "items": n}
    with SqliteStore.open(path, readonly=True) as s:
        items = list(s.iter_items())
    assert len(items) == n
    for item in items:
        i = int(item.source_id)
        expected = {"i": i, "sq": i * i} | ({"tab": [f"t:{i}"]} if i % 3 == 0 else {})
        assert item.content_hash == content_hash(expected)


SEEDER = textwrap.dedent(
    """
    import json, random, sys
    from framework.workspace import NewRow, SqliteStore

    store = SqliteStore.open(sys.argv[1])
    batches = [list(range(b, b + 100)) for b in range(0, 2000, 100)]
    random.Random(int(sys.argv[2])).shuffle(batches)
    inserted = 0
    for batch in batches:
        inserted += len(store.seed([NewRow("list", f"http://site/{i}") for i in batch]))
    print(json.dumps(inserted))
    """
)


@pytest.mark.process
def test_two_processes_seeding_the_same_rows_make_one_row_each(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"  # does not exist yet: both also race to create it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        procs.popen(
            [sys.executable, "-c", SEEDER, str(path), str(seed)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in children]
    assert [p.returncode for p in children] == [0, 0]
    assert sum(json.loads(o) for o in outs) == 2000
    with SqliteStore.open(path) as s:
        assert s.row_counts() == {"list": {RowStatus.PENDING: 2000}}
    assert raw_count(path) == 2000


def raw_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(DISTINCT url) FROM rows").fetchone()[0])
