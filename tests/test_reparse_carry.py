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
