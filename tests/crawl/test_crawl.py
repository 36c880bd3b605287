"""Real crawls of the fixture site through the real CLI and the real Scrapy engine,
checked against the site's ground truth (framework.demo.truth)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures import procs
from tests.fixtures.crawl import events, item_hashes, url_log, workspace_items

# A finished crawl with rows that ended in error (the 404 page, the untitled page, the
# always-failing sub-tab) exits 4: a human must look.
EXIT_HALTED = 4


def _status(crawl_cli, ws: Path) -> dict:
    r = crawl_cli("status", "job", "--workspace", str(ws), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.process
def test_short_form_crawl_yields_exactly_the_truth(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    truth = site.truth

    items = workspace_items(ws)
    expected = {rec["dedupe_key"]: rec for rec in truth.expected_records()}
    assert len(expected) == 70
    assert sorted(items) == sorted(expected)
    # field by field for several records, so a failure names the field
    for key in sorted(expected)[:5] + [f"sipp-demo:{i}" for i in truth.fallbacks]:
        for name, value in expected[key].items():
            assert items[key].get(name) == value, (key, name)
    assert items == expected

    # completeness: only the record whose sub-tab always fails is incomplete
    hashes = item_hashes(ws)
    incomplete = {k for k, (_, complete) in hashes.items() if not complete}
    assert incomplete == {f"sipp-demo:{i}" for i in truth.incomplete}

    # the broken pages are error rows with typed notes; nothing else failed
    status = _status(crawl_cli, ws)
    failed = {
        (m["url"], m["last_error_kind"], m["last_http_status"]) for m in status["misbehaving"]
    }
    kinds = {"http_404": "http_4xx", "missing_required": "validation", "http_500": "http_5xx"}
    assert failed == {(b.url, kinds[b.reason], b.status) for b in truth.broken}
    assert status["queue"]["pending"] == 0
    assert status["rows"]["by_kind"]["list"] == {"pending": 0, "ok": 7, "error": 0, "total": 7}
    for tab in ("rulings", "hearings", "documents"):
        assert status["rows"]["by_kind"][f"detail.{tab}"]["total"] == 70

    # the layout change was reported, not silently absorbed
    fallbacks = [e for e in events(ws) if e["event"] == "layout_fallback"]
    assert fallbacks
    assert fallbacks[0]["field"] == "amount"
    assert "matched fallback" in r.stderr
    assert "missing required field(s) title" in r.stderr


@pytest.mark.process
def test_finished_job_started_again_fetches_nothing(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    before = len(url_log(ws))
    hashes = item_hashes(ws)
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws))
    assert r.returncode == EXIT_HALTED  # still: the exhausted rows need a human
    assert "nothing to do" in r.stderr
    assert len(url_log(ws)) == before
    assert item_hashes(ws) == hashes
    assert events(ws)[-1]["event"] == "run_finished"
    assert events(ws)[-1]["reason"] == "already_done"


@pytest.mark.slow
@pytest.mark.process
def test_fresh_recrawl_refetches_and_changes_no_item(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    hashes = item_hashes(ws)
    first = len(url_log(ws))
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--fresh", "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]
    assert len(url_log(ws)) == 2 * first
    assert item_hashes(ws) == hashes
    finished = events(ws)[-1]
    assert finished["counts"]["items_changed"] == 0
    assert finished["counts"]["items_new"] == 0


@pytest.mark.process
def test_general_form_chain_of_page_kinds(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("courts", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    expected = {rec["dedupe_key"]: rec for rec in site.truth.expected_records()}
    assert workspace_items(ws) == expected


@pytest.mark.process
def test_json_api_with_page_number_pagination(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("api", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == 0, r.stderr[-3000:]
    items = workspace_items(ws)
    truth = site.truth.api_records()
    assert items == {rec["dedupe_key"]: rec for rec in truth.values()}


@pytest.mark.process
def test_json_api_with_offset_pagination_until_empty(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("api_offset", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == 0, r.stderr[-3000:]
    lists = [line for line in url_log(ws) if line["kind"] == "list"]
    assert lists[-1]["url"].endswith("offset=70") or lists[-1]["url"].endswith("offset=80")
    assert len(workspace_items(ws)) == len(site.truth.api_records())


@pytest.mark.process
def test_scrapy_list_and_scrapy_crawl_run_the_same_spider(site, good_spec, tmp_path):
    spec = good_spec("cases", site.url, tmp_path)
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = framework.scrapy_settings\n")
    listed = procs.run(
        [sys.executable, "-m", "scrapy", "list"], cwd=tmp_path, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["fixture-cases"]
    assert spec.exists()
    out = tmp_path / "items.jsonl"
    r = procs.run(
        [
            sys.executable, "-m", "scrapy", "crawl", "fixture-cases",
            "-s", f"JOBDIR={tmp_path / 'ws'}", "-o", str(out), "-s", "LOG_LEVEL=WARNING",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    emitted = [json.loads(line) for line in out.read_text().splitlines()]
    # the feed gets every complete record once, whole (sub-tabs merged in)
    truth = site.truth
    expected = {rec["dedupe_key"]: rec for rec in truth.expected_records()}
    assert Counter(e["dedupe_key"] for e in emitted) == Counter(
        f"sipp-demo:{i}" for i in truth.complete_ids
    )
    for e in emitted:
        # beside the keys, the page it came from (as `framework export` writes it): the
        # detail page, whose sub-tabs completed it
        assert e.pop("url") == f"{truth.base}/cases/{e['source_id']}"
        assert e == expected[e["dedupe_key"]]
    # and the workspace was written at the JOBDIR given with -s, without Scrapy's own
    # JOBDIR state (a disk queue and a seen-set would fight the rows after a kill)
    assert workspace_items(tmp_path / "ws") == expected
    assert not (tmp_path / "ws" / "requests.seen").exists()
    assert not (tmp_path / "ws" / "requests.queue").exists()
    assert not (tmp_path / "ws" / "spider.state").exists()


@pytest.mark.process
def test_safe_defaults_are_on(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    # -v: Scrapy's "Overridden settings" line is start-up boilerplate, hidden by default
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(tmp_path / "ws"), "--max-requests", "3", "-v"
    )
    assert r.returncode == 3, r.stderr[-2000:]  # the cap is a checkpoint
    assert "'REMOTE_CONTROL_ENABLED': False" in r.stderr
    assert "'TELNETCONSOLE_ENABLED': False" in r.stderr
    assert "'ROBOTSTXT_OBEY': True" in r.stderr
    assert "framework/" in r.stderr  # the descriptive User-Agent
    assert not list((tmp_path / "ws").glob("*remote*"))


@pytest.mark.process
def test_a_changed_spec_is_announced_and_rows_keep_their_state(
    site, good_spec, tmp_path, crawl_cli
):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--max-requests", "30")
    assert r.returncode == 3, r.stderr[-2000:]
    first = url_log(ws)
    ok_before = {line["row"] for line in first if line["outcome"] == "ok"}
    spec.write_text(spec.read_text() + "\nmax_attempts: 2\n")
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]
    changed = [e for e in events(ws) if e["event"] == "spec_changed"]
    assert len(changed) == 1
    status = _status(crawl_cli, ws)
    assert len(status["spec"]["changes"]) == 1
    assert status["max_attempts"] == 2
    # the rows that were ok before the change were not fetched again
    again = [line for line in url_log(ws)[len(first) :] if line["row"] in ok_before]
    assert again == []


@pytest.mark.slow
@pytest.mark.process
def test_records_that_come_back_different_are_reported(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    before = item_hashes(ws)
    text = spec.read_text()
    old = 'title: {css: "h1.title::text", required: true}'
    assert old in text
    spec.write_text(text.replace(old, old[:-1] + ", lowercase: true}"))
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--fresh", "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]
    after = item_hashes(ws)
    assert sorted(after) == sorted(before)
    assert all(after[k][0] != before[k][0] for k in before)
    reported = [k for e in events(ws) if e["event"] == "items_changed" for k in e["keys"]]
    assert sorted(reported) == sorted(before)
    assert events(ws)[-1]["counts"]["items_changed"] == len(before)
    items = workspace_items(ws)
    assert all(v["title"] == v["title"].lower() for v in items.values())
