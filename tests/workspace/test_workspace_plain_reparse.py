"""The SQLite store writes a group's plain reparsed pages together
(``SqliteStore._plain_reparses``: ok rows read again into the items they already have).
That path must leave every table and every commit result exactly as
``_apply_outcome``, one page after another, does: the same group is committed on two
identical workspaces, once with the path and once without, and compared."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from framework.workspace import ItemWrite, NewRow, Outcome, Workspace
from framework.workspace.records import ErrorKind, HoldWrite
from framework.workspace.sqlite import SqliteStore

NOW = "2026-11-30T12:00:00.000+00:00"  # the crawl
LATER = "2026-12-01T08:00:00.000+00:00"  # the reparse


def _item(i: int, court: str | None = None, complete: bool = True) -> ItemWrite:
    return ItemWrite(
        dedupe_key=f"case:{i}",
        source_type="case",
        source_id=str(i),
        data={"n": i, "court": court},
        complete=complete,
    )


def _build(path: Path) -> tuple[Workspace, list[int]]:
    """A crawled workspace: 12 detail pages ok with one item each; items 0-2 wait for a
    required sub-tab row (two of them ok, one pending), item 3 was declared incomplete."""
    ws = Workspace.open(path, create=True)
    store = ws.store
    assert isinstance(store, SqliteStore)
    store._clock = lambda: NOW
    rows = store.seed([NewRow(kind="detail", url=f"http://site.test/{i}") for i in range(12)])
    ids = [r.id for r in rows]
    for i, row_id in enumerate(ids):
        tabs = (
            [NewRow(kind="detail.tab", url=f"http://site.test/{i}/tab",
                    context={"item_key": f"case:{i}"})]
            if i < 3 else []
        )  # fmt: skip
        store.commit(
            Outcome(row_id=row_id, ok=True, http_status=200, items=[_item(i, complete=i != 3)],
                    new_rows=tabs)
        )  # fmt: skip
    tab_rows = {r.url: r.id for r in store.iter_rows() if r.kind == "detail.tab"}
    for i in (0, 1):
        store.commit(
            Outcome(row_id=tab_rows[f"http://site.test/{i}/tab"], ok=True, http_status=200)
        )
    return ws, ids


def _group(ids: list[int]) -> list[Outcome]:
    """Reparsed pages of every shape: plain ones (changed, unchanged, declared complete
    now), and ones the plain path must leave to the long way."""

    def again(i: int, **kw: Any) -> Outcome:
        return Outcome(row_id=ids[i], ok=True, http_status=200, reparse=True, **kw)

    return [
        again(0, items=[_item(0, court="A")]),  # changed, its sub-tab row ok
        again(1, items=[_item(1)]),  # unchanged
        again(2, items=[_item(2, court="B")]),  # changed, its sub-tab row pending
        again(3, items=[_item(3, court="C", complete=True)]),  # changed, complete now
        again(4, items=[_item(4)]),  # unchanged
        again(5, items=[_item(5, court="D")], new_rows=[NewRow(kind="detail", url="http://site.test/new")]),
        again(6, items=[_item(6, court="E")]),  # shares its key with the next one
        again(7, items=[_item(6, court="F")]),
        again(8, items=[_item(8, court="G"), _item(99)]),  # a new item besides its own
        Outcome(row_id=ids[9], ok=False, http_status=200, reparse=True,
                error_kind=ErrorKind.PARSE, error="no records"),
        again(10, items=[_item(10, court="H")]),  # plain
        again(11, items=[_item(11, court="I")], holds=[_hold(11)]),
    ]  # fmt: skip


def _hold(i: int) -> HoldWrite:
    return HoldWrite(dedupe_key=f"case:{i}b", source_type="case", source_id=f"{i}b",
                     data={"n": i}, status="invalid", reasons=[{"rule": "required"}])  # fmt: skip


def _results(got: list[Any]) -> list[Any]:
    return [
        None
        if r is None
        else {**asdict(r), "inserted": list(r.inserted), "refreshed": list(r.refreshed)}
        for r in got
    ]


def _tables(path: Path, unchanged: set[int]) -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables a commit writes. A row whose page changed nothing keeps
    its ``updated_at`` on the plain path (nothing is written for it): left out there."""
    with sqlite3.connect(path / "state.sqlite") as conn:
        conn.row_factory = sqlite3.Row
        got = {
            t: [dict(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1")]
            for t in ("rows", "items", "attempts", "holds")
        }
    for row in got["rows"]:
        if row["id"] in unchanged:
            del row["updated_at"]
    return got


@pytest.mark.parametrize("held", [False, True], ids=["no holds", "a hold stored"])
def test_plain_reparses_write_what_one_by_one_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    results = {}
    plain_taken: dict[str, int] = {}
    original = SqliteStore._plain_reparses
    for way in ("grouped", "one by one"):
        ws, ids = _build(tmp_path / way)
        group = _group(ids)
        if held:  # a candidate held back before: a stored item may settle it
            ws.store.commit(Outcome(row_id=ids[11], ok=True, http_status=200, holds=[_hold(12)]))

        def spy(self: SqliteStore, *args: Any, _way: str = way) -> dict[int, Any]:
            if _way == "one by one":
                return {}
            got = original(self, *args)
            plain_taken[_way] = len(got)
            return got

        ws.store._clock = lambda: LATER
        with monkeypatch.context() as patched:
            patched.setattr(SqliteStore, "_plain_reparses", spy)
            results[way] = _results(ws.store.commit_many(group))
        ws.close()
    # the plain ones were taken (0-4 and 10; with a hold stored anywhere, none)
    assert plain_taken["grouped"] == (0 if held else 6)
    assert results["grouped"] == results["one by one"]
    changed = [r["items_changed"] for r in results["grouped"] if r is not None]
    assert changed[:5] == [1, 0, 1, 1, 0]
    assert results["grouped"][3]["completed"] == ["case:3"]  # declared complete now: it is
    unchanged = {ids[1], ids[4]}  # the same ids in both workspaces
    assert _tables(tmp_path / "grouped", unchanged) == _tables(tmp_path / "one by one", unchanged)
