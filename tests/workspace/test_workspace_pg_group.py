"""A PostgreSQL group commit writes each table once for the whole group
(``PostgresStore._apply_group``): the same results and the same state as SQLite's,
which applies the outcomes one after the other; a fenced outcome in the middle of a
group is refused alone; a group whose outcomes share an item key is applied one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from framework.workspace import ErrorKind, ItemWrite, NewRow, Outcome, PartWrite
from framework.workspace.records import HoldWrite, ResponseWrite
from tests.fixtures.workspace_backends import Backend, Clock
from tests.workspace.test_workspace_pg_tally import assert_tallied

pytestmark = pytest.mark.pg


def body(n: int) -> ResponseWrite:
    url = f"https://x.test/{n}"
    return ResponseWrite(url, url, 200, "text/html", f"<p>{n}</p>".encode() * 20)


def groups() -> list[list[Outcome]]:
    """Three groups of a small job: found rows (one found by two pages of the group),
    items declared incomplete until their required sub-tab, a failure then its retry,
    a hold, and last a group whose pages name one item (applied one by one)."""
    sub = NewRow("detail.docs", "https://x.test/s1", context={"item_key": "k1"})
    d5 = NewRow("detail", "https://x.test/d5")
    first = [
        Outcome(
            1,
            ok=True,
            http_status=200,
            response=body(1),
            new_rows=[NewRow("detail", "https://x.test/d4"), d5],
        ),
        Outcome(
            2,
            ok=True,
            http_status=200,
            response=body(2),
            new_rows=[sub, d5],
            items=[ItemWrite("k1", "t", "1", {"a": 1}, complete=False)],
        ),
        Outcome(3, ok=False, http_status=503, error_kind=ErrorKind.HTTP_5XX, error="busy"),
        Outcome(4, ok=True, http_status=200, items=[ItemWrite("k3", "t", "3", {"c": 3})]),
    ]
    second = [
        Outcome(7, ok=True, http_status=200, parts=[PartWrite("k1", "docs", ["x"])]),
        Outcome(
            3,
            ok=True,
            http_status=200,
            response=body(3),
            items=[ItemWrite("k2", "t", "2", {"b": 2})],
        ),
        Outcome(
            5,
            ok=True,
            http_status=200,
            holds=[HoldWrite("k9", "t", "9", {"z": 9}, "invalid", [{"rule": "odd"}])],
        ),
    ]
    third = [
        Outcome(5, ok=True, http_status=200, items=[ItemWrite("k6", "t", "6", {"f": 6})]),
        Outcome(6, ok=False, http_status=500, error_kind=ErrorKind.HTTP_5XX, error="x"),
        Outcome(4, ok=True, reparse=True, parts=[PartWrite("k6", "more", 1)]),
    ]
    return [first, second, third]


def seed(store: Any) -> None:
    store.seed(
        [NewRow("list", "https://x.test/l")]
        + [NewRow("detail", f"https://x.test/d{n}") for n in (1, 2, 3)]
    )


def shown(res: Any) -> Any:
    if res is None:
        return None
    return (
        res.status,
        res.attempt,
        [(r.id, r.kind, r.url, r.parent_id, dict(r.context)) for r in res.inserted],
        res.items_new,
        res.items_changed,
        res.items_unchanged,
        sorted(res.completed),
        sorted(res.changed),
        res.response_bytes,
    )


def state(store: Any) -> Any:
    rows = [
        (r.id, r.kind, r.status, r.attempts, r.retryable, r.last_error_kind, r.last_http_status)
        for r in store.iter_rows()
    ]
    items = [(i.dedupe_key, dict(i.data), i.complete, i.row_id) for i in store.iter_items()]
    attempts = {
        r[0]: [(a["n"], a["attempt"], a["outcome"]) for a in store.attempts(r[0])] for r in rows
    }
    return rows, items, attempts, sorted(h.dedupe_key for h in store.iter_holds())


def test_a_group_commit_gives_what_sqlite_gives_one_by_one(
    make_workspace_backend: Callable[[str], Backend],
) -> None:
    lite = make_workspace_backend("sqlite").open()
    pg = make_workspace_backend("postgres").open()
    for store in (lite, pg):
        seed(store)
    one_by_one: list[int] = []
    apply_outcome = pg._apply_outcome

    def spy(conn: Any, outcome: Outcome, now: str) -> Any:
        one_by_one.append(outcome.row_id)
        return apply_outcome(conn, outcome, now)

    pg._apply_outcome = spy
    for group in groups():
        assert [shown(r) for r in pg.commit_many(group)] == [
            shown(r) for r in lite.commit_many(group)
        ]
        assert state(pg) == state(lite)
        assert_tallied(pg)
    assert pg.responses_size() == lite.responses_size()
    # the first two groups in one statement per table; the last names k6 twice
    assert one_by_one == [5, 6, 4]


def test_a_fenced_outcome_in_a_group_is_refused_alone(
    make_workspace_backend: Callable[[str], Backend],
) -> None:
    backend = make_workspace_backend("postgres")
    a_store, b_store = backend.open(), backend.open()
    seed(a_store)
    clock = Clock()
    a = backend.leases(a_store, lease=10.0, clock=clock)
    b = backend.leases(b_store, lease=10.0, clock=clock)
    held = a.claim(4, 3)
    assert [r.id for r in held] == [1, 2, 3, 4]
    clock.now += 60  # a's leases expire; b takes the first rows over
    taken = b.claim(2, 3)
    assert [r.id for r in taken] == [1, 2]
    group = [
        Outcome(
            r.id,
            ok=True,
            http_status=200,
            lease_token=a.token(r.id),
            items=[ItemWrite(f"k{r.id}", "t", str(r.id), {"n": r.id})],
            new_rows=[NewRow("detail", f"https://x.test/found-{r.id}")],
        )
        for r in held
    ]
    got = a_store.commit_many(group)
    assert got[0] is None
    assert got[1] is None
    assert [r.attempt for r in got[2:]] == [1, 1]
    rows = {r.id: r for r in a_store.iter_rows()}
    assert rows[1].status.value == "pending"
    assert rows[1].attempts == 0
    assert rows[3].status.value == "ok"
    assert {i.dedupe_key for i in a_store.iter_items()} == {"k3", "k4"}
    assert [r for r in (1, 2, 3, 4) if a_store.attempts(r)] == [3, 4]
    assert {r.url for r in rows.values()} >= {"https://x.test/found-3", "https://x.test/found-4"}
    assert "https://x.test/found-1" not in {r.url for r in rows.values()}
    assert_tallied(a_store)


def test_an_unknown_row_in_a_group_writes_nothing(
    make_workspace_backend: Callable[[str], Backend],
) -> None:
    store = make_workspace_backend("postgres").open()
    seed(store)
    with pytest.raises(Exception, match="unknown row id 99"):
        store.commit_many([Outcome(1, ok=True), Outcome(99, ok=True)])
    assert all(r.status.value == "pending" for r in store.iter_rows())
