"""A fix that narrows what the pages link (a ``follow`` rule, a sub-tab removed) is said
by `framework reparse`: the rows the pages it read no longer link are counted, by
status, with example URLs, in its summary, its event and `framework status`.

They are not deleted (their items may have shipped; a fresh crawl is how to start over
without them), but a reparse that reached them silently would leave junk rows and
items, and pending ones the next crawl still fetches, without a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures.crawl import events, run_cli, workspace_items
from tests.fixtures.site import write_good_spec

HEARINGS = """    hearings:                           # GET, an HTML fragment (a table)
      url: "/cases/{id}/tab/hearings"
      each: "tbody tr"
      fields:
        date: {css: "td.date::text", type: date, format: "%d.%m.%Y"}
        agenda: "td.agenda::text"
"""
FOLLOW = 'follow: "a.detail::attr(href)"'
ODD_ONLY = 'follow: "tr:nth-child(odd) a.detail::attr(href)"'


def _spec(root: Path, url: str, old: str = "", new: str = "") -> Path:
    spec = write_good_spec("cases", url, root)
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new) if old else text)
    return spec


def _reparse(spec: Path, ws: Path, *args: str) -> tuple[dict[str, Any], str]:
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    return [e for e in events(ws) if e["event"] == "reparse_finished"][-1], r.stderr


def _rows(ws: Path) -> dict[int, Any]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return {r.id: r for r in w.store.iter_rows()}


@pytest.mark.process
def test_rows_a_narrowed_rule_no_longer_links_are_said_and_kept(make_site, tmp_path) -> None:
    site = make_site()
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(_spec(tmp_path / "a", site.url)), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages
    rows_before, items_before = _rows(ws), workspace_items(ws)
    hearings = {i for i, r in rows_before.items() if r.kind == "detail.hearings"}
    assert len(hearings) > 10

    # a field fix links what it linked: nothing to say
    fixed = _spec(tmp_path / "b", site.url, 'room: ".room::text"', 'room: ".room::text, .x"')
    done, err = _reparse(fixed, ws)
    assert done["counts"]["pages"] > 0
    assert done["counts"]["rows_unlinked"] == 0
    assert "unlinked" not in done
    assert "no longer linked" not in err

    # the hearings sub-tab removed: the detail pages, read again, no longer link its rows
    served = site.stats()
    no_tab = _spec(tmp_path / "c", site.url, HEARINGS, "")
    done, err = _reparse(no_tab, ws)
    assert site.stats() == served  # no request
    statuses = {rows_before[i].status.value for i in hearings}
    assert done["counts"]["rows_unlinked"] == len(hearings)
    assert done["unlinked"]["rows"] == len(hearings)
    assert done["unlinked"]["by_status"] == {
        s: sum(1 for i in hearings if rows_before[i].status.value == s) for s in statuses
    }
    assert len(done["unlinked"]["examples"]) == 5
    assert all("/tab/hearings" in url for url in done["unlinked"]["examples"])
    assert f"{len(hearings)} rows found by pages read again are no longer linked" in err
    # nothing is deleted: the rows are there, the items keep what the tab gave them
    after = _rows(ws)
    assert hearings <= set(after)
    assert workspace_items(ws).keys() == items_before.keys()
    assert all(
        item.get("hearings") == items_before[k].get("hearings")
        for k, item in workspace_items(ws).items()
    )

    status = run_cli("status", "fixture-cases", "--workspace", str(ws))
    assert f"{len(hearings)} rows no longer linked by the pages that found them" in status.stdout

    # --all reads every page again: the same rows, still unlinked, still said
    again, _ = _reparse(no_tab, ws, "--all")
    assert again["counts"]["rows_unlinked"] == len(hearings)


@pytest.mark.slow
@pytest.mark.process
def test_a_narrowed_follow_rule_counts_the_detail_rows_it_no_longer_reaches(
    make_site, tmp_path
) -> None:
    site = make_site()
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(_spec(tmp_path / "a", site.url)), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]
    rows = _rows(ws)
    details = {i for i, r in rows.items() if r.kind == "detail"}

    narrow = _spec(tmp_path / "b", site.url, FOLLOW, ODD_ONLY)
    fresh = tmp_path / "fresh"
    r = run_cli("crawl", str(narrow), "--workspace", str(fresh), "-q")
    reached = {r.url for r in _rows(fresh).values() if r.kind == "detail"}
    assert 0 < len(reached) < len(details)

    done, _ = _reparse(narrow, ws, "--processes", "2")
    # the list pages were read again; the detail rows they found and no longer link are
    # those a fresh crawl with the narrowed rule does not reach; the sub-tab rows of
    # those details are not judged (their detail pages were not read: unchanged kind)
    unreached = {i for i in details if rows[i].url not in reached}
    assert done["counts"]["rows_unlinked"] == len(unreached)
    assert sum(done["unlinked"]["by_status"].values()) == len(unreached)
    assert set(done["unlinked"]["by_status"]) <= {s.value for s in RowStatus}
    assert set(done["unlinked"]["examples"]) <= {rows[i].url for i in unreached}
