"""A fix of a field the list pages carry into the detail records reaches the items
through `framework reparse`, as a fresh crawl with the fixed spec gives them.

The values a list row carries live in the context of the detail row it found. A crawl
keeps that context (a page is read once); a reparse that read the list pages again and
left the detail rows as they were found would keep the old values: the fix would reach
nothing, silently (framework/workspace/carry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framework.workspace import Workspace
from tests.fixtures.crawl import events, run_cli, workspace_items
from tests.fixtures.site import write_good_spec

CARRIED = 'status: "td.status::text"'
BROKEN = 'status: "td.state::text"'  # matches nothing: every record's status is null


def _spec(root: Path, url: str, old: str, new: str) -> Path:
    spec = write_good_spec("cases", url, root)
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new))
    return spec


def _crawl(spec: Path, ws: Path) -> None:
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages


def _reparse(spec: Path, ws: Path, *args: str) -> dict[str, Any]:
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    return [e for e in events(ws) if e["event"] == "reparse_finished"][-1]


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_carried_field_fixed_on_the_list_reaches_every_detail_item(
    make_site, tmp_path: Path, processes: str
) -> None:
    site = make_site()
    broken = _spec(tmp_path / "a", site.url, CARRIED, BROKEN)
    ws = tmp_path / "ws"
    _crawl(broken, ws)
    assert all(item["status"] is None for item in workspace_items(ws).values())
    fixed = _spec(tmp_path / "b", site.url, CARRIED, CARRIED)
    fresh = tmp_path / "fresh"
    _crawl(fixed, fresh)
    want = workspace_items(fresh)
    assert any(item["status"] for item in want.values())

    served = site.stats()
    done = _reparse(fixed, ws, "--processes", processes)
    assert site.stats() == served  # no request
    assert workspace_items(ws) == want
    counts = done["counts"]
    details = sum(1 for k in want)  # every detail row found by a list page got its status
    assert counts["carry_refreshed"] >= details
    assert counts["items_changed"] == details
    # the detail kind's spec did not change, yet its pages were read (their carried
    # values did): its fill counts are this run's, and nothing is left unread for it
    assert done["fill"]["detail"]["records"] == details
    assert "carried" not in done
    assert done["fill"]["detail"]["fields"]["status"] == details

    again = _reparse(fixed, ws, "--processes", processes)
    assert again["counts"]["carry_refreshed"] == 0  # nothing changed since
    assert again["counts"]["pages"] == 0


@pytest.mark.slow
@pytest.mark.process
def test_a_carried_field_removed_leaves_the_items_with_all(make_site, tmp_path: Path) -> None:
    """Read with --all, the detail pages are read in the same pass as the list pages
    that refresh them: those parsed before the refresh are dropped and read again."""
    site = make_site()
    spec = _spec(tmp_path / "a", site.url, CARRIED, CARRIED)
    ws = tmp_path / "ws"
    _crawl(spec, ws)
    assert any(item.get("status") for item in workspace_items(ws).values())
    removed = _spec(tmp_path / "b", site.url, "  fields:\n    " + CARRIED, "")
    fresh = tmp_path / "fresh"
    _crawl(removed, fresh)
    want = workspace_items(fresh)
    assert all("status" not in item for item in want.values())

    served = site.stats()
    done = _reparse(removed, ws, "--all", "--processes", "2")
    assert site.stats() == served
    assert workspace_items(ws) == want
    assert done["counts"]["items_changed"] == len(want)
    assert done["counts"]["carry_refreshed"] >= len(want)
    with Workspace.open(ws, readonly=True) as opened:
        assert all("carry" not in r.context for r in opened.store.iter_rows(kind="detail"))


COURTS = """  courts:
    follow:
      pattern: '/courts/pn-[a-z]+$'     # every court's listing, found by URL pattern
      to: listing"""


def _courts(root: Path, url: str, via: str) -> Path:
    """tests/specs/good/courts.yaml with each court's name carried into its listing,
    whose next pages pass it on to the next and to the details: a chain of carrying."""
    spec = write_good_spec("courts", url, root)
    text = spec.read_text()
    assert COURTS in text
    carrying = (
        '  courts:\n    each: "ul.courts li"\n'
        f'    fields: {{via: "{via}"}}\n'
        '    follow: {css: "a.court::attr(href)", to: listing}'
    )
    spec.write_text(text.replace(COURTS, carrying))
    return spec


@pytest.mark.slow
@pytest.mark.process
def test_values_passed_along_next_pages_reach_the_items_each_page_once(
    make_site, tmp_path: Path
) -> None:
    """courts -> listing page 1 -> page 2 -> ... -> details: each level is final only
    after the one before it is committed. Every stored page is still read and counted
    once, every item changed once, and the items are the fresh crawl's."""
    site = make_site()
    ws = tmp_path / "ws"
    _crawl(_courts(tmp_path / "a", site.url, "a.court::text"), ws)
    assert {item["via"] for item in workspace_items(ws).values()} >= {"PN Bandung"}
    fixed = _courts(tmp_path / "b", site.url, "a.court::attr(href)")
    fresh = tmp_path / "fresh"
    _crawl(fixed, fresh)
    want = workspace_items(fresh)
    with Workspace.open(ws, readonly=True) as opened:
        chained = [r for r in opened.store.iter_rows(kind="listing") if r.context.get("page")]
        stored = opened.store.responses_size()[0]
        tabs = opened.store.responses_of([k for k in opened.store.row_counts() if "." in k])
    assert chained  # next pages that carry: the chain this test is about

    served = site.stats()
    done = _reparse(fixed, ws, "--processes", "2")
    assert site.stats() == served
    assert workspace_items(ws) == want
    assert {item["via"] for item in want.values()} >= {"/courts/pn-bandung"}
    counts = done["counts"]
    # each page read (and counted) once; the sub-tabs (their part of the spec unchanged,
    # no value carried into them) left unread
    assert counts["unchanged_kind"] == tabs > 0
    assert counts["pages"] + counts["skipped"] + counts["unchanged_kind"] == stored
    assert counts["items_changed"] == len(want)  # each item changed once
    assert counts["carry_refreshed"] >= len(want) + len(chained)


@pytest.mark.slow
@pytest.mark.process
def test_a_reparse_killed_after_refreshing_leaves_the_rows_to_the_next(
    make_site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the commit that gave the detail rows new carried values and the
    pass that reads them: the next reparse must still read them (it cannot see that
    their values changed: they already have the new ones)."""
    from framework.crawl import reparse as reparse_mod

    site = make_site()
    ws = tmp_path / "ws"
    _crawl(_spec(tmp_path / "a", site.url, CARRIED, BROKEN), ws)
    fixed = _spec(tmp_path / "b", site.url, CARRIED, CARRIED)
    fresh = tmp_path / "fresh"
    _crawl(fixed, fresh)

    def killed(self: Any) -> list[int]:
        raise RuntimeError("killed after the first pass")

    with monkeypatch.context() as patched:
        patched.setattr(reparse_mod._Writer, "next_pass", killed)
        with pytest.raises(RuntimeError, match="killed"):
            reparse_mod.reparse(fixed, ws, processes=1)
    with Workspace.open(ws, readonly=True) as opened:
        details = list(opened.store.iter_rows(kind="detail"))
    assert any(r.context.get("carry", {}).get("status") for r in details)  # refreshed
    assert all(item["status"] is None for item in workspace_items(ws).values())  # not read

    done = _reparse(fixed, ws)
    assert workspace_items(ws) == workspace_items(fresh)
    assert done["counts"]["items_changed"] == len(workspace_items(fresh))
