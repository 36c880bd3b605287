"""`framework reparse` after a fix of some fields reads only those fields of each page,
taking the others from its stored item (framework/crawl/narrow.py), and gives exactly
what reading the pages whole gives (`--all`) and what a fresh crawl with the fixed spec
gives; whatever it cannot trust (a workspace with held candidates, a change limit, a
change beyond the fields, an item that lacks a field) is read whole."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from framework.crawl import narrow
from framework.crawl.fingerprint import kind_fingerprints, kind_sections
from framework.crawl.page import CompiledJob
from framework.spec import load_spec
from tests.fixtures.crawl import events, item_hashes, run_cli, workspace_items
from tests.fixtures.site import write_good_spec

FIXED = 'court: ".court::text"'
BROKEN = 'court: ".court-name::text"'  # matches nothing on the fixture site


@pytest.fixture
def broken(make_site, tmp_path) -> tuple[Path, Path, Any]:
    """A crawl of the fixture site with the detail kind's `court` selector broken; the
    spec file, fixed again, and the workspace."""
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    assert FIXED in text
    spec.write_text(text.replace(FIXED, BROKEN), encoding="utf-8")
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages
    spec.write_text(text, encoding="utf-8")
    return spec, ws, site


SAID: dict[Path, str] = {}  # what the last reparse of a workspace said (stderr)


def _reparse(spec: Path, ws: Path, *args: str, code: int = 0) -> dict[str, Any]:
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q", *args)
    assert r.returncode == code, r.stderr[-2000:]
    SAID[ws] = r.stderr
    return {e["event"]: e for e in events(ws) if e["event"].startswith("reparse_")}


def _rows(ws: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(ws / "state.sqlite") as conn:
        return conn.execute(
            "SELECT id, kind, url, status, attempts, last_error_kind, last_error FROM rows "
            "ORDER BY id"
        ).fetchall()


def _narrowable(ws: Path) -> int:
    """Ok detail rows with exactly one item linked: the pages a narrow read can take."""
    with sqlite3.connect(ws / "state.sqlite") as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM rows r WHERE r.kind = 'detail' AND r.status = 'ok' AND "
            "(SELECT count(*) FROM items i WHERE i.row_id = r.id) = 1 AND "
            "EXISTS (SELECT 1 FROM responses p WHERE p.row_id = r.id)"
        ).fetchone()
    return int(n)


def _same_findings(a: dict[str, Any], b: dict[str, Any], kind: str) -> None:
    assert a["fill"][kind] == b["fill"][kind]
    pick = [w for w in a["warnings"] if w.get("kind") == kind]
    assert pick == [w for w in b["warnings"] if w.get("kind") == kind]


@pytest.mark.slow
@pytest.mark.process
def test_a_field_fix_is_read_field_by_field_and_gives_what_a_whole_read_gives(
    broken, tmp_path
) -> None:
    spec, ws, site = broken
    whole = tmp_path / "whole"
    shutil.copytree(ws, whole)
    assert {i["court"] for i in workspace_items(ws).values()} == {None}
    narrowable = _narrowable(ws)
    assert narrowable > 50
    requests = site.stats()

    done = _reparse(spec, ws)
    started, finished = done["reparse_started"], done["reparse_finished"]
    assert started["narrow"] == {"detail": ["court"]}
    assert finished["counts"]["narrow"] == narrowable
    assert (
        f"{narrowable} stored pages read for the fields whose spec changed (detail: court), "
        "the others taken from their items; --all reads them whole"
    ) in SAID[ws]
    every = _reparse(spec, whole, "--all")
    assert "narrow" not in every["reparse_started"]
    assert every["reparse_finished"]["counts"]["narrow"] == 0
    assert site.stats() == requests  # neither fetched anything

    assert workspace_items(ws) == workspace_items(whole)
    assert item_hashes(ws) == item_hashes(whole)
    assert _rows(ws) == _rows(whole)
    assert all(i["court"] for i in workspace_items(ws).values())  # the fix reached them
    a, b = finished["counts"], every["reparse_finished"]["counts"]
    for key in ("items_changed", "items_new", "rows_new", "errors", "fallbacks"):
        assert a[key] == b[key], key
    assert a["fallbacks"] > 0  # the pages whose `amount` falls back: read, so reported
    _same_findings(finished, every["reparse_finished"], "detail")

    # and a fresh crawl with the fixed spec gives the same items
    fresh = tmp_path / "fresh"
    r = run_cli("crawl", str(spec), "--workspace", str(fresh), "-q")
    assert r.returncode == 4, r.stderr[-2000:]
    assert workspace_items(fresh) == workspace_items(ws)


@pytest.mark.process
def test_a_field_that_now_finds_nothing_fails_the_pages_a_whole_read_fails(
    broken, tmp_path
) -> None:
    spec, ws, _ = broken
    text = spec.read_text(encoding="utf-8")
    # title is required: the edited selector finds nothing, every detail page fails
    spec.write_text(
        text.replace('title: {css: "h1.title::text"', 'title: {css: "h1.gone::text"'),
        encoding="utf-8",
    )
    whole = tmp_path / "whole"
    shutil.copytree(ws, whole)
    narrowable = _narrowable(ws)
    done = _reparse(spec, ws, code=4)
    every = _reparse(spec, whole, "--all", code=4)
    assert done["reparse_started"]["narrow"] == {"detail": ["title", "court"]}
    assert done["reparse_finished"]["counts"]["narrow"] == narrowable
    assert _rows(ws) == _rows(whole)
    assert workspace_items(ws) == workspace_items(whole)  # the last good items stay
    assert {r[6] for r in _rows(ws) if r[1] == "detail" and r[3] == "error"} >= {
        "missing required field(s): title"
    }
    a, b = done["reparse_finished"], every["reparse_finished"]
    assert a["counts"]["newly_failed"] == b["counts"]["newly_failed"] > 0
    _same_findings(a, b, "detail")


@pytest.mark.process
def test_an_item_that_lacks_a_field_has_its_page_read_whole(broken, tmp_path) -> None:
    spec, ws, _ = broken
    with sqlite3.connect(ws / "state.sqlite") as conn:
        (row_id,) = conn.execute(
            "SELECT min(i.row_id) FROM items i JOIN rows r ON r.id = i.row_id WHERE r.status = 'ok'"
        ).fetchone()
        conn.execute(
            "UPDATE items SET data = json_remove(data, '$.room') WHERE row_id = ?", (row_id,)
        )
    whole = tmp_path / "whole"
    shutil.copytree(ws, whole)
    narrowable = _narrowable(ws)
    done = _reparse(spec, ws)
    _reparse(spec, whole, "--all")
    assert done["reparse_finished"]["counts"]["narrow"] == narrowable - 1
    assert workspace_items(ws) == workspace_items(whole)  # `room` is back, as read whole
    assert item_hashes(ws) == item_hashes(whole)


@pytest.mark.process
def test_a_crawl_after_the_fix_that_fetches_nothing_leaves_the_reparse_narrow(broken) -> None:
    """The author's natural order: fix the selector, run the crawl again (it has nothing
    to fetch and says the spec changed), then reparse. The crawl read no page: what the
    stored pages were read with is as it was, so the fix is still read field by field."""
    spec, ws, site = broken
    with sqlite3.connect(ws / "state.sqlite") as conn:
        before = sorted(r[0] for r in conn.execute("SELECT key FROM meta WHERE key LIKE 'read_%'"))
    requests = site.stats()
    r = run_cli("crawl", str(spec), "--workspace", str(ws))
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages, still
    assert "the spec changed since the last run" in r.stderr
    assert "framework reparse" in r.stderr
    with sqlite3.connect(ws / "state.sqlite") as conn:
        after = sorted(r[0] for r in conn.execute("SELECT key FROM meta WHERE key LIKE 'read_%'"))
    assert after == before  # no page read: nothing marked as read with the fixed spec
    narrowable = _narrowable(ws)
    done = _reparse(spec, ws)
    assert done["reparse_started"]["narrow"] == {"detail": ["court"]}
    assert "whole" not in done["reparse_started"]
    assert done["reparse_finished"]["counts"]["narrow"] == narrowable > 50
    assert "read whole" not in SAID[ws]
    assert site.stats() == requests  # the crawl had nothing to fetch, the reparse fetches nothing
    assert all(i["court"] for i in workspace_items(ws).values())


@pytest.mark.process
def test_a_reparse_records_what_it_read_with_so_the_next_fix_is_narrow_too(broken) -> None:
    spec, ws, _ = broken
    _reparse(spec, ws)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace('room: ".room::text"', 'room: ".room::text, .rm::text"'))
    done = _reparse(spec, ws)
    assert done["reparse_started"]["narrow"] == {"detail": ["room"]}
    with sqlite3.connect(ws / "state.sqlite") as conn:
        sections = conn.execute(
            "SELECT count(*) FROM meta WHERE key LIKE 'read_section:%'"
        ).fetchone()[0]
    assert sections == 2  # list and detail now; the digests no kind has were forgotten


# ------------------------------------------------------------------ the plan
SPEC = """
name: job
source_type: t
start_urls: ["http://127.0.0.1:1/list"]
list:
  each: "tr"
  follow: "a::attr(href)"
  fields:
    status: "td.status::text"
detail:
  id: {css: "#id::text", required: true}
  fields:
    title: {css: "h1::text", required: true}
    court: ".court::text"
    amount: {css: [".amount::text", "[data-field=amount]::text"], type: number}
    ref: {css: ".ref::text", helper: true}
"""


def _plan(tmp_path: Path, old: str, new: str, holds: int = 0) -> narrow.Plan:
    def job(text: str, name: str) -> CompiledJob:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        return CompiledJob(load_spec(path))

    before, now = job(old, "old"), job(new, "new")
    digests = kind_fingerprints(before)
    sections = {digests[k]: s for k, s in kind_sections(before).items()}
    return narrow.plan(
        now,
        kind_fingerprints(now),
        {k: {d} for k, d in digests.items()},
        sections.get,
        holds,
    )


def test_the_plan_reads_the_changed_fields_those_that_fall_back_and_helpers(tmp_path) -> None:
    plan = _plan(tmp_path, SPEC, SPEC.replace('".court::text"', '".court-name::text"'))
    assert list(plan) == ["detail"]
    assert plan.whole == {}  # the list kind did not change: it is not read at all
    assert plan["detail"].changed == ("court",)
    assert plan["detail"].read == ("court", "amount", "ref")
    assert plan["detail"].names == ("title", "court", "amount", "ref")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            ('  id: {css: "#id::text"', '  id: {css: "#id2::text"'),
            "more than its fields changed (id)",
        ),
        (("    ref: {", "    extra: h2::text\n    ref: {"), "fields were added or removed (extra)"),
        (("source_type: t", "source_type: u"), "more than its section changed since"),
    ],
)
def test_a_change_beyond_some_fields_is_read_whole(tmp_path, edit, said) -> None:
    new = SPEC.replace(*edit).replace('".court::text"', '".court-name::text"')
    assert new != SPEC.replace('".court::text"', '".court-name::text"'), said
    plan = _plan(tmp_path, SPEC, new)
    assert plan == {}, said
    assert plan.whole["detail"].startswith(said)  # and says why


def test_no_narrow_read_where_the_old_spec_had_a_change_limit_or_candidates_are_held(
    tmp_path,
) -> None:
    limited = SPEC.replace(
        '"h1::text", required: true}', '"h1::text", required: true, frozen: true}'
    )
    fixed = limited.replace('".court::text"', '".court-name::text"')
    plan = _plan(tmp_path, limited, fixed)
    assert plan == {}  # a rejected review keeps an older item
    assert plan.whole["detail"].startswith("a field had a change limit when its pages were read")
    fix = SPEC.replace('".court::text"', '".court-name::text"')
    plan = _plan(tmp_path, SPEC, fix, holds=1)
    assert plan == {}
    assert plan.whole["detail"].startswith("the workspace holds 1 candidate item for review")
    assert list(_plan(tmp_path, SPEC, fix)) == ["detail"]


def test_no_narrow_read_without_the_section_the_pages_were_read_with(tmp_path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC.replace('".court::text"', '".court-name::text"'), encoding="utf-8")
    now = CompiledJob(load_spec(path))
    old = tmp_path / "old.yaml"
    old.write_text(SPEC, encoding="utf-8")
    digests = kind_fingerprints(CompiledJob(load_spec(old)))
    read_with = {k: {d} for k, d in digests.items()}
    plan = narrow.plan(now, kind_fingerprints(now), read_with, lambda d: None, 0)
    assert plan == {}
    assert plan.whole == {
        "detail": "the spec its pages were read with is not kept (read before this version)"
    }
    # two digests: some pages were read with one, some with the other
    two = {k: {d, "unknown"} for k, d in digests.items()}
    sections = {digests[k]: s for k, s in kind_sections(CompiledJob(load_spec(old))).items()}
    plan = narrow.plan(now, kind_fingerprints(now), two, sections.get, 0)
    assert plan == {}
    assert (
        plan.whole["detail"] == "its stored pages were read with 2 different versions of the spec"
    )
    # a section that does not make the digest it is kept under
    forged = {d: s.replace("court", "COURT") for d, s in sections.items()}
    plan = narrow.plan(now, kind_fingerprints(now), read_with, forged.get, 0)
    assert plan == {}
    assert plan.whole["detail"].startswith("more than its section changed since")


def test_the_sections_kept_are_the_spec_s_own(tmp_path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC, encoding="utf-8")
    job = CompiledJob(load_spec(path))
    sections = kind_sections(job)
    assert set(sections) == {"list", "detail"}
    assert json.loads(sections["detail"])["spec"]["fields"]["court"]["sources"] == [
        {"kind": "css", "expr": ".court::text"}
    ]


@pytest.mark.process
def test_a_carried_field_and_a_detail_field_fixed_together_give_a_whole_read_s_items(
    broken, tmp_path
) -> None:
    """The list's `status` (carried into every detail record) and the detail's `court`
    fixed at once: the list pages are read whole and refresh the detail rows' carried
    values, the detail pages are read field by field with the refreshed values."""
    spec, ws, _ = broken
    text = spec.read_text(encoding="utf-8")
    assert 'status: "td.status::text"' in text
    spec.write_text(text.replace('"td.status::text"', '"td.state::text"'), encoding="utf-8")
    whole = tmp_path / "whole"
    shutil.copytree(ws, whole)
    done = _reparse(spec, ws)
    _reparse(spec, whole, "--all")
    assert done["reparse_started"]["narrow"] == {"detail": ["court"]}
    assert done["reparse_finished"]["counts"]["narrow"] > 0
    assert done["reparse_finished"]["counts"]["carry_refreshed"] > 0
    items = workspace_items(ws)
    assert items == workspace_items(whole)
    assert {i["status"] for i in items.values()} == {None}  # the new carried value
    assert all(i["court"] for i in items.values())
    assert item_hashes(ws) == item_hashes(whole)
    assert _rows(ws) == _rows(whole)


@pytest.mark.process
def test_a_workspace_that_holds_candidates_is_read_whole(make_site, tmp_path) -> None:
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    # a rule some records break: they are held, not stored
    ruled = text.replace('room: ".room::text"', 'room: {css: ".room::text", pattern: "1$"}')
    assert ruled != text
    spec.write_text(ruled.replace(FIXED, BROKEN), encoding="utf-8")
    ws = tmp_path / "ws"
    assert run_cli("crawl", str(spec), "--workspace", str(ws), "-q").returncode == 4
    with sqlite3.connect(ws / "state.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM holds").fetchone()[0] > 0
    spec.write_text(ruled, encoding="utf-8")
    with sqlite3.connect(ws / "state.sqlite") as conn:
        (held,) = conn.execute("SELECT count(*) FROM holds").fetchone()
    done = _reparse(spec, ws, code=0)
    assert "narrow" not in done["reparse_started"]
    assert done["reparse_finished"]["counts"]["narrow"] == 0
    assert done["reparse_finished"]["counts"]["items_changed"] > 0
    # and it says why, in its event and to the user
    why = done["reparse_started"]["whole"]["detail"]
    assert why.startswith(f"the workspace holds {held} candidate item")
    assert f"detail read whole, not field by field: {why}" in SAID[ws]
