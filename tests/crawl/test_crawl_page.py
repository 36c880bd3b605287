"""framework.crawl.page on hand-made responses: pagination, follow rules, sub-tab requests.

The whole-site behaviour is covered by real crawls in test_crawl.py; these pin the
corners the fixture site does not have (a JSON next link, max_pages, JSON bodies).
"""

from __future__ import annotations

import json
from typing import Any

from scrapy.http import HtmlResponse, Request, TextResponse

from framework.crawl.page import CompiledJob
from framework.spec.models import JobSpec


def _job(**pages: Any) -> CompiledJob:
    return CompiledJob(
        JobSpec.model_validate(
            {
                "name": "t",
                "source_type": "t",
                "start_urls": ["http://127.0.0.1:1/"],
                "pages": pages,
            }
        )
    )


def _json_response(url: str, doc: Any) -> TextResponse:
    return TextResponse(
        url, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json"}
    )


def _html(url: str, body: str) -> HtmlResponse:
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=Request(url))


def test_json_page_follows_its_next_url_by_json_path() -> None:
    job = _job(
        api={
            "format": "json",
            "each": "$.items[*]",
            "id": {"json": "$.id"},
            "fields": {"title": {"json": "$.t"}},
            "pagination": {"next": "$.links.next"},
        }
    )
    doc = {"items": [{"id": "A1", "t": " x "}], "links": {"next": "/api?cursor=abc"}}
    result = job.kinds["api"].parse(_json_response("http://127.0.0.1:1/api", doc), {}, 1)
    assert [r.dedupe_key for r in result.records] == ["t:A1"]
    assert result.records[0].values == {"title": "x"}
    assert [n.url for n in result.next_pages] == ["http://127.0.0.1:1/api?cursor=abc"]
    doc["links"] = {"next": None}
    last = job.kinds["api"].parse(_json_response("http://127.0.0.1:1/api", doc), {}, 2)
    assert last.next_pages == []


def test_page_number_pagination_stops_at_max_pages_and_on_the_json_flag() -> None:
    job = _job(
        api={
            "format": "json",
            "each": "$.items[*]",
            "id": {"json": "$.id"},
            "pagination": {
                "param": "page",
                "max_pages": 3,
                "stop": {"json": "$.more", "equals": False},
            },
        }
    )
    kind = job.kinds["api"]
    more = {"items": [{"id": "A"}], "more": True}
    page1 = kind.parse(_json_response("http://127.0.0.1:1/api?q=x", more), {}, 1)
    assert [n.url for n in page1.next_pages] == ["http://127.0.0.1:1/api?q=x&page=2"]
    page2 = kind.parse(_json_response("http://127.0.0.1:1/api?q=x&page=2", more), {}, 2)
    assert [n.url for n in page2.next_pages] == ["http://127.0.0.1:1/api?q=x&page=3"]
    page3 = kind.parse(_json_response("http://127.0.0.1:1/api?q=x&page=3", more), {}, 3)
    assert page3.next_pages == []  # max_pages
    done = {"items": [{"id": "B"}], "more": False}
    assert kind.parse(_json_response("http://127.0.0.1:1/api?page=2", done), {}, 2).next_pages == []


def test_follow_by_url_pattern_and_carry_record_fields() -> None:
    job = _job(
        listing={
            "each": "li",
            "fields": {"court": "span::text"},
            "follow": [{"pattern": r"/cases/\d+$", "to": "detail"}],
        },
        detail={"id": "#id::text"},
    )
    page = _html(
        "http://127.0.0.1:1/list",
        "<ul><li><span>North</span><a href='/cases/1'>1</a><a href='/about'>x</a></li>"
        "<li><span>South</span><a href='cases/2'>2</a><a href='#top'>top</a></li></ul>",
    )
    result = job.kinds["listing"].parse(page, {}, 1)
    assert [(link.kind, link.url, link.carry) for link in result.links] == [
        ("detail", "http://127.0.0.1:1/cases/1", {"court": "North"}),
        ("detail", "http://127.0.0.1:1/cases/2", {"court": "South"}),
    ]


def test_subtab_requests_render_templates_and_json_bodies() -> None:
    job = _job(
        detail={
            "id": "#id::text",
            "fields": {"court": ".court::text"},
            "subtabs": {
                "parties": {
                    "url": "/cases/{id|lower}/tab?court={court}",
                    "method": "POST",
                    "body": {"json": {"case": "{id}", "court": "{court|slug}", "n": 1}},
                    "format": "json",
                    "each": "$.rows[*]",
                },
            },
        }
    )
    page = _html("http://127.0.0.1:1/c/9", "<p id=id>AB 9</p><p class=court>North Hall</p>")
    (record,) = job.kinds["detail"].parse(page, {"status": "open"}, 1).records
    assert record.values == {"status": "open", "court": "North Hall"}
    (tab,) = record.subtabs
    assert tab.kind == "detail.parties"
    assert tab.url == "http://127.0.0.1:1/cases/ab%209/tab?court=North%20Hall"
    assert tab.method == "POST"
    assert tab.body_type == "json"
    assert json.loads(tab.body or "") == {"case": "AB 9", "court": "north-hall", "n": 1}
    assert tab.required is True


def test_a_record_without_its_id_is_invalid_and_names_it() -> None:
    job = _job(detail={"id": "#id::text", "fields": {"t": {"css": "h1::text", "required": True}}})
    (record,) = job.kinds["detail"].parse(_html("http://127.0.0.1:1/x", "<p>no</p>"), {}, 1).records
    assert not record.valid
    assert record.missing == ["id", "t"]
    assert record.dedupe_key is None


def test_a_nested_group_on_a_json_page_reads_each_as_a_json_path() -> None:
    # "rows[*]" is no CSS selector: on a JSON page it must compile as a JSON path
    job = _job(
        api={
            "format": "json",
            "id": {"json": "$.id"},
            "fields": {"parts": {"each": "rows[*]", "fields": {"n": {"json": "$.n"}}}},
        }
    )
    doc = {"id": "A1", "rows": [{"n": "x"}, {"n": "y"}]}
    (record,) = job.kinds["api"].parse(_json_response("http://127.0.0.1:1/a", doc), {}, 1).records
    assert record.values == {"parts": [{"n": "x"}, {"n": "y"}]}


def test_links_to_other_schemes_and_hosts_are_not_discovered_but_counted() -> None:
    job = _job(
        list={
            "follow": [{"css": "a::attr(href)", "to": "detail"}],
            "pagination": {"next": "a.next::attr(href)"},
        },
        detail={"id": {"css": "h1::text"}},
    )
    told: list[tuple[str, str]] = []
    job.guard.on_refused = lambda url, why: told.append((why, url))
    page = _html(
        "http://127.0.0.1:1/list",
        '<a href="/d/1">one</a><a href="file:///etc/passwd">f</a>'
        '<a href="data:text/html,x">d</a><a href="http://elsewhere.test/d/2">o</a>'
        '<a href="mailto:a@b.c">m</a><a class="next" href="ftp://127.0.0.1:1/next">n</a>',
    )
    result = job.kinds["list"].parse(page, {}, 1)
    assert [link.url for link in result.links] == ["http://127.0.0.1:1/d/1"]
    assert result.next_pages == []
    # the ftp next link is refused twice: as a follow link and as the next page
    assert dict(job.guard.refused) == {"scheme": 4, "offsite": 1}
    assert ("offsite", "http://elsewhere.test/d/2") in told
