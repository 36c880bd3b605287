"""The spec author's loop through the CLI only, against the fixture site: a spec made
with `framework new`, crawled with a wrong selector (found-nothing warning, fill rate
0% in the log, the events and `framework status`), fixed, and applied with `framework
reparse`, which fetches nothing and yields what a fresh crawl with the fixed spec yields.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.fixtures.crawl import events, item_hashes, url_log, workspace_items

EXIT_OK = 0
EXIT_HALTED = 4

# The body of the job (the schema line `framework new` wrote stays on top). `court`
# is the deliberately wrong selector: the site has `.court`.
SPEC = """
name: loop
source_type: sipp-demo
start_urls: ["{base}/cases"]
list:
  each: "table.cases tbody tr"
  follow: "a.detail::attr(href)"
  next: "a.next::attr(href)"
  fields:
    status: "td.status::text"
detail:
  id: {{css: "#case-number::text", required: true}}
  fields:
    title: {{css: "h1.title::text", required: true}}
    court: "{court}"
    filed: {{css: ".filed::text", type: date, format: "%d.%m.%Y"}}
    judges: {{css: "ul.judges li::text", many: true}}
  subtabs:
    hearings:
      url: "/cases/{{id}}/tab/hearings"
      each: "tbody tr"
      fields:
        date: {{css: "td.date::text", type: date, format: "%d.%m.%Y"}}
        agenda: "td.agenda::text"
settings:
  DOWNLOAD_DELAY: 0
"""
WRONG, RIGHT = ".courtroom::text", ".court::text"


def _new_job(crawl_cli, root: Path, site_url: str) -> Path:
    (root / "projects").mkdir(parents=True, exist_ok=True)
    r = crawl_cli("new", "loop", "--start-url", f"{site_url}/cases", cwd=root)
    assert r.returncode == 0, r.stderr
    spec = root / "projects" / "loop" / "job.yaml"
    first = spec.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    return spec


def _write(spec: Path, site_url: str, court: str) -> None:
    first = spec.read_text(encoding="utf-8").splitlines()[0]
    body = SPEC.format(base=site_url.rstrip("/"), court=court)
    spec.write_text(first + "\n" + body, encoding="utf-8")


def _status(crawl_cli, root: Path, *extra: str) -> str:
    r = crawl_cli("status", "loop", *extra, cwd=root)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _by_kind(ws: Path) -> dict[str, str]:
    with sqlite3.connect(ws / "state.sqlite") as conn:
        return dict(conn.execute("SELECT fingerprint, status FROM rows"))


@pytest.mark.slow
@pytest.mark.process
def test_wrong_selector_warned_then_fixed_by_reparse_without_fetching(
    site, tmp_path, crawl_cli
) -> None:
    root = tmp_path / "proj"
    spec = _new_job(crawl_cli, root, site.url)
    _write(spec, site.url, WRONG)
    ws = root / "var" / "loop"

    # 1. the crawl with the wrong selector: the site's broken pages are error rows
    # (exit 4 as before), and the field that matched nothing is said once
    r = crawl_cli("crawl", "loop", cwd=root)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "field 'court' of detail is empty in every record this run" in r.stderr
    before_items = workspace_items(ws)
    n = len(site.truth.expected_records())
    assert len(before_items) == n
    found = [e for e in events(ws) if e["event"] == "found_nothing"]
    assert [(e["what"], e["kind"], e.get("field")) for e in found] == [
        ("records_dropped", "detail", None),  # the site's page without a title
        ("field_empty", "detail", "court"),
    ]
    assert found[1]["count"] == n
    assert len(found[1]["examples"]) == 3
    finished = events(ws)[-1]
    assert finished["event"] == "run_finished"
    assert finished["fill"]["detail"]["records"] == n
    assert finished["fill"]["detail"]["fields"]["court"] == 0
    assert finished["fill"]["detail"]["fields"]["title"] == n
    report = json.loads(_status(crawl_cli, root, "--json"))
    assert report["fill_rates"]["last_run"]["detail"]["fields"]["court"] == 0.0
    assert report["fill_rates"]["stored"]["detail"]["fields"]["court"] == 0.0
    assert report["fill_rates"]["stored"]["detail"]["fields"]["title"] == 1.0
    assert {w["what"] for w in report["found_nothing"]["warnings"]} == {
        "records_dropped",
        "field_empty",
    }
    assert report["last_reparse"] is None
    text = _status(crawl_cli, root)
    assert f"field_empty detail.court: {n}x, e.g. http" in text
    assert "court" in text
    assert "0.0%" in text
    assert "last crawl / all stored items" in text
    assert "last reparse:" not in text
    assert all(item["court"] is None for item in before_items.values())
    hashes = item_hashes(ws)
    requests_before = site.stats()
    logged = len(url_log(ws))

    # 2. fix the spec: the crawl alone says the spec changed and names the two ways
    _write(spec, site.url, RIGHT)
    r = crawl_cli("crawl", "loop", cwd=root)
    assert r.returncode == EXIT_HALTED
    assert "the spec changed" in r.stderr
    assert "framework reparse loop" in r.stderr
    assert "--fresh" in r.stderr
    assert workspace_items(ws) == before_items  # "nothing to do": the fix reached nothing

    # 3. reparse: every item gets its court, no request is made
    rows_before = _by_kind(ws)
    r = crawl_cli("reparse", "loop", cwd=root)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert "no request made" in r.stderr
    # counted in words a person reads: "1 page failed", not "1 pages failed"; a value
    # that failed its type is counted apart from the pages (none does here)
    assert "0 new rows pending; 1 page failed; 0 values failed their type; 1 warning\n" in (
        r.stderr
    )
    assert site.stats() == requests_before  # the site's counters prove it
    assert len(url_log(ws)) == logged
    assert _by_kind(ws) == rows_before  # nothing new to fetch, no status changed
    after = workspace_items(ws)
    assert sorted(after) == sorted(before_items)
    assert all(item["court"] for item in after.values())
    new_hashes = item_hashes(ws)
    assert all(new_hashes[k][0] != hashes[k][0] for k in hashes)  # each ships again
    assert [k for k, (_, c) in new_hashes.items() if c] == [k for k, (_, c) in hashes.items() if c]
    started, done = [e for e in events(ws) if e["event"].startswith("reparse_")]
    assert started["event"] == "reparse_started"
    assert done["event"] == "reparse_finished"
    assert done["counts"]["items_changed"] == n
    assert done["counts"]["items_new"] == 0
    assert done["counts"]["rows_new"] == 0
    assert done["fill"]["detail"]["fields"]["court"] == n
    report = json.loads(_status(crawl_cli, root, "--json"))
    assert report["fill_rates"]["stored"]["detail"]["fields"]["court"] == 1.0
    assert report["found_nothing"]["by"] == "reparse"
    assert [w["what"] for w in report["found_nothing"]["warnings"]] == ["records_dropped"]
    assert report["last_reparse"]["finished"] == done["time"]
    assert report["last_reparse"]["counts"] == done["counts"]
    assert report["spec"]["changes_total"] == 1  # the fix, applied by the reparse
    text = _status(crawl_cli, root)
    assert f"last reparse: finished {done['time']} (" in text
    assert f"items_changed {n}" in text
    assert "last reparse / all stored items" in text

    # a second reparse reads nothing (the spec did not change since); with --all it
    # reads every page and changes nothing (unchanged content is not touched)
    r = crawl_cli("reparse", "loop", cwd=root)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert events(ws)[-1]["counts"]["pages"] == 0
    r = crawl_cli("reparse", "loop", "--all", cwd=root)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert item_hashes(ws) == new_hashes
    assert events(ws)[-1]["counts"]["items_changed"] == 0

    # 4. the same items as a fresh crawl with the fixed spec, field by field
    fresh_ws = tmp_path / "fresh"
    r = crawl_cli("crawl", "loop", "--workspace", str(fresh_ws), cwd=root)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    fresh = workspace_items(fresh_ws)
    assert sorted(fresh) == sorted(after)
    for key, item in fresh.items():
        for name, value in item.items():
            assert after[key].get(name) == value, (key, name)
        assert set(after[key]) == set(item), key
    assert {k: c for k, (_, c) in item_hashes(fresh_ws).items()} == {
        k: c for k, (_, c) in new_hashes.items()
    }
