"""A crawl's own feed (``framework crawl -o FILE``: Scrapy's FEEDS, and so any item
pipeline) carries the page each item came from as ``framework export`` writes it:
``url`` beside the keys, or ``page_url`` when the record has a field ``url``, masked
(framework.workspace.records.page_url_meta), outside the item's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from framework.demo.data import PER_PAGE
from framework.workspace.records import page_url_meta
from tests.fixtures.crawl import workspace_items
from tests.fixtures.site import write_good_spec

EXIT_OK = 0


def _feed(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_rule_is_export_s_a_field_url_wins_and_the_url_is_masked() -> None:
    page = "http://u:pw@site.test/cases/1?token=s3cr3t&page=2"
    shown = "http://[redacted]@site.test/cases/1?token=[redacted]&page=2"
    assert page_url_meta({"title": "t"}, page) == {"url": shown}
    assert page_url_meta({"url": "http://own"}, page) == {"page_url": shown}
    assert page_url_meta({"url": "a", "page_url": "b"}, page) == {}
    assert page_url_meta({"title": "t"}, None) == {"url": None}


@pytest.mark.process
def test_items_completed_by_sub_tabs_carry_their_detail_page(
    make_site, tmp_path, crawl_cli
) -> None:
    site = make_site(cases=10, edge_cases=False)
    spec = write_good_spec("cases", site.url, tmp_path)
    ws, out = tmp_path / "ws", tmp_path / "out.jsonl"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-o", str(out), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    feed = _feed(out)
    truth = site.truth
    expected = {rec["dedupe_key"]: rec for rec in truth.expected_records()}
    assert sorted(e["dedupe_key"] for e in feed) == sorted(expected)
    for item in feed:
        # after the keys, as export writes it; the detail page, not the sub-tab that
        # completed the item last
        assert list(item)[:4] == ["dedupe_key", "source_type", "source_id", "url"]
        assert item.pop("url") == f"{truth.base}/cases/{item['source_id']}"
        assert item == expected[item["dedupe_key"]]
    # metadata, never data: the stored items hold no url
    assert workspace_items(ws) == expected


@pytest.mark.process
def test_items_of_a_list_page_carry_it_masked_as_page_url_beside_a_field_url(
    make_site, tmp_path, crawl_cli, monkeypatch
) -> None:
    """A list whose records are the items (complete when written): each has the list
    page it was on. Its records have a field ``url``, so the page is ``page_url``; the
    start URL's token (a spec names it ``{env:...}``) is masked in the feed as in an
    export."""
    monkeypatch.setenv("FW_FEED_TEST_TOKEN", "s3cr3t")  # the crawl's child inherits it
    site = make_site(cases=2 * PER_PAGE + 3, edge_cases=False)
    spec = write_good_spec("api_offset", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    text = text.replace("?offset=0", "?offset=0&token={env:FW_FEED_TEST_TOKEN}")
    text = text.replace(
        '    title: {json: "$.title"', '    url: {json: "$.id"}\n    title: {json: "$.title"'
    )
    spec.write_text(text, encoding="utf-8")
    ws, out = tmp_path / "ws", tmp_path / "out.jsonl"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-o", str(out), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    raw = out.read_text(encoding="utf-8")
    assert "s3cr3t" not in raw
    feed = _feed(out)
    good = [c.id for c in site.data.good]
    assert sorted(e["source_id"] for e in feed) == sorted(good)
    base = site.truth.base
    for item in feed:
        assert item["url"] == item["source_id"]  # the record's own field, kept
        offset = PER_PAGE * (good.index(item["source_id"]) // PER_PAGE)
        # the next pages' offset moves to the end of the query: compared as a mapping
        page = urlsplit(item["page_url"])
        assert f"{page.scheme}://{page.netloc}{page.path}" == f"{base}/api/cases"
        assert parse_qs(page.query) == {"offset": [str(offset)], "token": ["[redacted]"]}
    stored = workspace_items(ws)
    assert all("page_url" not in i for i in stored.values())
