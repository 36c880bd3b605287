"""Stored responses in the SQLite store (schema 2): written with the row's outcome in
one transaction, read back whole, gone with the rows on --fresh, migrated into a
version 1 workspace; a reparse commit counts no attempt; fill counts of stored items."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.errors import WorkspaceFull
from framework.workspace import ItemWrite, NewRow, Outcome, RowStatus, SqliteStore
from framework.workspace.records import SCHEMA_VERSION, ResponseWrite
from framework.workspace.sqlite_base import MAX_PAGES_ENV


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore.open(tmp_path / "state.sqlite")
    yield s
    s.close()


def page(url: str, body: bytes = b"<html><h1>x</h1></html>") -> ResponseWrite:
    return ResponseWrite(
        url=url,
        final_url=url + "?final",
        status=200,
        content_type="text/html; charset=windows-1252",
        body=body,
    )


def seed(store: SqliteStore, url: str = "http://h/a") -> int:
    (row,) = store.seed([NewRow(kind="detail", url=url)])
    return row.id


def test_a_response_is_kept_with_its_outcome_and_read_back_whole(store: SqliteStore) -> None:
    row_id = seed(store)
    body = "<p>café</p>".encode("cp1252") * 200
    res = store.commit(Outcome(row_id=row_id, ok=True, http_status=200, response=page("u", body)))
    assert 0 < res.response_bytes < len(body)  # compressed
    ((row, got),) = list(store.iter_responses())
    assert row.id == row_id
    assert row.status is RowStatus.OK
    assert (got.url, got.final_url, got.status) == ("u", "u?final", 200)
    assert got.content_type == "text/html; charset=windows-1252"
    assert got.body == body
    assert store.responses_size() == (1, res.response_bytes)
    # a second answer for the row replaces the first
    store.commit(Outcome(row_id=row_id, ok=True, http_status=200, response=page("u", b"new")))
    assert [r.body for _, r in store.iter_responses()] == [b"new"]


def test_no_response_without_a_committed_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the body is in the outcome's transaction: a commit that fails keeps neither
    path = tmp_path / "state.sqlite"
    with SqliteStore.open(path) as s:
        row_id = seed(s)
        pages = s._conn().execute("PRAGMA page_count").fetchone()[0]
    monkeypatch.setenv(MAX_PAGES_ENV, str(pages + 2))
    with SqliteStore.open(path) as s:
        big = os.urandom(1 << 20)  # incompressible: needs far more than 2 pages
        with pytest.raises(WorkspaceFull):
            s.commit(Outcome(row_id=row_id, ok=True, http_status=200, response=page("u", big)))
        assert s.responses_size() == (0, 0)
        assert s.get_row(row_id).status is RowStatus.PENDING  # type: ignore[union-attr]


def test_fresh_rows_take_their_responses_with_them(store: SqliteStore) -> None:
    row_id = seed(store)
    store.commit(Outcome(row_id=row_id, ok=True, http_status=200, response=page("u")))
    store.reset_rows()
    assert store.responses_size() == (0, 0)
    assert list(store.iter_responses()) == []


def test_many_responses_stream_in_row_order(store: SqliteStore) -> None:
    rows = store.seed([NewRow(kind="detail", url=f"http://h/{i}") for i in range(1203)])
    for row in reversed(rows):
        store.commit(Outcome(row_id=row.id, ok=True, response=page(row.url, row.url.encode())))
    got = [(row.id, r.body) for row, r in store.iter_responses()]
    assert got == [(row.id, row.url.encode()) for row in rows]


def test_a_reparse_commit_counts_no_attempt(store: SqliteStore) -> None:
    row_id = seed(store)
    item = ItemWrite("t:1", "t", "1", {"title": "old"})
    store.commit(Outcome(row_id=row_id, ok=True, http_status=200, items=[item]))
    before = store.attempts(row_id)
    new = ItemWrite("t:1", "t", "1", {"title": "new"})
    res = store.commit(
        Outcome(
            row_id=row_id,
            ok=True,
            http_status=200,
            items=[new],
            new_rows=[NewRow(kind="detail", url="http://h/found")],
            reparse=True,
        )
    )
    assert res.attempt == 1
    assert res.changed == ["t:1"]
    assert [r.url for r in res.inserted] == ["http://h/found"]
    assert store.attempts(row_id) == before
    assert store.get_row(row_id).attempts == 1  # type: ignore[union-attr]
    assert store.get_item("t:1").data == {"title": "new"}  # type: ignore[union-attr]


def test_a_version_1_workspace_gains_the_table(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    with SqliteStore.open(path) as s:
        row_id = seed(s)
        s.commit(Outcome(row_id=row_id, ok=True, http_status=200))
    with sqlite3.connect(path) as conn:  # what a version 1 file looks like
        conn.execute("DROP TABLE responses")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with SqliteStore.open(path, readonly=True) as ro:  # status on an old workspace
        assert ro.responses_size() == (0, 0)
        assert list(ro.iter_responses()) == []
    with SqliteStore.open(path) as s:
        assert s.get_meta("schema_version") == str(SCHEMA_VERSION) == "3"
        assert s.get_row(row_id).status is RowStatus.OK  # type: ignore[union-attr]
        s.commit(Outcome(row_id=row_id, ok=True, http_status=200, response=page("u")))
        assert s.responses_size()[0] == 1


def test_fill_counts_per_kind_and_field(store: SqliteStore) -> None:
    a, b = store.seed([NewRow(kind="detail", url="http://h/a"), NewRow(kind="x", url="u")])
    values = [
        {"t": "one", "n": 0, "tags": [], "none": None, "empty": "", "obj": {}},
        {"t": "two", "n": None, "tags": ["a"], "none": None, "empty": "", "obj": {"k": 1}},
    ]
    items = [ItemWrite(f"k:{i}", "k", str(i), v) for i, v in enumerate(values)]
    store.commit(Outcome(row_id=a.id, ok=True, items=items))
    store.commit(Outcome(row_id=b.id, ok=True, items=[ItemWrite("k:x", "k", "x", {"t": ""})]))
    got = store.fill_counts()
    assert got["detail"] == {
        "records": 2,
        "fields": {"t": 2, "n": 1, "tags": 1, "none": 0, "empty": 0, "obj": 1},
    }
    assert got["x"] == {"records": 1, "fields": {"t": 0}}
