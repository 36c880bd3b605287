"""A damaged stored page (a body that does not decompress) is that row's typed
``damaged`` error: ``framework reparse`` reads every other page, exits 4 naming the
damage, and the next crawl fetches the page again, which mends it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import DETAIL_BY_URL, _page, _rows, _write_spec
from tests.fixtures.crawl import workspace_items
from tests.fixtures.hostile import HostileServer

EXIT_HALTED = 4


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_damaged_stored_page_is_its_rows_error_and_the_reparse_goes_on(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    site.route("/", _page("".join(f'<a href="/case-{i}">{i}</a>' for i in range(3))))
    for i in range(3):
        site.route(f"/case-{i}", _page(f"<p>case {i}</p>"))
    spec = _write_spec(tmp_path, DETAIL_BY_URL.format(base=site.url))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    torn = f"{site.url}/case-1"
    con = sqlite3.connect(ws / "state.sqlite")
    with con:  # cut the stored body short, as a torn write would
        con.execute(
            "UPDATE responses SET body = substr(body, 1, 6) "
            "WHERE row_id = (SELECT id FROM rows WHERE url = ?)",
            (torn,),
        )
    con.close()
    # the spec changes: every page is read again
    spec.write_text(
        spec.read_text(encoding="utf-8").replace(
            "text: {re: '(?s)(.+)'}", "text: {css: 'p::text'}"
        ),
        encoding="utf-8",
    )

    r = crawl_cli("reparse", "hostile", "--workspace", str(ws), cwd=tmp_path, timeout=180)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "hostile: damaged pages in the workspace (1 stored page that" in r.stderr
    rows = _rows(ws)
    assert (rows[torn]["status"], rows[torn]["error_kind"]) == ("error", "damaged")
    assert "is damaged" in rows[torn]["error"]
    items = workspace_items(ws)
    for i in (0, 2):  # the other pages were read with the new spec
        assert items[f"hostile:case-{i}"]["text"] == f"case {i}"

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _rows(ws)[torn]["status"] == "ok"  # fetched again: mended
    assert workspace_items(ws)["hostile:case-1"]["text"] == "case 1"
