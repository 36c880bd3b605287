"""One conformance suite for every workspace store: the rules of the `Store` protocol
(framework/workspace/store.py) and the lease protocol (docs/scaling.md), run unchanged
on SQLite and on PostgreSQL.

The `backend` fixture is parametrized over both; each test gets a fresh workspace (a
file, or its own schema in a database of this session). PostgreSQL cases need
FRAMEWORK_TEST_PG (a server URL) and skip without it, unless FRAMEWORK_REQUIRE_PG=1.
A test speaks only through the store and leases APIs, never SQL, so the same assertion
holds on both; the few PostgreSQL-only facts (the database clock, a key inserted by two
transactions at once) are at the end.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from framework.errors import UsageError, WorkspaceError
from framework.workspace import (
    ErrorKind,
    ItemWrite,
    NewRow,
    Outcome,
    PartWrite,
    RequeueFilter,
    RowStatus,
    content_hash,
)
from framework.workspace.holds import INVALID, REVIEW
from framework.workspace.records import HoldWrite, ResponseWrite
from framework.workspace.sqlite_base import CHUNK
from tests.fixtures.workspace_backends import Backend, Clock


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def backend(
    request: pytest.FixtureRequest, make_workspace_backend: Callable[[str], Backend]
) -> Backend:
    """A fresh workspace on each backend in turn."""
    return make_workspace_backend(str(request.param))


@pytest.fixture
def pg(make_workspace_backend: Callable[[str], Backend]) -> Backend:
    """A PostgreSQL workspace only: for what SQLite has no counterpart of."""
    return make_workspace_backend("postgres")


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


def subtab(key: str, tab: str, required: bool = True) -> NewRow:
    return NewRow(
        kind=f"detail.{tab}",
        url=f"http://site/{key}/tab/{tab}",
        context={"item_key": key, "tab": tab, "required": required},
    )


def snapshot(store: Any) -> dict[str, Any]:
    """Everything a store holds, read through its API."""
    rows = list(store.iter_rows())
    return {
        "rows": rows,
        "attempts": {r.id: store.attempts(r.id) for r in rows},
        "items": list(store.iter_items(complete_only=False)),
        "max_row_id": store.max_row_id(),
    }


# schema and meta ------------------------------------------------------------------------


def test_schema_is_created_once_and_a_newer_one_is_refused(backend: Backend) -> None:
    first = backend.open()
    version = first.get_meta("schema_version")
    assert version is not None
    first.set_metas({"a": "1", "b": "2"})
    first.set_meta("a", "3")
    again = backend.open()  # a second opener finds the schema and changes nothing
    assert (again.get_meta("schema_version"), again.get_meta("a"), again.get_meta("b")) == (
        version,
        "3",
        "2",
    )
    assert again.get_meta("missing") is None
    again.set_meta("schema_version", str(int(version) + 1))
    with pytest.raises(WorkspaceError, match="newer framework"):
        backend.open()


def test_meta_keys_are_found_by_their_exact_prefix_and_deleted(store: Any) -> None:
    keys = ["read_with:a_b:1", "read_with:a_b:2", "read_withXa_b:3", "read_with:%:4", "other"]
    store.set_metas({k: "t" for k in keys})
    # `_` and `%` are characters of the prefix, not patterns
    assert store.metas("read_with:a_") == {"read_with:a_b:1": "t", "read_with:a_b:2": "t"}
    assert store.metas("read_with:%") == {"read_with:%:4": "t"}
    store.delete_metas(["read_with:a_b:1", "absent"])
    assert sorted(store.metas("read_with")) == [
        "read_with:%:4",
        "read_with:a_b:2",
        "read_withXa_b:3",
    ]
    assert store.get_meta("other") == "t"
    # --fresh deletes the rows: what their pages were read with goes with them
    store.reset_rows()
    assert store.metas("read_with") == {"read_withXa_b:3": "t"}
    assert store.get_meta("other") == "t"


def test_a_readonly_store_reads_and_refuses_writes(backend: Backend) -> None:
    with pytest.raises(WorkspaceError):
        backend.open(readonly=True)  # nothing there yet: not a workspace
    (row,) = backend.open().seed([NewRow("detail", "http://site/d")])
    ro = backend.open(readonly=True)
    assert [r.id for r in ro.resumable(3)] == [row.id]
    with pytest.raises(WorkspaceError, match="read-only"):
        ro.seed([NewRow("detail", "http://site/e")])
    with pytest.raises(WorkspaceError, match="read-only"):
        ro.commit(Outcome(row.id, ok=True))
    assert ro.get_row(row.id) == row


# queue ----------------------------------------------------------------------------------


def test_seed_is_idempotent(store: Any) -> None:
    rows = [NewRow("detail", f"http://site/{i}") for i in range(3)]
    first = store.seed([*rows, rows[0]])  # a duplicate inside the batch counts once
    assert [r.url for r in first] == [r.url for r in rows]
    assert [r.status for r in first] == [RowStatus.PENDING] * 3
    assert store.seed(rows) == []
    other = store.seed(
        [
            NewRow("detail", "http://site/0", method="POST", body="a=1", body_type="form"),
            NewRow("list", "http://site/0"),  # another kind: another row
        ]
    )
    assert len(other) == 2
    assert [r.id for r in store.iter_rows()] == [r.id for r in first + other]
    assert store.get_row(first[0].id) == first[0]


def test_a_commit_that_fails_midway_leaves_nothing(store: Any) -> None:
    (page,) = store.seed([NewRow("list", "http://site/1")])
    store.commit(Outcome(page.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    before = snapshot(store)
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
    assert snapshot(store) == before
    unknown_part = Outcome(
        page.id,
        ok=True,
        new_rows=[NewRow("detail", "http://site/x")],
        items=[ItemWrite("t:3", "t", "3", {"a": 3})],
        parts=[PartWrite("t:404", "rulings", [1])],
    )
    with pytest.raises(WorkspaceError, match="unknown item"):
        store.commit(unknown_part)
    assert snapshot(store) == before
    with pytest.raises(WorkspaceError, match="unknown row"):
        store.commit(Outcome(page.id + 1000, ok=True))
    # the store is still usable, on the same connection, after the rollbacks
    r = store.commit(Outcome(page.id, ok=True, new_rows=[NewRow("detail", "http://site/d0")]))
    assert (r.attempt, r.status, len(r.inserted)) == (2, RowStatus.OK, 1)


def test_a_group_commit_is_all_or_nothing(store: Any) -> None:
    a, b = store.seed([NewRow("detail", "http://site/a"), NewRow("detail", "http://site/b")])
    before = snapshot(store)
    with pytest.raises(WorkspaceError, match="unknown row"):
        store.commit_many(
            [
                Outcome(a.id, ok=True, items=[ItemWrite("t:a", "t", "a", {})]),
                Outcome(b.id + 1000, ok=True),
            ]
        )
    assert snapshot(store) == before
    got = store.commit_many([Outcome(a.id, ok=True), Outcome(b.id, ok=False)])
    assert [r.status for r in got] == [RowStatus.OK, RowStatus.ERROR]


def test_discovered_rows_are_unique_and_ids_never_reused(store: Any) -> None:
    p1, p2 = store.seed([NewRow("list", "http://site/p1"), NewRow("list", "http://site/p2")])
    found = [NewRow("detail", f"http://site/d{i}") for i in range(4)]
    r1 = store.commit(Outcome(p1.id, ok=True, new_rows=found[:3] + found[:1]))
    assert [r.url for r in r1.inserted] == [f.url for f in found[:3]]
    assert all(r.parent_id == p1.id for r in r1.inserted)
    r2 = store.commit(Outcome(p2.id, ok=True, new_rows=found))
    assert [r.url for r in r2.inserted] == ["http://site/d3"]
    assert r2.inserted[0].parent_id == p2.id
    assert sum(n for kinds in store.row_counts().values() for n in kinds.values()) == 6
    top = store.max_row_id()
    assert top == r2.inserted[0].id
    store.reset_rows()
    assert store.row_counts() == {}
    (again,) = store.seed([NewRow("list", "http://site/p1")])
    assert again.id > top  # never reused, so the logs' row ids always name one row


def test_commit_records_attempts_and_typed_errors(store: Any) -> None:
    (row,) = store.seed([NewRow("detail", "http://site/d")])
    r1 = store.commit(
        Outcome(row.id, ok=False, http_status=503, error_kind=ErrorKind.HTTP_5XX, error="x" * 9000)
    )
    r2 = store.commit(Outcome(row.id, ok=False, error_kind=ErrorKind.TIMEOUT, error="slow"))
    r3 = store.commit(Outcome(row.id, ok=True, http_status=200))
    assert [(r.status, r.attempt) for r in (r1, r2, r3)] == [
        (RowStatus.ERROR, 1),
        (RowStatus.ERROR, 2),
        (RowStatus.OK, 3),
    ]
    history = store.attempts(row.id)
    assert [(a["n"], a["outcome"], a["http_status"], a["error_kind"]) for a in history] == [
        (1, "error", 503, "http_5xx"),
        (2, "error", None, "timeout"),
        (3, "ok", 200, None),
    ]
    assert len(history[0]["error"]) == 2000
    final = store.get_row(row.id)
    assert (final.status, final.attempts, final.last_http_status) == (RowStatus.OK, 3, 200)
    assert (final.last_error_kind, final.last_error) == (ErrorKind.TIMEOUT, "slow")
    assert store.failures(row.id) == 2
    # a re-extraction made no request: no attempt spent, none recorded
    r4 = store.commit(Outcome(row.id, ok=True, reparse=True))
    assert r4.attempt == 3
    assert len(store.attempts(row.id)) == 3


def test_a_reparse_group_writes_only_what_changed(backend: Backend) -> None:
    """A group of re-extracted pages: an unchanged page, a changed one, one that now
    finds a new row, one whose row had failed, and two pages of one item. Each result is
    what committing them one by one gives; on SQLite the unchanged page's row is not
    even touched (its pages are read without any write: the reparse's fast path)."""
    store = backend.open()
    rows = store.seed([NewRow("detail", f"http://site/r{i}") for i in range(6)])
    a, b, c, d, e, f = rows
    for row in (a, b, c, e, f):
        key = "t:ef" if row in (e, f) else f"t:{row.id}"
        item = ItemWrite(key, "t", key[2:], {"v": row.id})
        store.commit(Outcome(row.id, ok=True, http_status=200, items=[item]))
    store.commit(Outcome(d.id, ok=False, http_status=200, error_kind=ErrorKind.PARSE))
    before = {r.id: r for r in store.iter_rows()}
    time.sleep(0.01)  # so that a row written now has another updated_at

    def again(row: Any, key: str, value: Any, **more: Any) -> Outcome:
        item = ItemWrite(key, "t", key[2:], {"v": value})
        return Outcome(row.id, ok=True, http_status=200, reparse=True, items=[item], **more)

    found = [NewRow("detail", "http://site/found")]
    got = store.commit_many(
        [
            again(a, f"t:{a.id}", a.id),
            again(b, f"t:{b.id}", "new"),
            again(c, f"t:{c.id}", c.id, new_rows=found),
            again(d, f"t:{d.id}", d.id),
            again(e, "t:ef", e.id),
            again(f, "t:ef", f.id),
        ]
    )
    assert [
        (r.status, r.attempt, r.items_new, r.items_changed, r.items_unchanged) for r in got
    ] == [
        (RowStatus.OK, 1, 0, 0, 1),  # unchanged
        (RowStatus.OK, 1, 0, 1, 0),  # changed
        (RowStatus.OK, 1, 0, 0, 1),  # unchanged item, and a row found
        (RowStatus.OK, 1, 1, 0, 0),  # was an error: ok now, its item new
        (RowStatus.OK, 1, 0, 1, 0),  # t:ef written by e, as stored before: f's value...
        (RowStatus.OK, 1, 0, 1, 0),  # ...then f's, which reads e's: both are changes
    ]
    assert [r.url for r in got[2].inserted] == ["http://site/found"]
    assert store.get_item(f"t:{b.id}").data == {"v": "new"}
    assert store.get_item("t:ef").data == {"v": f.id}
    assert store.get_row(d.id).status is RowStatus.OK
    assert len(list(store.iter_items(complete_only=False))) == 5
    if backend.name == "sqlite":
        assert store.get_row(a.id).updated_at == before[a.id].updated_at  # not touched
        assert store.get_row(b.id).updated_at != before[b.id].updated_at


# items ----------------------------------------------------------------------------------


def test_identical_content_changes_nothing_and_new_content_replaces(store: Any) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/d")])
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1, "b": "é"})]))
    assert (r.items_new, r.items_changed, r.items_unchanged, r.completed) == (1, 0, 0, ["t:1"])
    first = store.get_item("t:1")
    assert first.content_hash == content_hash({"b": "é", "a": 1})
    store.requeue(RequeueFilter(kind="detail"), 3)
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"b": "é", "a": 1})]))
    assert (r.items_new, r.items_changed, r.items_unchanged, r.changed) == (0, 0, 1, [])
    assert store.get_item("t:1") == first  # not even last_scraped moved
    store.requeue(RequeueFilter(kind="detail"), 3)
    r = store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 2, "b": "é"})]))
    assert (r.items_new, r.items_changed, r.items_unchanged, r.changed) == (0, 1, 0, ["t:1"])
    second = store.get_item("t:1")
    assert second.content_hash == content_hash({"a": 2, "b": "é"}) != first.content_hash
    assert second.first_scraped == first.first_scraped
    assert second.last_scraped > first.last_scraped
    assert dict(second.data) == {"a": 2, "b": "é"}
    assert store.item_counts() == {"complete": 1, "incomplete": 0}


def test_completeness_is_recomputed_from_the_rows(store: Any) -> None:
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
    assert store.incomplete_keys(10) == ["t:1"]
    r = store.commit(Outcome(rulings.id, ok=True, parts=[PartWrite("t:1", "rulings", [{"n": 1}])]))
    assert (r.completed, r.items_changed) == ([], 1)
    store.commit(Outcome(hearings.id, ok=False, error_kind=ErrorKind.HTTP_5XX, error="500"))
    store.commit(Outcome(notes.id, ok=False, error_kind=ErrorKind.HTTP_4XX, error="404"))
    assert store.get_item("t:1").complete is False
    r = store.commit(Outcome(hearings.id, ok=True, parts=[PartWrite("t:1", "hearings", [])]))
    assert r.completed == ["t:1"]  # the optional `notes` tab is in error: not required
    item = store.get_item("t:1")
    assert item.complete
    assert dict(item.data) == {"title": "one", "rulings": [{"n": 1}], "hearings": []}
    assert item.content_hash == content_hash(item.data)
    # a re-crawled detail page keeps the merged parts: identical content
    store.requeue(RequeueFilter(kind="detail"), 3)
    assert store.get_item("t:1").complete is False  # its own row is pending again
    r = store.commit(
        Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"title": "one"}, complete=False)])
    )
    assert (r.items_unchanged, r.completed) == (1, ["t:1"])
    assert store.get_item("t:1") == item
    # a required tab fetched again on purpose makes the item incomplete until it is ok
    assert store.requeue(RequeueFilter(kind="detail.rulings"), 3) == 1
    assert store.item_counts() == {"complete": 0, "incomplete": 1}
    r = store.commit(Outcome(rulings.id, ok=True, parts=[PartWrite("t:1", "rulings", [{"n": 1}])]))
    assert (r.completed, r.items_unchanged) == (["t:1"], 1)


def test_an_item_declared_incomplete_waits_for_a_row(store: Any) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/case/1")])
    store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {}, complete=False)]))
    assert store.item_counts() == {"complete": 0, "incomplete": 1}


def test_reset_rows_keeps_items_and_relinks_them(store: Any) -> None:
    (d,) = store.seed([NewRow("detail", "http://site/d")])
    store.commit(Outcome(d.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    store.reset_rows()
    item = store.get_item("t:1")
    assert (item.row_id, item.complete) == (None, True)
    (d2,) = store.seed([NewRow("detail", "http://site/d")])
    r = store.commit(Outcome(d2.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
    assert r.items_unchanged == 1
    assert store.get_item("t:1").row_id == d2.id


def test_iter_items_keyset_order_after_and_only(store: Any) -> None:
    n = CHUNK * 2 + 37
    (page,) = store.seed([NewRow("list", "http://site/")])
    keys = [f"t:{i:05d}" for i in range(n)] + ["t:Z", "t:a", "t:é", "t:_"]  # byte order
    random.Random(7).shuffle(keys)
    items = [
        ItemWrite(k, "t", k[2:], {"k": k}, complete=not k.endswith("3"))
        for k in keys  # every key ending in 3 declared incomplete, without rows
    ]
    store.commit(Outcome(page.id, ok=True, items=items))
    everything = [i.dedupe_key for i in store.iter_items(complete_only=False)]
    assert everything == sorted(keys)
    done = [i.dedupe_key for i in store.iter_items()]
    assert done == sorted(k for k in keys if not k.endswith("3"))
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


def test_iterating_while_committing_sees_a_consistent_stream(store: Any) -> None:
    rows = store.seed([NewRow("detail", f"http://site/{i}") for i in range(CHUNK + 10)])
    seen = []
    for row in store.resumable(3):  # commit while streaming on the same thread
        seen.append(row.id)
        store.commit(Outcome(row.id, ok=True))
    assert seen == [r.id for r in rows]
    assert list(store.resumable(3)) == []
    assert [r.id for r in store.iter_rows(status=RowStatus.OK)] == seen


# queue reads ----------------------------------------------------------------------------


def test_resumable_order_and_attempts_budget(store: Any) -> None:
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
    assert [r.id for r in store.exhausted(3, limit=1)] == [spent.id]
    assert store.get_row(gone.id).retryable is False
    (x,) = store.seed([NewRow("detail", "http://site/x")])
    store.commit(Outcome(x.id, ok=False, error_kind=ErrorKind.HTTP_5XX, retryable=False))
    assert x.id not in [r.id for r in store.resumable(3)]  # the outcome's flag wins


def test_refund_gives_attempts_back_and_keeps_history(store: Any) -> None:
    a, b = store.seed([NewRow("detail", "http://site/a"), NewRow("detail", "http://site/b")])
    for _ in range(3):
        store.commit(Outcome(a.id, ok=False, error_kind=ErrorKind.CONNECT))
    store.commit(Outcome(b.id, ok=False, error_kind=ErrorKind.CONNECT))
    assert store.counts(3) == {"pending": 0, "retryable": 1, "exhausted": 1}
    store.refund({a.id: 2, b.id: 5})  # never below 0
    assert (store.get_row(a.id).attempts, store.get_row(b.id).attempts) == (1, 0)
    assert store.counts(3) == {"pending": 0, "retryable": 2, "exhausted": 0}
    assert len(store.attempts(a.id)) == 3
    store.refund({})


def test_row_counts_misbehaving_and_filters(store: Any) -> None:
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
    assert (store.failures(d1.id), store.failures(d3.id)) == (2, 0)
    assert [r.id for r in store.iter_rows(status=RowStatus.ERROR)] == [d1.id, d2.id]
    assert [r.id for r in store.iter_rows(kind="list")] == [lst.id]
    assert [r.id for r in store.iter_rows(status=RowStatus.OK, kind="detail")] == [d0.id]


def test_requeue_filters(store: Any) -> None:
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
    assert store.get_row(t0.id).retryable is True
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


# what status, reparse and review read -------------------------------------------------


def test_ok_attempts_and_stored_responses(store: Any) -> None:
    a, b, c = store.seed([NewRow("detail", f"http://site/{i}") for i in range(3)])
    assert store.responses_size() == (0, 0)
    body = "<html>é</html>".encode() * 50
    store.commit(Outcome(a.id, ok=False, error_kind=ErrorKind.TIMEOUT))
    r = store.commit(
        Outcome(
            a.id,
            ok=True,
            http_status=200,
            response=ResponseWrite("http://site/0", "http://site/0/", 200, "text/html", body),
        )
    )
    assert 0 < r.response_bytes < len(body)  # compressed
    store.commit(
        Outcome(b.id, ok=True, response=ResponseWrite("http://site/1", "http://x/", 404, None, b""))
    )
    again = ResponseWrite("http://site/1", "http://y/", 200, None, b"2")
    store.commit(Outcome(b.id, ok=True, response=again))  # replaces the stored answer
    assert store.ok_attempts([a.id, b.id, c.id, 999]) == {a.id: 1, b.id: 2}
    n, size = store.responses_size()
    assert n == 2
    assert size >= r.response_bytes
    got = [(row.id, resp.final_url, resp.status, resp.body) for row, resp in store.iter_responses()]
    assert got == [(a.id, "http://site/0/", 200, body), (b.id, "http://y/", 200, b"2")]
    assert store.quick_check() is None


@pytest.mark.parametrize("chunk", [2, CHUNK])
def test_stored_responses_of_some_kinds_are_left_unread(
    store: Any, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for reader in ("sqlite_read", "postgres_read"):  # pages smaller than a kind's run
        monkeypatch.setattr(f"framework.workspace.{reader}.CHUNK", chunk)
    rows = store.seed([NewRow(kind, f"http://site/{kind}/{i}") for i in range(3) for kind in "abc"])
    for row in rows:
        page = ResponseWrite(row.url, row.url, 200, "text/html", row.url.encode())
        ok = row.kind != "c" or row.url.endswith("/0")  # kind c: one ok row, two failed
        kind = None if ok else ErrorKind.PARSE
        store.commit(Outcome(row.id, ok=ok, error_kind=kind, http_status=200, response=page))
    store.seed([NewRow("d", "http://site/d/0")])  # a row without a stored response
    every = [(row.id, resp.body) for row, resp in store.iter_responses()]
    assert every == [(r.id, r.url.encode()) for r in rows]
    for skipped in ([], ["b"], ["a", "c"], ["a", "b", "c"], ["d", "x"]):
        got = [(row.id, row.kind, resp.body) for row, resp in store.iter_responses(skipped)]
        assert got == [(r.id, r.kind, r.url.encode()) for r in rows if r.kind not in skipped]
        assert store.responses_of(skipped) == sum(r.kind in skipped for r in rows)


def test_holds_are_kept_counted_and_decided(store: Any) -> None:
    a, b = store.seed([NewRow("detail", "http://site/a"), NewRow("detail", "http://site/b")])
    store.commit(Outcome(a.id, ok=True, items=[ItemWrite("t:a", "t", "a", {"n": 1, "tab": 0})]))
    store.requeue(RequeueFilter(kind="detail"), 3)
    change = [{"rule": "max_change", "field": "n", "value": 50}]
    store.commit(
        Outcome(a.id, ok=True, holds=[HoldWrite("t:a", "t", "a", {"n": 50}, REVIEW, change)])
    )
    bad = [{"rule": "min", "field": "n", "value": -1}]
    store.commit(
        Outcome(b.id, ok=True, holds=[HoldWrite("t:b", "t", "b", {"n": -1}, INVALID, bad)])
    )
    assert store.hold_counts() == {
        "total": 2,
        "by_status": {REVIEW: 1, INVALID: 1},
        "by_rule": {"n: max_change": 1, "n: min": 1},
    }
    held = list(store.iter_holds())
    assert [(h.dedupe_key, h.status, h.has_item, h.row_id) for h in held] == [
        ("t:a", REVIEW, True, a.id),
        ("t:b", INVALID, False, b.id),
    ]
    assert [h.dedupe_key for h in store.iter_holds(REVIEW)] == ["t:a"]
    assert store.get_item("t:a").data == {"n": 1, "tab": 0}  # the accepted version stays
    with pytest.raises(UsageError, match="held as invalid"):
        store.decide_hold("t:b", True)
    with pytest.raises(UsageError, match="not held"):
        store.decide_hold("t:zz", False)
    decided = store.decide_hold("t:a", True)
    assert decided.data == {"n": 50}
    item = store.get_item("t:a")
    assert dict(item.data) == {"n": 50}  # "tab" was no merged part: not carried over
    assert item.content_hash == content_hash(item.data)
    assert [h.dedupe_key for h in store.iter_holds()] == ["t:b"]
    # a later candidate that passes is stored and drops the hold of its key
    store.requeue(RequeueFilter(url_contains="/b"), 3)
    store.commit(Outcome(b.id, ok=True, items=[ItemWrite("t:b", "t", "b", {"n": 2})]))
    assert store.hold_counts()["total"] == 0


def test_fill_counts_per_kind_and_field(store: Any) -> None:
    (d, e) = store.seed([NewRow("detail", "http://site/d"), NewRow("other", "http://site/e")])
    store.commit(
        Outcome(
            d.id,
            ok=True,
            items=[
                ItemWrite("t:1", "t", "1", {"a": 1, "b": "", "c": [], "d": {}, "e": None}),
                ItemWrite("t:2", "t", "2", {"a": 0, "b": "x", "c": [1], "d": {"k": 1}, "e": False}),
            ],
        )
    )
    store.commit(Outcome(e.id, ok=True, items=[ItemWrite("t:3", "t", "3", {"a": "é"})]))
    assert store.fill_counts() == {
        "detail": {"records": 2, "fields": {"a": 2, "b": 1, "c": 1, "d": 1, "e": 1}},
        "other": {"records": 1, "fields": {"a": 1}},
    }


# leases ---------------------------------------------------------------------------------


def seed_ten(store: Any) -> list[Any]:
    return store.seed([NewRow("detail", f"http://h/{i}") for i in range(10)])


def test_claims_never_overlap_across_connections(backend: Backend) -> None:
    seed_ten(backend.open())
    clock = Clock()
    a = backend.leases(backend.open(), clock=clock)
    b = backend.leases(backend.open(), clock=clock)
    got_a = [r.id for r in a.claim(4, 3)]
    got_b = [r.id for r in b.claim(100, 3)]
    assert (len(got_a), len(got_b)) == (4, 6)
    assert got_a == sorted(got_a)  # oldest first
    assert not set(got_a) & set(got_b)
    assert a.claim(5, 3) == []
    assert b.claim(5, 3) == []
    assert b.token(got_b[0]) > a.token(got_a[0])
    assert a.others_working(3)
    assert b.others_working(3)


def test_concurrent_claims_split_the_rows(backend: Backend) -> None:
    rows = backend.open().seed([NewRow("detail", f"http://h/{i}") for i in range(200)])
    workers = [backend.leases(backend.open(), lease=600) for _ in range(4)]
    taken: list[list[int]] = [[] for _ in workers]
    start = threading.Barrier(len(workers))
    failed: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            while got := workers[i].claim(7, 3):
                taken[i] += [r.id for r in got]
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    every = [rid for ids in taken for rid in ids]
    assert sorted(every) == [r.id for r in rows]  # each row claimed by exactly one worker
    tokens = [w.token(rid) for w, ids in zip(workers, taken, strict=True) for rid in ids]
    assert None not in tokens


def test_an_expired_lease_is_taken_over_and_the_heartbeat_names_it(backend: Backend) -> None:
    seed_ten(backend.open())
    clock = Clock()
    a = backend.leases(backend.open(), lease=5, clock=clock)
    b = backend.leases(backend.open(), lease=5, clock=clock)
    rows = a.claim(10, 3)
    old = a.token(rows[0].id)
    clock.now += 3
    assert a.heartbeat() == set()  # renewed: good for 5 more seconds
    clock.now += 4
    assert b.claim(10, 3) == []  # still a's
    clock.now += 2  # past the renewed expiry: a was away
    taken = b.claim(10, 3)
    assert [r.id for r in taken] == [r.id for r in rows]
    assert b.token(rows[0].id) > old
    assert a.heartbeat() == {r.id for r in rows}  # a learns it lost them
    assert not b.others_working(3)


def test_a_fenced_commit_writes_nothing(backend: Backend) -> None:
    (row,) = backend.open().seed([NewRow("list", "http://h/list")])
    clock = Clock()
    a = backend.leases(backend.open(), lease=5, clock=clock)
    b = backend.leases(backend.open(), lease=5, clock=clock)
    (mine,) = a.claim(1, 3)
    clock.now += 6
    (theirs,) = b.claim(1, 3)
    assert mine.id == theirs.id == row.id
    before = snapshot(b.store)
    late = Outcome(
        row.id,
        ok=True,
        lease_token=a.token(row.id),
        new_rows=[NewRow("detail", "http://h/late")],
        items=[ItemWrite("t:late", "t", "late", {"a": 1})],
        response=None,
    )
    assert a.store.commit_many([late]) == [None]
    with pytest.raises(WorkspaceError, match="refused"):
        a.store.commit(late)
    assert snapshot(b.store) == before  # not the status, an attempt, a row or an item
    r = b.store.commit(
        Outcome(row.id, ok=True, lease_token=b.token(row.id), new_rows=[NewRow("d", "http://h/d")])
    )
    assert (r.status, r.attempt, len(r.inserted)) == (RowStatus.OK, 1, 1)
    assert b.store.get_item("t:late") is None
    b.done(row.id)
    assert b.heartbeat() == set()  # an ok row dropped its lease: nothing to renew or lose
    assert not a.others_working(3)


def test_a_failed_row_keeps_its_lease_and_an_ok_row_drops_it(backend: Backend) -> None:
    seed_ten(backend.open())
    clock = Clock()
    a = backend.leases(backend.open(), clock=clock)
    b = backend.leases(backend.open(), clock=clock)
    first, second = a.claim(2, 3)
    a.store.commit(
        Outcome(first.id, ok=False, error_kind=ErrorKind.TIMEOUT, lease_token=a.token(first.id))
    )
    a.store.commit(Outcome(second.id, ok=True, lease_token=a.token(second.id)))
    claimed = [r.id for r in b.claim(100, 3)]
    assert first.id not in claimed  # a still retries it
    assert second.id not in claimed  # done
    assert len(claimed) == 8


def test_claim_ids_leases_only_free_rows(backend: Backend) -> None:
    rows = seed_ten(backend.open())
    clock = Clock()
    a = backend.leases(backend.open(), clock=clock)
    b = backend.leases(backend.open(), clock=clock)
    held = [r.id for r in a.claim(3, 3)]
    wanted = [r.id for r in rows[:5]]
    got = b.claim_ids(wanted)
    assert got == set(wanted) - set(held)
    assert b.claim_ids([]) == set()
    assert {r.id for r in a.claim(100, 3)} == {r.id for r in rows[5:]}


def test_stop_releases_and_exhausted_rows_are_not_work(backend: Backend) -> None:
    store = backend.open()
    rows = seed_ten(store)
    clock = Clock()
    a = backend.leases(backend.open(), clock=clock)
    b = backend.leases(backend.open(), clock=clock)
    assert len(a.claim(4, 3)) == 4
    a.stop()
    assert a.tokens == {}
    assert not b.others_working(3)
    store.commit(Outcome(rows[9].id, ok=False, retryable=False, error="gone"))
    assert [r.id for r in b.claim(100, 3)] == [r.id for r in rows[:9]]
    assert a.heartbeat() == set()  # it holds nothing any more


def test_claim_takes_the_first_kinds_before_older_rows(backend: Backend) -> None:
    if "first" not in inspect.signature(backend.leases(backend.open()).claim).parameters:
        pytest.skip("this store's claim has no `first` kinds")
    store = backend.open()
    details = store.seed([NewRow("detail", f"http://h/d{i}") for i in range(4)])
    pages = store.seed([NewRow("list", f"http://h/p{i}") for i in range(2)])
    clock = Clock()
    a = backend.leases(backend.open(), clock=clock)
    b = backend.leases(backend.open(), clock=clock)
    got = a.claim(3, 3, first=["list"])
    assert [r.id for r in got] == [pages[0].id, pages[1].id, details[0].id]
    assert [r.id for r in b.claim(2, 3, first=["list"])] == [details[1].id, details[2].id]
    assert [r.id for r in b.claim(5, 3)] == [details[3].id]
    assert len({a.token(r.id) for r in got}) == 1  # one claim, one token


def test_four_workers_share_a_job_and_nothing_is_done_twice(backend: Backend) -> None:
    """A small crawl by 4 threads, each its own connection and worker: rows are found
    by two pages at once (n finds 2n+1, 2n+2 and n+1) and every page rewrites one shared
    item, so commits race on the same new rows and the same item. Each row ends ok
    after exactly one attempt, one row per URL, one item per key."""
    n_rows = 150
    backend.open().seed([NewRow("detail", "http://h/0")])
    workers = [backend.leases(backend.open(), lease=600) for _ in range(4)]
    failed: list[BaseException] = []
    done: list[list[int]] = [[] for _ in workers]

    def crawl(i: int) -> None:
        worker = workers[i]
        try:
            while True:
                got = worker.claim(3, 3)
                if not got:
                    if worker.others_working(3):
                        time.sleep(0.002)
                        continue
                    return
                for row in got:
                    n = int(row.url.rsplit("/", 1)[1])
                    found = [k for k in (2 * n + 1, 2 * n + 2, n + 1) if k < n_rows]
                    (res,) = worker.store.commit_many(
                        [
                            Outcome(
                                row.id,
                                ok=True,
                                lease_token=worker.token(row.id),
                                new_rows=[NewRow("detail", f"http://h/{k}") for k in found],
                                items=[
                                    ItemWrite(f"t:{n}", "t", str(n), {"n": n}),
                                    ItemWrite("t:shared", "t", "shared", {"last": n}),
                                ],
                            )
                        ]
                    )
                    assert res is not None, "a live lease was fenced"
                    worker.done(row.id)
                    done[i].append(n)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert sorted(n for ns in done for n in ns) == list(range(n_rows))  # each page once
    store = backend.open()
    rows = list(store.iter_rows())
    assert sorted(r.url for r in rows) == sorted(f"http://h/{n}" for n in range(n_rows))
    assert {(r.status, r.attempts) for r in rows} == {(RowStatus.OK, 1)}
    assert store.ok_attempts([r.id for r in rows]) == {r.id: 1 for r in rows}
    assert store.item_counts() == {"complete": n_rows + 1, "incomplete": 0}
    assert store.get_item("t:shared").data["last"] in range(n_rows)


# PostgreSQL only ------------------------------------------------------------------------


@pytest.mark.pg
def test_pg_leases_expire_by_the_database_clock(pg: Backend) -> None:
    from framework.workspace.postgres_leases import leased_rows, reset, workers

    store = pg.open()
    seed_ten(store)
    a = pg.leases(pg.open(), lease=0.05)  # no clock given: now() on the server
    b = pg.leases(pg.open(), lease=600)
    assert len(a.claim(10, 3)) == 10
    assert leased_rows(store) == 10
    time.sleep(0.1)  # past a's lease on any clock
    assert leased_rows(store) == 0
    assert len(b.claim(10, 3)) == 10
    assert a.heartbeat() == {r.id for r in store.iter_rows()}
    assert {w.id: w.leased for w in workers(store)} == {a.worker_id: 0, b.worker_id: 10}
    assert reset(store) == 10
    assert all(w.stopped_at is not None for w in workers(store))


@pytest.mark.pg
def test_pg_a_row_another_claim_has_locked_is_not_the_end(pg: Backend) -> None:
    """A claim passes over a row another worker's claim has locked (SKIP LOCKED), and
    until that claim commits nobody holds the row: the worker is told it was passed
    over, so that it looks again instead of finishing with the row pending."""
    import psycopg

    (row,) = pg.open().seed([NewRow("list", "http://h/start")])
    worker = pg.leases(pg.open())
    with psycopg.connect(pg.where) as other:  # another worker's claim, in flight
        other.execute("SELECT id FROM rows WHERE id = %s FOR UPDATE", (row.id,))
        assert worker.claim(10, 3) == []
        assert not worker.others_working(3)
        assert worker.claim_passed_over(3)
        other.rollback()  # its claim gave the row up (or leased it: others_working)
    assert [r.id for r in worker.claim(10, 3)] == [row.id]
    assert not worker.claim_passed_over(3)  # held now: by this worker


def test_rows_held_by_a_claim_are_not_passed_over(backend: Backend) -> None:
    seed_ten(backend.open())
    a, b = backend.leases(backend.open()), backend.leases(backend.open())
    assert len(a.claim(10, 3)) == 10
    assert b.claim(10, 3) == []
    assert b.others_working(3)  # held by a: b waits for a, nothing was passed over
    assert not b.claim_passed_over(3)


@pytest.mark.pg
def test_pg_an_item_key_inserted_by_two_commits_at_once(pg: Backend) -> None:
    """Two workers store the same new item at the same moment: the commit that loses
    the race runs again and finds the item (one item, nothing lost, no error)."""
    import psycopg

    store = pg.open()
    (row,) = store.seed([NewRow("detail", "http://h/d")])
    with (
        psycopg.connect(pg.where) as other,  # its transaction stays open
        psycopg.connect(pg.where, autocommit=True) as watch,  # sees live activity
    ):
        other.execute(
            "INSERT INTO items (dedupe_key, source_type, source_id, data, content_hash, "
            "first_scraped, last_scraped, complete, row_id) "
            "VALUES ('t:1', 't', '1', '{\"a\":0}', 'sha256:x', 'then', 'then', 1, NULL)"
        )
        result: list[Any] = []
        t = threading.Thread(
            target=lambda: result.append(
                store.commit(Outcome(row.id, ok=True, items=[ItemWrite("t:1", "t", "1", {"a": 1})]))
            )
        )
        t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the commit waits on the open insert
            (waiting,) = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()  # type: ignore[misc]
            if waiting:
                break
            time.sleep(0.01)
        other.commit()
    t.join()
    (r,) = result
    assert (r.items_new, r.items_changed) == (0, 1)  # ran again: it found the item
    item = store.get_item("t:1")
    assert (dict(item.data), item.row_id, item.first_scraped) == ({"a": 1}, row.id, "then")
    assert len(store.attempts(row.id)) == 1


def test_a_reparse_refreshes_the_carried_values_of_the_rows_its_page_found_first(
    store: Any,
) -> None:
    """framework/workspace/carry.py: only ``carry`` changes, only on rows whose parent is
    the page, only on a reparse; the ids of the rows changed come back, alone or in a
    group with other outcomes."""
    l1, l2 = store.seed([NewRow("list", "http://s/l1"), NewRow("list", "http://s/l2")])

    def found(a: int, page: int) -> list[NewRow]:
        return [
            NewRow("detail", "http://s/d1", context={"carry": {"a": a}}),
            NewRow("detail", "http://s/d2", context={"carry": {"a": 0}}),
            NewRow("next", "http://s/p", context={"page": page, "carry": {"a": a}}),
            NewRow("detail", "http://s/d3", context={"carry": {"a": a}}),
        ]

    d1, d2, p, d3 = store.commit(Outcome(l1.id, ok=True, new_rows=found(1, 2))).inserted
    # l2 finds d1 too: the row keeps l1's values, in a crawl and in a reparse
    store.commit(Outcome(l2.id, ok=True, new_rows=found(7, 7)[:1]))
    res = store.commit(Outcome(l2.id, ok=True, new_rows=found(7, 7)[:1], reparse=True))
    assert list(res.refreshed) == []
    assert store.get_row(d1.id).context == {"carry": {"a": 1}}
    # a crawl's commit (a page fetched again) never refreshes: only a reparse does
    res = store.commit(Outcome(l1.id, ok=True, new_rows=found(5, 9)))
    assert list(res.refreshed) == []
    # l1 read again: d1 and p get its new values (p keeps its page), d2 is as it was,
    # d3 loses its carried values (l1 no longer carries any into it)
    again = found(5, 9)
    again[3] = NewRow("detail", "http://s/d3")
    (res,) = store.commit_many([Outcome(l1.id, ok=True, new_rows=again, reparse=True)])
    assert list(res.refreshed) == sorted([d1.id, p.id, d3.id])
    assert store.get_row(d1.id).context == {"carry": {"a": 5}}
    assert store.get_row(d2.id).context == {"carry": {"a": 0}}
    assert store.get_row(p.id).context == {"page": 2, "carry": {"a": 5}}
    assert store.get_row(d3.id).context == {}
    group = [
        Outcome(l2.id, ok=True, reparse=True),
        Outcome(l1.id, ok=True, new_rows=found(6, 9), reparse=True),
    ]
    results = store.commit_many(group)
    assert [list(r.refreshed) for r in results] == [[], sorted([d1.id, p.id, d3.id])]
    assert store.get_row(d3.id).context == {"carry": {"a": 6}}


def test_iter_links_gives_the_rows_the_given_pages_found_first(store: Any) -> None:
    """What a reparse compares with the links its pages give now: the rows whose
    ``parent_id`` is one of the pages asked about (a row two pages link keeps the
    first), with their own status, method and body, in id order, over more than one
    chunk of the keyset read; seeds (no parent) never."""
    (seed,) = store.seed([NewRow("list", "http://s/l")])
    many = [NewRow("detail", f"http://s/d{i}") for i in range(CHUNK + 3)]
    post = NewRow("detail.tab", "http://s/tab", method="post", body="a=1", body_type="form")
    inserted = store.commit(Outcome(seed.id, ok=True, new_rows=[*many, post])).inserted
    other = inserted[0]
    store.commit(Outcome(other.id, ok=True, new_rows=[many[1], NewRow("detail", "http://s/x")]))
    rows = list(store.iter_rows())
    links = list(store.iter_links({seed.id, other.id}))
    assert [link.id for link in links] == [r.id for r in rows if r.parent_id]
    assert len(links) == CHUNK + 5
    by_url = {link.url: link for link in links}
    assert by_url["http://s/d1"].parent_id == seed.id  # found by two pages: the first
    assert by_url["http://s/x"].parent_id == other.id
    tab = by_url["http://s/tab"]
    assert (tab.kind, tab.method, tab.body, tab.status) == (
        "detail.tab",
        "POST",
        "a=1",
        RowStatus.PENDING,
    )
    assert by_url["http://s/d0"].status is RowStatus.OK
    assert [link.url for link in store.iter_links({other.id})] == ["http://s/x"]
    assert list(store.iter_links({seed.id + 10_000})) == []
    assert list(store.iter_links(set())) == []
