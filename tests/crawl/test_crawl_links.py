"""Links are links: a follow or next selector that selects an element takes its address
as Scrapy's ``response.follow`` does (the ``href`` of an ``<a>``), and what is no link
(a ``<div>``, the words of a link) is never requested: ``validate`` warns, ``preview``
shows it, the crawl counts it (``links_refused``) with the reason.
(framework/crawl/page.py ``link_values``, framework/spec/checks/links.py)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import _page, _rows, _write_spec
from tests.fixtures.crawl import events
from tests.fixtures.hostile import HostileServer

SPEC = """\
name: hostile
source_type: hostile
start_urls: ["{base}/jobs/"]
pages:
  list:
    follow:
      - {{css: "a.job", to: detail}}
      - {{css: "div.card", to: detail}}
    pagination: {{next: "li.next a", max_pages: 2}}
  detail:
    id: {{url: '([^/]+)$'}}
    fields:
      title: {{css: "h1::text"}}
"""

PAGER = '<ul><li class="next"><a class="page-link" href="{href}">Next page</a></li></ul>'


def _site(site: HostileServer) -> None:
    """Two list pages whose links are `<a>` elements, each with a card that is a `<div>`."""
    site.route(
        "/jobs/",
        _page(
            '<a class="job" href="/jobs/1">one</a><div class="card">card</div>'
            + PAGER.format(href="/jobs/page-2")
        ),
    )
    site.route(
        "/jobs/page-2",
        _page('<a class="job" href="/jobs/2">two</a><div class="card">card</div>'),
    )
    for n in (1, 2):
        site.route(f"/jobs/{n}", _page(f"<h1>job {n}</h1>"))


@pytest.mark.process
@pytest.mark.timeout(240)
def test_selected_link_elements_are_followed_by_their_href_and_a_div_is_refused_and_counted(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    _site(site)
    spec = _write_spec(tmp_path, SPEC.format(base=site.url))
    ws = tmp_path / "ws"

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(ws)
    assert {u: row["status"] for u, row in rows.items()} == {
        f"{site.url}/jobs/": "ok",
        f"{site.url}/jobs/page-2": "ok",  # `li.next a`: the <a>'s href
        f"{site.url}/jobs/1": "ok",
        f"{site.url}/jobs/2": "ok",
    }
    # no URL made of markup was ever requested: the four pages and robots.txt
    assert site.total_hits() - site.hits("/robots.txt") == 4
    log = events(ws)
    counts = [e["counts"] for e in log if e["event"] == "links_refused"]
    assert counts == [{"not_a_link": 2}]  # one card per list page
    told = [e for e in log if e["event"] == "link_refused"]
    assert [(e["why"], e["target"]) for e in told] == [("not_a_link", "<div>")]
    assert "div> elements, which are not links" in r.stderr


@pytest.mark.process
@pytest.mark.timeout(240)
def test_preview_shows_the_next_page_by_href_and_what_was_refused(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    _site(site)
    _write_spec(tmp_path, SPEC.format(base=site.url))

    r = crawl_cli("preview", "hostile", f"{site.url}/jobs/", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"next page:\n  -> {site.url}/jobs/page-2  (list)" in r.stdout
    assert f"  -> {site.url}/jobs/1  (detail)" in r.stdout
    assert "! refused links (not_a_link): 1: the selector selected <div> elements" in r.stdout
    assert "<a class" not in r.stdout  # no URL made of markup


@pytest.mark.process
@pytest.mark.timeout(240)
def test_the_words_of_a_link_are_not_a_url_and_validate_warns_of_both(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    _site(site)
    text = SPEC.format(base=site.url).replace('"li.next a"', '"li.next a::text"')
    spec = _write_spec(tmp_path, text)

    r = crawl_cli("validate", str(spec), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr  # a warning: the spec runs
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 2, r.stderr
    assert "'div.card' selects <div> elements" in warned[0]
    assert "'li.next a::text' selects text" in warned[1]

    r = crawl_cli("preview", "hostile", f"{site.url}/jobs/", "--json", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["next"] == []
    assert report["refused"] == {"not_a_link": 1, "not_a_url": 1}
    assert report["refused_first"]["not_a_url"] == "Next page"


@pytest.mark.process
@pytest.mark.timeout(120)
def test_validate_says_nothing_of_selectors_that_give_links(tmp_path: Path, crawl_cli: Any) -> None:
    text = SPEC.format(base="http://127.0.0.1:9").replace('"div.card"', '"div.card a"')
    spec = _write_spec(tmp_path, text)
    r = crawl_cli("validate", str(spec), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "warning:" not in r.stderr
