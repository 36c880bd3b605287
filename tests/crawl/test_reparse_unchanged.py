"""`framework reparse` reads again only the pages of kinds whose part of the spec changed
since they were read (framework/crawl/fingerprint.py), and what it leaves unread is
what reading it would give: the same items as `--all`, the last run's fill rates kept.
A job-level change, other extraction limits on the crawl, other code (an edited module
of the framework, another parser version) or a workspace from before digests were kept
leave every page of the kinds concerned to be read again (a reparse
killed before it finished: tests/crawl/test_reparse_speed_paths.py)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import parsel
import pytest

from framework.crawl import fingerprint
from framework.crawl.fingerprint import kind_fingerprints, source_digest
from framework.crawl.page import CompiledJob
from framework.spec import load_spec
from framework.workspace import Workspace
from tests.fixtures.crawl import events, item_hashes, run_cli, workspace_items
from tests.fixtures.site import write_good_spec

DETAIL_FIX = ('room: ".room::text"', 'room: ".room::text, .courtroom::text"')


@pytest.fixture
def crawled(make_site, tmp_path) -> tuple[Path, Path, Any]:
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages
    return spec, ws, site


def _reparse(spec: Path, ws: Path, *args: str) -> tuple[str, dict[str, Any]]:
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q", "--processes", "1", *args)
    assert r.returncode == 0, r.stderr[-2000:]  # no page that was read before fails now
    return r.stderr, [e for e in events(ws) if e["event"] == "reparse_finished"][-1]


def _stored_by_kind(ws: Path) -> Counter[str]:
    """Stored pages a reparse may read, by kind (ok rows and parse/validation errors)."""
    with sqlite3.connect(ws / "state.sqlite") as conn:
        return Counter(
            dict(
                conn.execute(
                    "SELECT r.kind, count(*) FROM responses p JOIN rows r ON r.id = p.row_id "
                    "WHERE r.status = 'ok' OR r.last_error_kind IN ('parse', 'validation') "
                    "GROUP BY r.kind"
                ).fetchall()
            )
        )


def _digests(spec: Path) -> dict[str, str]:
    return kind_fingerprints(CompiledJob(load_spec(spec)))


@pytest.mark.process
def test_an_unchanged_spec_reads_nothing_and_all_reads_everything(crawled) -> None:
    spec, ws, site = crawled
    stored = _stored_by_kind(ws)
    assert set(stored) >= {"list", "detail", "detail.rulings"}
    with Workspace.open(ws, create=False, readonly=True) as opened:
        assert opened.read_with() == {k: {d} for k, d in _digests(spec).items()}
    hashes, requests = item_hashes(ws), site.stats()

    said, done = _reparse(spec, ws)
    assert done["counts"]["pages"] == 0
    assert done["counts"]["unchanged_kind"] == sum(stored.values())
    assert "left as they are; --all reads them too" in said
    assert f"{sum(stored.values())} stored pages of kinds whose spec did not change" in said
    assert item_hashes(ws) == hashes
    # status reads the reparse as the last run: the crawl's fill rates are still there
    assert done["carried"] == ["detail"]  # the kind that emits items
    r = run_cli("status", "fixture-cases", "--workspace", str(ws), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    rates = json.loads(r.stdout)["fill_rates"]
    last = rates["last_run"]
    assert last["detail"]["records"] > 0
    assert last["detail"]["fields"]["title"] == 1.0
    assert rates["carried"] == ["detail"]  # and says those figures are the crawl's
    r = run_cli("status", "fixture-cases", "--workspace", str(ws))
    assert "detail: " in r.stdout
    line = next(s for s in r.stdout.splitlines() if s.strip().startswith("detail: "))
    assert line.endswith("(left unread by the last reparse: the run before's)"), line

    said, done = _reparse(spec, ws, "--all")
    assert done["counts"]["pages"] == sum(stored.values())
    assert done["counts"]["unchanged_kind"] == 0
    assert (done["counts"]["items_changed"], done["counts"]["items_new"]) == (0, 0)
    assert item_hashes(ws) == hashes
    assert site.stats() == requests
    r = run_cli("status", "fixture-cases", "--workspace", str(ws), "--json")
    assert json.loads(r.stdout)["fill_rates"]["carried"] == []  # every kind read this time


@pytest.mark.process
def test_a_detail_fix_reads_the_detail_pages_and_their_subtabs_only(crawled, tmp_path) -> None:
    spec, ws, _ = crawled
    every = tmp_path / "every"
    shutil.copytree(ws, every)
    stored = _stored_by_kind(ws)
    old = _digests(spec)
    text = spec.read_text(encoding="utf-8")
    assert DETAIL_FIX[0] in text
    spec.write_text(text.replace(*DETAIL_FIX), encoding="utf-8")
    new = _digests(spec)
    assert new["list"] == old["list"]
    assert new["detail"] != old["detail"]
    assert new["detail.rulings"] == new["detail"]

    said, done = _reparse(spec, ws)
    # one kind left unread, counted in words: "N stored pages of a kind whose spec..."
    lists = stored["list"]
    page = "stored page" if lists == 1 else "stored pages"
    assert f"{lists} {page} of a kind whose spec did not change since they were read (list)" in (
        said
    )
    detail_pages = sum(n for kind, n in stored.items() if kind.startswith("detail"))
    assert done["counts"]["pages"] == detail_pages
    assert done["counts"]["unchanged_kind"] == stored["list"]
    assert "carried" not in done  # the detail kind was read; the list emits no items
    _, every_done = _reparse(spec, every, "--all")
    assert every_done["counts"]["pages"] == sum(stored.values())
    assert workspace_items(ws) == workspace_items(every)  # what was left would give the same
    assert item_hashes(ws) == item_hashes(every)
    for key in ("items_changed", "items_new", "rows_new", "errors"):
        assert done["counts"][key] == every_done["counts"][key], key
    with Workspace.open(ws, create=False, readonly=True) as opened:
        assert opened.read_with() == {k: {d} for k, d in new.items()}  # the old one forgotten


@pytest.mark.process
def test_a_job_level_change_reads_every_kind_again(crawled) -> None:
    spec, ws, _ = crawled
    stored = _stored_by_kind(ws)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text + "\nlanguages: [id]\n", encoding="utf-8")
    _, done = _reparse(spec, ws)
    assert done["counts"]["pages"] == sum(stored.values())
    assert done["counts"]["unchanged_kind"] == 0


@pytest.mark.process
def test_a_crawl_with_other_extraction_limits_leaves_its_pages_to_be_read(make_site, tmp_path):
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    # the limits decide which pages fail (FRAMEWORK_MAX_MATCHES): a reparse, which uses
    # the spec's, must not take the crawl's reading of them as its own
    r = run_cli(
        "crawl", str(spec), "--workspace", str(ws), "-q", "-s", "FRAMEWORK_MAX_MATCHES=5000"
    )
    assert r.returncode == 4, r.stderr[-2000:]
    with Workspace.open(ws, create=False, readonly=True) as opened:
        marked = opened.read_with()
    assert marked["detail"] != {_digests(spec)["detail"]}
    _, done = _reparse(spec, ws)
    assert done["counts"]["unchanged_kind"] == 0
    assert done["counts"]["pages"] == sum(_stored_by_kind(ws).values())


def test_what_a_workspace_was_read_with_is_added_to_then_settled(tmp_path) -> None:
    with Workspace.open(tmp_path / "ws") as ws:
        assert ws.read_with() == {}  # a workspace from before: nothing is known
        ws.mark_read_with({"list": "a1", "detail": "b1", "detail.tab": "b1"})
        ws.mark_read_with({"list": "a1", "detail": "b2", "detail.tab": "b2"})  # a run began
        assert ws.read_with() == {
            "list": {"a1"},
            "detail": {"b1", "b2"},
            "detail.tab": {"b1", "b2"},
        }
        ws.settle_read_with({"detail": "b2"})  # ...and read every detail page
        assert ws.read_with() == {"list": {"a1"}, "detail": {"b2"}, "detail.tab": {"b1", "b2"}}


@pytest.mark.process
def test_the_spec_s_own_limits_are_read_alike_by_crawl_and_reparse(make_site, tmp_path) -> None:
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    limits = "\nsettings:\n  DOWNLOAD_MAXSIZE: 20000000\n  FRAMEWORK_MAX_MATCHES: 50000\n"
    spec.write_text(spec.read_text(encoding="utf-8") + limits, encoding="utf-8")
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]
    _, done = _reparse(spec, ws)  # the crawl read every kind as the reparse would
    assert done["counts"]["pages"] == 0
    assert done["counts"]["unchanged_kind"] == sum(_stored_by_kind(ws).values())


@pytest.mark.process
def test_pages_stored_before_digests_were_kept_are_read_after_a_new_crawl(crawled) -> None:
    """A workspace crawled by a version that kept no digests, then a spec fix and a crawl
    by this one (which finds nothing to fetch): the fix must still reach every page."""
    spec, ws, _ = crawled
    stored = _stored_by_kind(ws)
    with sqlite3.connect(ws / "state.sqlite") as conn:  # as such a workspace has it
        conn.execute("DELETE FROM meta WHERE key LIKE 'read_with:%'")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace(*DETAIL_FIX), encoding="utf-8")
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]
    with Workspace.open(ws, create=False, readonly=True) as opened:
        marked = opened.read_with()
    # every kind with pages of unknown reading; no page read, so no digest of this spec
    assert marked == {k: {"unknown"} for k in _digests(spec)}
    _, done = _reparse(spec, ws)
    assert done["counts"]["unchanged_kind"] == 0
    assert done["counts"]["pages"] == sum(_stored_by_kind(ws).values()) >= sum(stored.values())
    with Workspace.open(ws, create=False, readonly=True) as opened:
        assert opened.read_with() == {k: {d} for k, d in _digests(spec).items()}


def test_the_source_digest_sees_every_edit_of_a_module(tmp_path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("Y = 2\n")
    first = source_digest(tmp_path / "pkg")
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    assert source_digest(tmp_path / "pkg") == first
    (tmp_path / "pkg" / "sub" / "b.py").write_text("Y = 3\n")  # one byte
    edited = source_digest(tmp_path / "pkg")
    assert edited != first
    (tmp_path / "pkg" / "sub" / "b.py").rename(tmp_path / "pkg" / "sub" / "c.py")
    assert source_digest(tmp_path / "pkg") not in (first, edited)
    (tmp_path / "pkg" / "sub" / "c.py").rename(tmp_path / "pkg" / "sub" / "b.py")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")  # an empty module too
    assert source_digest(tmp_path / "pkg") not in (first, edited)


def test_other_code_or_another_parser_version_changes_every_kind_s_digest(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_good_spec("cases", "http://127.0.0.1:9", tmp_path)
    before = _digests(spec)
    code = fingerprint.code_digest()
    monkeypatch.setattr(fingerprint, "code_digest", lambda: code[::-1])  # an edited module
    assert all(before[k] != d for k, d in _digests(spec).items())
    monkeypatch.undo()

    for target, name, other in (
        (fingerprint, "source_digest", lambda root: "an edited module"),
        (parsel, "__version__", parsel.__version__ + ".post1"),
    ):
        fingerprint.code_digest.cache_clear()
        monkeypatch.setattr(target, name, other)
        try:
            assert fingerprint.code_digest() != code, name
            assert all(before[k] != d for k, d in _digests(spec).items())
        finally:
            monkeypatch.undo()
            fingerprint.code_digest.cache_clear()
    assert _digests(spec) == before


@pytest.mark.process
def test_pages_read_before_that_this_spec_cannot_read_exit_4_and_say_how_many(crawled) -> None:
    spec, ws, site = crawled
    text = spec.read_text(encoding="utf-8")
    assert '"#case-number::text"' in text
    spec.write_text(text.replace('"#case-number::text"', '"#no-such-id::text"'), encoding="utf-8")
    requests = site.stats()
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q", "--processes", "1")
    assert r.returncode == 4, r.stderr[-2000:]
    done = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    failed = done["counts"]["newly_failed"]
    assert failed > 1  # every detail page that was ok: its record has no id now
    assert f"{failed} stored pages that were read before cannot be read with this spec" in r.stderr
    assert site.stats() == requests
