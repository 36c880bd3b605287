"""The tallies of a PostgreSQL workspace (schema 2): what `status` counts, kept by
triggers as rows and items are written, always equal to counting the tables.

Every step of a job that changes a counted fact (seed, found rows, ok and failed
commits, items and parts, completeness flips, requeue, refund, hold decisions,
reset_rows, a copy from SQLite, the fold of the tallies) is followed by the same
comparison: the reads from the tallies against the same reads done the slow way (the
path a read-only store of a schema 1 database takes). A schema 1 database written by
the previous release gains tallies that count what it already held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from framework.workspace import ErrorKind, ItemWrite, NewRow, Outcome, PartWrite, RequeueFilter
from framework.workspace.copy import copy_state
from framework.workspace.records import HoldWrite
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg
MAX = 3


@pytest.fixture
def pg(make_workspace_backend: Callable[[str], Backend]) -> Backend:
    return make_workspace_backend("postgres")


def reads(store: Any) -> dict[str, Any]:
    return {
        "row_counts": store.row_counts(),
        "counts": store.counts(MAX),
        "counts_1": store.counts(1),
        "item_counts": store.item_counts(),
        "fill_counts": store.fill_counts(),
    }


def assert_tallied(store: Any) -> dict[str, Any]:
    """The tallies' answers equal counting the tables; returns them."""
    fast = reads(store)
    store.schema_version = 1  # the reads of a database without tallies
    try:
        slow = reads(store)
    finally:
        store.schema_version = 2
    assert fast == slow
    return fast


def tally_rows(store: Any) -> int:
    got = store._conn().execute(
        "SELECT (SELECT count(*) FROM row_tally) + count(*) FROM item_tally"
    )
    return int(got.fetchone()[0])


def test_every_write_keeps_the_tallies_exact(pg: Backend) -> None:
    store = pg.open()
    assert assert_tallied(store)["row_counts"] == {}
    rows = store.seed([NewRow("list", "http://s/"), NewRow("detail", "http://s/d1")])
    lst, d1 = rows
    store.seed([NewRow("list", "http://s/")])  # a duplicate: nothing counted
    assert_tallied(store)
    found = [NewRow("detail", f"http://s/d{i}") for i in range(2, 6)]
    found.append(NewRow("detail.tab", "http://s/d1/tab", context={"item_key": "t:1"}))
    found.append(
        NewRow("detail.opt", "http://s/d1/o", context={"item_key": "t:1", "required": False})
    )
    store.commit(Outcome(lst.id, ok=True, new_rows=found))
    item = ItemWrite("t:1", "t", "1", {"a": 1, "b": "", "c": [], "d": {}, "e": None})
    store.commit(Outcome(d1.id, ok=True, items=[item]))
    counted = assert_tallied(store)
    assert counted["item_counts"] == {"complete": 0, "incomplete": 1}  # its tab is pending
    by_url = {r.url: r for r in store.iter_rows()}
    tab = by_url["http://s/d1/tab"]
    store.commit(Outcome(tab.id, ok=True, parts=[PartWrite("t:1", "tab", ["x"])]))
    counted = assert_tallied(store)
    assert counted["item_counts"] == {"complete": 1, "incomplete": 0}
    assert counted["fill_counts"]["detail"]["fields"]["tab"] == 1
    d2, d3, d4 = (by_url[f"http://s/d{i}"] for i in (2, 3, 4))
    store.commit(Outcome(d2.id, ok=False, error_kind=ErrorKind.HTTP_5XX, error="503"))
    store.commit(Outcome(d3.id, ok=False, error_kind=ErrorKind.HTTP_4XX, error="404"))
    store.commit(Outcome(d4.id, ok=True, items=[ItemWrite("t:4", "t", "4", {"a": None})]))
    # the same content again changes nothing; new content moves the field counts
    store.commit(Outcome(d4.id, ok=True, items=[ItemWrite("t:4", "t", "4", {"a": None})]))
    store.commit(Outcome(d4.id, ok=True, items=[ItemWrite("t:4", "t", "4", {"a": 2, "z": ""})]))
    held = HoldWrite("t:9", "t", "9", {"a": 1}, "review_required", [{"field": "a", "rule": "x"}])
    store.commit(Outcome(by_url["http://s/d5"].id, ok=True, holds=[held]))
    store.decide_hold("t:9", accept=True)
    counted = assert_tallied(store)
    assert counted["counts"] == {"pending": 1, "retryable": 1, "exhausted": 1}
    assert counted["counts_1"] == {"pending": 1, "retryable": 0, "exhausted": 2}
    store.refund({d2.id: 1})
    assert_tallied(store)
    assert store.requeue(RequeueFilter(errors=True), MAX) == 2
    assert_tallied(store)
    store.requeue(RequeueFilter(kind="detail"), MAX)
    assert_tallied(store)
    before = tally_rows(store)
    store._compact()
    assert tally_rows(store) < before
    assert_tallied(store)
    store.reset_rows()  # the items stay, counted under kind "?"
    counted = assert_tallied(store)
    assert counted["row_counts"] == {}
    assert set(counted["fill_counts"]) == {"?"}
    (again,) = store.seed([NewRow("detail", "http://s/d1")])
    store.commit(Outcome(again.id, ok=True, items=[item]))  # relinked: back under "detail"
    counted = assert_tallied(store)
    assert counted["fill_counts"]["detail"]["records"] == 1


def test_several_connections_and_a_copy_from_sqlite(
    pg: Backend, make_workspace_backend: Callable[[str], Backend]
) -> None:
    lite = make_workspace_backend("sqlite").open()
    rows = lite.seed([NewRow("detail", f"http://s/{i}") for i in range(30)])
    for r in rows[:20]:
        lite.commit(Outcome(r.id, ok=True, items=[ItemWrite(f"t:{r.id}", "t", "x", {"a": r.id})]))
    lite.commit(Outcome(rows[20].id, ok=False, error_kind=ErrorKind.TIMEOUT))
    dest = pg.open()
    copy_state(lite, dest)
    assert assert_tallied(dest)["item_counts"] == {"complete": 20, "incomplete": 0}
    other = pg.open()  # a second worker's connection, folding while the first writes
    other._compact()
    dest.commit(Outcome(rows[25].id, ok=True, items=[ItemWrite("t:z", "t", "z", {"b": [1]})]))
    other._compact()
    assert assert_tallied(other)["row_counts"] == assert_tallied(dest)["row_counts"]


def test_a_schema_1_database_gains_tallies_of_what_it_holds(pg: Backend) -> None:
    from framework.workspace import postgres_base

    store = pg.open()
    conn = store._conn()
    # undo schema 2 to get the database the previous release wrote
    for table in ("row_tally", "item_tally"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DROP FUNCTION item_facts, items_kind CASCADE")
    for fn in ("rows_tally_added", "rows_tally_removed", "rows_tally_changed"):
        conn.execute(f"DROP FUNCTION {fn} CASCADE")
    for fn in ("items_tally_added", "items_tally_removed", "items_tally_changed"):
        conn.execute(f"DROP FUNCTION {fn} CASCADE")
    conn.execute("DROP INDEX rows_error, items_incomplete")
    conn.execute("ALTER TABLE items DROP COLUMN row_kind")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    a, b, _ = store.seed([NewRow("detail", f"http://s/{i}") for i in range(3)])
    store.commit(Outcome(a.id, ok=True, items=[ItemWrite("t:a", "t", "a", {"x": 1, "y": ""})]))
    store.commit(Outcome(b.id, ok=False, error_kind=ErrorKind.HTTP_4XX))
    old = pg.open(readonly=True)  # not migrated: counts the tables
    assert old.schema_version == 1
    slow = reads(old)
    assert slow["counts"] == {"pending": 1, "retryable": 0, "exhausted": 1}
    migrated = pg.open()
    assert migrated.get_meta("schema_version") == str(postgres_base.PG_SCHEMA_VERSION)
    assert assert_tallied(migrated) == slow
    assert migrated.fill_counts() == {"detail": {"records": 1, "fields": {"x": 1, "y": 0}}}
