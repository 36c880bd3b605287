"""Copying a workspace's state between stores (framework/workspace/copy.py): SQLite to
PostgreSQL and back keeps every row, attempt, item, stored response, hold and meta key
as it was, ids included; new ids continue above the source's; leases arrive free; a
destination with data is refused and a copy that fails leaves it empty."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from framework.errors import WorkspaceError
from framework.workspace import ErrorKind, ItemWrite, NewRow, Outcome, PartWrite
from framework.workspace.copy import copy_state
from framework.workspace.locate import open_store
from framework.workspace.records import HoldWrite, ResponseWrite
from tests.fixtures.workspace_backends import Backend, Clock

PG = pytest.mark.pg


def fill(store: Any) -> None:
    """A small job with every kind of state: a reset (ids do not restart), ok and
    failed rows, sub-tabs and parts, a stored response, a hold, meta."""
    store.seed([NewRow("list", f"http://site/old/{i}") for i in range(3)])
    store.reset_rows()  # rows 1-3 are gone; their ids are never handed out again
    (page,) = store.seed([NewRow("list", "http://site/list")])
    got = store.commit(
        Outcome(
            page.id,
            ok=True,
            http_status=200,
            new_rows=[NewRow("detail", f"http://site/case/{i}") for i in range(3)],
            response=ResponseWrite(
                "http://site/list", "http://site/list", 200, "text/html", b"<p>"
            ),
        )
    )
    d0, d1, d2 = got.inserted
    tab = store.commit(
        Outcome(
            d0.id,
            ok=True,
            items=[ItemWrite("t:0", "t", "0", {"title": "zero", "é": [1, 2]}, complete=False)],
            new_rows=[
                NewRow(
                    "detail.tab",
                    "http://site/case/0/tab",
                    context={"item_key": "t:0", "tab": "tab", "required": True},
                )
            ],
        )
    ).inserted[0]
    store.commit(Outcome(tab.id, ok=True, parts=[PartWrite("t:0", "tab", ["r"])]))
    store.commit(
        Outcome(d1.id, ok=False, error_kind=ErrorKind.HTTP_5XX, http_status=503, error="x")
    )
    store.commit(
        Outcome(
            d2.id,
            ok=True,
            holds=[
                HoldWrite("t:2", "t", "2", {"n": -1}, "invalid", [{"rule": "min", "field": "n"}])
            ],
        )
    )
    store.set_metas({"spec_hash": "abc", "max_attempts": "3"})


def dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of a SQLite state file that a copy carries, leases left out."""
    with sqlite3.connect(path) as conn:
        out = {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("attempts", "items", "responses", "holds")
        }
        out["rows"] = conn.execute(
            "SELECT id, fingerprint, kind, url, method, body, body_type, parent_id, status, "
            "attempts, retryable, last_error_kind, last_error, last_http_status, context, "
            "item_key, required, created_at, updated_at FROM rows ORDER BY id"
        ).fetchall()
        out["meta"] = conn.execute(
            "SELECT key, value FROM meta WHERE key NOT IN ('schema_version', 'lease_token') "
            "ORDER BY key"
        ).fetchall()
        out["next_row_id"] = conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'rows'"
        ).fetchall()
    return out


def api_view(store: Any) -> dict[str, Any]:
    rows = list(store.iter_rows())
    return {
        "rows": rows,
        "attempts": {r.id: store.attempts(r.id) for r in rows},
        "items": list(store.iter_items(complete_only=False)),
        "counts": store.counts(3),
        "meta": [store.get_meta(k) for k in ("spec_hash", "max_attempts")],
    }


@pytest.mark.parametrize("middle", ["sqlite", pytest.param("postgres", marks=PG)])
def test_a_round_trip_keeps_everything(
    middle: str, make_workspace_backend: Callable[[str], Backend]
) -> None:
    first, mid, last = (make_workspace_backend(n) for n in ("sqlite", middle, "sqlite"))
    src = first.open()
    fill(src)
    there = mid.open()
    counts = copy_state(src, there)
    assert (counts.rows, counts.attempts, counts.items, counts.responses, counts.holds) == (
        5,
        5,
        1,
        1,
        1,
    )
    assert api_view(there) == api_view(src)
    back = last.open()
    copy_state(there, back)
    assert dump(Path(last.where)) == dump(Path(first.where))
    # new ids continue above the highest ever handed out, on every side
    top = src.max_row_id()
    for store in (src, there, back):
        (new,) = store.seed([NewRow("detail", "http://site/new")])
        assert new.id == top + 1


@pytest.mark.parametrize(
    ("source", "destination"),
    [
        ("sqlite", "sqlite"),
        pytest.param("sqlite", "postgres", marks=PG),
        pytest.param("postgres", "sqlite", marks=PG),
    ],
)
def test_leases_arrive_free(
    source: str, destination: str, make_workspace_backend: Callable[[str], Backend]
) -> None:
    a, b = make_workspace_backend(source), make_workspace_backend(destination)
    src = a.open()
    src.seed([NewRow("detail", f"http://site/{i}") for i in range(5)])
    worker = a.leases(a.open(), lease=600, clock=Clock())
    assert len(worker.claim(5, 3)) == 5
    dst = b.open()
    copy_state(src, dst)
    assert len(b.leases(dst, clock=Clock()).claim(10, 3)) == 5


@pytest.mark.parametrize("backend_name", ["sqlite", pytest.param("postgres", marks=PG)])
def test_a_destination_with_data_is_refused_and_a_failed_copy_leaves_it_empty(
    backend_name: str, make_workspace_backend: Callable[[str], Backend]
) -> None:
    a, b = make_workspace_backend("sqlite"), make_workspace_backend(backend_name)
    src = a.open()
    fill(src)
    dst = b.open()

    def fail_after_items(table: str, n: int) -> None:
        if table == "items":
            raise RuntimeError("cut off")

    with pytest.raises(RuntimeError, match="cut off"):
        copy_state(src, dst, progress=fail_after_items)
    assert (dst.max_row_id(), list(dst.iter_items(complete_only=False))) == (0, [])
    assert dst.get_meta("spec_hash") is None
    copy_state(src, dst)
    with pytest.raises(WorkspaceError, match="copy into an empty workspace"):
        copy_state(src, dst)
    assert api_view(dst) == api_view(src)


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="no workspace"):
        open_store(tmp_path / "job", readonly=True)
    with open_store(tmp_path / "job") as store:
        assert (tmp_path / "job" / "state.sqlite").is_file()
        store.seed([NewRow("detail", "http://site/x")])
    with open_store(tmp_path / "job" / "state.sqlite", readonly=True) as store:
        assert store.max_row_id() == 1
