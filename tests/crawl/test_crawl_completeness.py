"""Declared totals and pagination that cannot stop quietly, through the real CLI against
the job board of tests/fixtures/listing_site.py (lists that say "Showing 1-5 of 13
jobs", a Bootstrap pager with `rel=next`): a wrong `next` is `pagination_suspect` and a
`total_mismatch` naming the list and the counts (exit 4); the right spec exits 0 with
no finding; a list is compared whole across a checkpoint and its resume; the count of
a page is kept with its outcome on both stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from parsel import Selector

from framework.crawl.nextlink import lookalike
from framework.workspace import NewRow, Outcome
from framework.workspace.records import LISTING
from tests.fixtures.crawl import events, run_cli
from tests.fixtures.listing_site import CATEGORIES, ListingSite
from tests.fixtures.workspace_backends import Backend

RIGHT = "a[rel=next]::attr(href)"
WRONG = "a.next::attr(href)"  # the `li` has the class, not the link: matches nothing


def _spec(site: ListingSite, folder: Path, nxt: str, total: str | None = None) -> Path:
    total = total or "{re: 'of ([\\d,]+) jobs'}"
    spec = folder / "job.yaml"
    spec.write_text(
        f"""name: jobs
source_type: jobs-test
start_urls: ["{site.url}/"]
start: index
settings: {{ROBOTSTXT_OBEY: false}}
pages:
  index:
    follow: {{css: "a.cat::attr(href)", to: listing}}
  listing:
    each: "li.job"
    follow: {{css: "a.title::attr(href)", to: job}}
    pagination: {{next: "{nxt}"}}
    total: {total}
  job:
    id: ".id::text"
    fields: {{title: "h1::text"}}
""",
        encoding="utf-8",
    )
    return spec


def _crawl(spec: Path, ws: Path, *args: str) -> Any:
    return run_cli("crawl", str(spec), "--workspace", str(ws), *args)


def _status(ws: Path) -> dict[str, Any]:
    r = run_cli("status", "jobs", "--workspace", str(ws), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _warnings(status: dict[str, Any], what: str) -> list[dict[str, Any]]:
    return [w for w in status["found_nothing"]["warnings"] if w["what"] == what]


@pytest.mark.process
def test_a_wrong_next_is_suspect_and_the_list_short_of_its_total_exits_4(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    site = listing_site()
    ws = tmp_path / "ws"
    r = _crawl(_spec(site, tmp_path, WRONG), ws)
    assert r.returncode == 4, r.stderr
    assert "1 list yielded other than the total their pages declare" in r.stderr
    assert "try `a[rel=next]::attr(href)`" in r.stderr
    a, b = f"{site.url}/jobs/a", f"{site.url}/jobs/b"
    assert f"expected 13, found 5 (short by 8), e.g. at {a}" in r.stderr
    status = _status(ws)
    assert (status["state"], status["exit_code"]) == ("incomplete", 4)
    (suspect,) = _warnings(status, "pagination_suspect")
    # category b's only page has a disabled Next: the end of a list, not a suspect
    assert (suspect["detail"], suspect["count"], suspect["examples"]) == (RIGHT, 1, [a])
    (mismatch,) = _warnings(status, "total_mismatch")
    assert (mismatch["kind"], mismatch["examples"]) == ("listing", [a])
    lists = status["completeness"]
    assert (lists["lists"], lists["checked"], lists["mismatched"]) == (2, 2, 1)
    assert lists["mismatches"] == [
        {"kind": "listing", "url": a, "pages": 1, "expected": 13, "found": 5, "tolerance": 0}
    ]
    assert b not in json.dumps(lists["mismatches"])
    finished = [e for e in events(ws) if e["event"] == "run_finished"][-1]
    assert finished["exit_code"] == 4
    noted = [e for e in events(ws) if e.get("what") in ("total_mismatch", "pagination_suspect")]
    assert sorted(e["what"] for e in noted) == ["pagination_suspect", "total_mismatch"]
    text = run_cli("status", "jobs", "--workspace", str(ws)).stdout
    assert "incomplete: a list yielded other than the total its pages declare" in text
    assert f"listing {a}: expected 13, found 5 over 1 page" in text


@pytest.mark.process
def test_the_right_spec_exits_0_with_no_finding(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    site = listing_site()
    ws = tmp_path / "ws"
    r = _crawl(_spec(site, tmp_path, RIGHT), ws)
    assert r.returncode == 0, r.stderr
    status = _status(ws)
    assert (status["state"], status["exit_code"]) == ("done", 0)
    assert status["found_nothing"]["warnings"] == []
    assert status["items"]["complete"] == sum(CATEGORIES.values())
    lists = status["completeness"]
    assert (lists["lists"], lists["checked"], lists["mismatched"]) == (2, 2, 0)
    # every page of category a (3) was read: the last one's disabled Next is no suspect
    assert site.hits.count("/jobs/a") == 3


@pytest.mark.process
def test_a_tolerance_allows_a_list_that_overstates_its_total(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    site = listing_site(lie=1)  # category b says 5 jobs, lists 4
    strict, loose = tmp_path / "strict", tmp_path / "loose"
    strict.mkdir()
    loose.mkdir()
    r = _crawl(_spec(site, strict, RIGHT), strict / "ws")
    assert r.returncode == 4
    assert "expected 5, found 4 (short by 1)" in r.stderr
    tolerant = "{re: 'of ([\\d,]+) jobs', tolerance: 1}"
    r = _crawl(_spec(site, loose, RIGHT, total=tolerant), loose / "ws")
    assert r.returncode == 0, r.stderr
    assert _status(loose / "ws")["completeness"]["mismatched"] == 0


@pytest.mark.process
def test_a_list_is_compared_whole_across_a_checkpoint_and_its_resume(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    """The first run stops inside category a's list: that list is not compared (its
    pages are not all done), not reported short; the resumed run, which reads only the
    rest of it, compares the whole list from the pages both runs kept."""
    site = listing_site()
    ws = tmp_path / "ws"
    spec = _spec(site, tmp_path, RIGHT)
    r = _crawl(spec, ws, "--max-requests", "3")
    assert r.returncode == 3, r.stderr
    assert "total_mismatch" not in r.stderr
    first = _status(ws)
    assert _warnings(first, "total_mismatch") == []
    assert first["completeness"]["not_checked"] >= 1
    assert "not done" in first["completeness"]["not_checked_examples"][0]["why"]
    r = _crawl(spec, ws)
    assert r.returncode == 0, r.stderr
    lists = _status(ws)["completeness"]
    assert (lists["lists"], lists["checked"], lists["mismatched"]) == (2, 2, 0)
    assert site.hits.count("/jobs/a") == 3  # each page once over both runs


@pytest.mark.process
def test_preview_shows_the_declared_total_and_the_suspect_link(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    site = listing_site()
    spec = _spec(site, tmp_path, WRONG)
    r = run_cli("preview", str(spec), f"{site.url}/jobs/a", "--kind", "listing")
    assert "declared total: 13" in r.stdout, r.stdout + r.stderr
    assert (
        f"pagination_suspect: this page has a link that looks like a next page: try next: {RIGHT!r}"
        in r.stdout
    )
    r = run_cli("preview", str(spec), f"{site.url}/jobs/a", "--kind", "listing", "--json")
    got = json.loads(r.stdout)
    assert (got["total"], got["next_suspect"]) == (13, RIGHT)


@pytest.mark.parametrize(
    ("html", "url", "page", "want"),
    [
        # a rel=next link wins over a page number before it
        ('<a href="?page=2">2</a><a rel="next" href="?page=2">Next</a>', "/l", 1, RIGHT),
        (
            '<li class="next"><a class="pl" href="/l?page=3">Next \u203a</a></li>',
            "/l?page=2",
            2,
            "li.next a::attr(href)",
        ),
        (
            '<a class="pl" href="/l?page=4">4</a>',
            "/l?page=3",
            3,
            "//a[normalize-space()='4']/@href",
        ),
        ('<button class="more">Next</button>', "/l", 1, "//button[normalize-space()='Next']"),
        # the end of a list: disabled, nowhere, this page, a page already passed
        ('<li class="next disabled"><a href="/l?page=4">Next</a></li>', "/l?page=3", 3, None),
        ('<a rel="next" aria-disabled="true" href="/l?page=4">Next</a>', "/l?page=3", 3, None),
        ('<a rel="next" href="#">Next</a>', "/l", 1, None),
        ('<a rel="next" href="/l?page=3">Next</a>', "/l?page=3", 3, None),
        ('<a class="x" href="/l?page=2">Next</a>', "/l?page=3", 3, None),
        ('<a href="/about">About</a>', "/l", 1, None),
    ],
)
def test_a_next_lookalike(html: str, url: str, page: int, want: str | None) -> None:
    got = lookalike(Selector(text=f"<html><body>{html}</body></html>"), "http://s" + url, page)
    assert got == want


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def test_a_pages_count_is_kept_with_its_outcome_on_both_stores(
    backend: str, make_workspace_backend: Callable[[str], Backend]
) -> None:
    store = make_workspace_backend(backend).open()
    (row,) = store.seed([NewRow("listing", "http://s/l", context={"carry": {"c": 1}})])
    # alone, and in a group with another page (PostgreSQL writes a group at once)
    store.commit(Outcome(row.id, ok=True, http_status=200, listing={"total": 13, "found": 5}))
    (other,) = store.seed([NewRow("listing", "http://s/m")])
    store.commit_many(
        [
            Outcome(row.id, ok=True, http_status=200, listing={"total": 13, "found": 4}),
            Outcome(other.id, ok=True, http_status=200, listing={"total": None, "found": 2}),
        ]
    )
    got = store.get_row(row.id)
    assert got.context == {"carry": {"c": 1}, LISTING: {"total": 13, "found": 4}}
    assert store.get_row(other.id).context == {LISTING: {"total": None, "found": 2}}


@pytest.mark.process
def test_the_fix_loop_reparse_then_crawl_ends_with_the_lists_whole(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    """After the wrong `next`, the fixed spec's reparse finds the next pages in the
    stored ones: the list is not done (not checked, no stale mismatch carried), and the
    crawl that fetches them ends with every list holding its total."""
    site = listing_site()
    ws = tmp_path / "ws"
    assert _crawl(_spec(site, tmp_path, WRONG), ws).returncode == 4
    spec = _spec(site, tmp_path, RIGHT)
    r = run_cli("reparse", str(spec), "--workspace", str(ws))
    assert r.returncode in (0, 3), r.stderr
    status = _status(ws)
    assert _warnings(status, "total_mismatch") == []
    assert status["state"] == "unfinished"
    assert status["completeness"]["not_checked"] == 1
    r = _crawl(spec, ws)
    assert r.returncode == 0, r.stderr
    status = _status(ws)
    assert status["found_nothing"]["warnings"] == []
    assert status["completeness"]["mismatched"] == 0
    assert status["items"]["complete"] == sum(CATEGORIES.values())


@pytest.mark.process
def test_a_fresh_crawl_that_lost_part_of_a_kind_is_volume_drift(
    listing_site: Callable[..., ListingSite], tmp_path: Path
) -> None:
    # a recurring crawl without `total:`: the right spec, then a `--fresh` run whose
    # `next` broke since; every row is ok, and only the sizes say what is missing
    site = listing_site()
    ws = tmp_path / "ws"
    spec = _spec(site, tmp_path, RIGHT)
    text = spec.read_text(encoding="utf-8")
    text = text.replace("    total: {re: 'of ([\\d,]+) jobs'}\n", "")
    text = text.replace("start: index\n", "start: index\ndrift: {min_records: 3}\n")
    spec.write_text(text, encoding="utf-8")
    assert "total:" not in text
    r = _crawl(spec, ws)
    assert r.returncode == 0, r.stderr
    whole = [e for e in events(ws) if e["event"] == "run_finished"][-1]["volume"]
    jobs = sum(CATEGORIES.values())
    assert whole["listing"]["pages"] == 4
    assert whole["job"]["records"] == jobs
    assert _status(ws)["drift"] == []

    spec.write_text(text.replace(RIGHT, WRONG), encoding="utf-8")
    r = _crawl(spec, ws, "--fresh")
    assert r.returncode == 0, r.stderr  # drift is said, as a fallback is: not a failure
    assert "part of the harvest missing? listing gave 2 pages this crawl" in r.stderr
    drift = {(d["kind"], d["what"]): (d["before"], d["now"]) for d in _status(ws)["drift"]}
    a_first = 5  # category a's first page; b has one page
    assert drift == {
        ("listing", "pages"): (4, 2),
        ("job", "pages"): (jobs, a_first + CATEGORIES["b"]),
        ("job", "records"): (jobs, a_first + CATEGORIES["b"]),
    }
    out = run_cli("status", "jobs", "--workspace", str(ws)).stdout
    assert "drift: listing 2 pages, the last whole crawl 4" in out

    # a resumed or partial run is not compared: nothing of a kind was read whole
    spec.write_text(text, encoding="utf-8")
    r = _crawl(spec, ws)
    assert r.returncode == 0, r.stderr
    last = [e for e in events(ws) if e["event"] == "run_finished"][-1]
    assert "listing" not in last.get("volume", {})


def test_lists_are_compared_whole_from_the_store(
    listing_site: Callable[..., ListingSite],
    make_workspace_backend: Callable[[str], Backend],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """completeness.check in this process, on rows committed as the crawl commits them:
    a list of two pages short of its total, one that holds it, one with a page not
    done and one whose pages said no total (each of the last two: not checked)."""
    import logging

    from framework.crawl import completeness
    from framework.crawl.findings import Findings
    from framework.crawl.page import CompiledJob
    from framework.spec import load_spec

    job = CompiledJob(load_spec(_spec(listing_site(), tmp_path, RIGHT)))
    store = make_workspace_backend("sqlite").open()
    heads = store.seed([NewRow("listing", f"http://s/{c}") for c in "abcd"])
    a, b, c, d = (r.id for r in heads)

    def page(row_id: int, total: int | None, found: int, next_url: str | None = None) -> int:
        new = [NewRow("listing", next_url, context={"page": 2})] if next_url else []
        got = store.commit(
            Outcome(
                row_id,
                ok=True,
                http_status=200,
                new_rows=new,
                listing={"total": total, "found": found},
            )
        )
        return got.inserted[0].id if new else 0

    a2 = page(a, 13, 5, "http://s/a?page=2")
    page(a2, 13, 5)
    page(b, 4, 4)
    page(c, 9, 5, "http://s/c?page=2")  # its page 2 stays pending
    page(d, None, 3)

    said: list[dict[str, Any]] = []
    findings = Findings(lambda name, **kw: said.append({"event": name, **kw}), logging.getLogger())
    got = completeness.check(job, store, findings, logging.getLogger())
    assert (got.lists, got.checked, got.mismatched, got.unchecked) == (4, 2, 1, 2)
    assert got.mismatches == [
        {
            "kind": "listing",
            "url": "http://s/a",
            "pages": 2,
            "expected": 13,
            "found": 10,
            "tolerance": 0,
        }
    ]
    why = {n["url"]: n["why"] for n in got.not_checked}
    assert why == {
        "http://s/c": "1 page of the list not done",
        "http://s/d": "no page of the list said its total",
    }
    (warning,) = findings.warnings()
    assert (warning["what"], warning["detail"]) == (
        "total_mismatch",
        "expected 13, found 10 (short by 3)",
    )
    assert [e["what"] for e in said] == ["total_mismatch"]
    # a `total` source that found nothing on a list's pages is said as a warning
    (told,) = [r for r in caplog.records if r.getMessage().startswith("completeness:")]
    assert told.levelname == "WARNING"
    assert "http://s/d: no page of the list said its total" in told.getMessage()


def test_volume_drift_compares_a_kind_read_whole_with_the_last_whole_crawl() -> None:
    import logging

    from framework.crawl.drift import Drift

    said: list[dict[str, Any]] = []
    drift = Drift(
        lambda name, **kw: said.append(kw), logging.getLogger(), fill_drop=0.25, min_records=3
    )
    before = {
        "listing": {"pages": 4, "records": 0},
        "job": {"pages": 17, "records": 17},
        "index": {"pages": 1, "records": 0},
    }
    now = {
        "listing": {"pages": 3, "records": 0},
        "job": {"pages": 9, "records": 12},
        "index": {"pages": 0, "records": 0},
        "new": {"pages": 1, "records": 1},
    }
    got = drift.volume(now, before, 0.25, lambda kind: [f"http://s/{kind}"])
    # listing: 3 of 4 is a 25% drop, not more; index: under min_records; new: no before
    assert [(d["kind"], d["what"], d["before"], d["now"]) for d in got] == [
        ("job", "pages", 17, 9),
        ("job", "records", 17, 12),
    ]
    assert got[0]["examples"] == ["http://s/job"]
    assert said == got
