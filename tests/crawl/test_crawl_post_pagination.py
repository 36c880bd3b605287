"""A POSTed search whose results are paginated by a query parameter (``param: page``).

The site's search form posts a category; the results read the category from the
posted body and the page from the query, five hits a page. Page 2 of a search is the
same POST with ``?page=2``: a next page built from the URL alone (a GET with no body)
lost the category, merged every search into one row and fetched a third of the
records, exit 0. The real CLI against a real local site.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from framework.workspace import Workspace
from tests.fixtures.crawl import events, run_cli, workspace_items
from tests.fixtures.server import Hits, QuietHandler, ServedSite, stop_at_end

CATEGORIES = ("red", "green", "blue")
PER_CATEGORY = 12  # 5 a page: pages of 5, 5, 2, then an empty page ends it
PER_PAGE = 5


def category(i: int) -> str:
    return CATEGORIES[i % len(CATEGORIES)]


class SearchSite(ServedSite):
    """``/search``: the form (POST to ``action``); ``/results``: the hits of the posted
    category, ``?page=N``; ``/go``: answers a POST with a 303 to ``/results?cat=...``
    (the redirect case); ``/item/N``: a record."""

    def __init__(self, action: str = "/results") -> None:
        self.action = action
        self.hits: Hits[tuple[str, str, str]] = Hits()  # method, path, category

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self._answer({})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                self._answer(parse_qs(self.rfile.read(size).decode()))

            def _answer(self, form: dict[str, list[str]]) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                cat = (form.get("cat") or query.get("cat") or [""])[0]
                site.hits.add((self.command, parts.path, cat))
                if parts.path == "/search":
                    options = "".join(f'<option value="{c}">{c}</option>' for c in CATEGORIES)
                    self.send_html(
                        f'<form id="s" method="post" action="{site.action}">'
                        f'<select name="cat">{options}</select><input type="submit"></form>'
                    )
                elif parts.path == "/go" and self.command == "POST":
                    self.send_response(303)
                    self.send_header("Location", f"/results?cat={cat}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif parts.path == "/results":
                    page = int(query.get("page", ["1"])[0])
                    found = [i for i in range(len(CATEGORIES) * PER_CATEGORY) if category(i) == cat]
                    shown = found[(page - 1) * PER_PAGE : page * PER_PAGE]
                    self.send_html(
                        "".join(
                            f'<div class="hit"><a href="/item/{i}">{i}</a></div>' for i in shown
                        )
                    )
                elif parts.path.startswith("/item/"):
                    i = int(parts.path.rsplit("/", 1)[1])
                    self.send_html(f'<b class="id">{i}</b><i class="cat">{category(i)}</i>')
                else:
                    self.send_error(404)

        return Handler


@pytest.fixture
def make_search_site() -> Iterator[Any]:
    yield from stop_at_end(lambda action="/results": SearchSite(action).start())


SPEC = """\
name: postpage
source_type: probe
start_urls: ["{url}/search"]
start: search
pages:
  search:
    forms: {{css: "form#s", to: results, fields: {{cat: {{options: true, carry: cat}}}}}}
  results:
    each: "div.hit"
    follow: {{css: "a::attr(href)", to: item}}
    pagination: {{param: page}}
  item:
    id: {{css: ".id::text", required: true}}
    fields:
      shown: ".cat::text"
"""


def crawl(tmp_path: Path, site: SearchSite) -> tuple[Path, Any]:
    spec = tmp_path / "postpage.yaml"
    spec.write_text(SPEC.format(url=site.url), encoding="utf-8")
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == 0, r.stderr[-3000:]
    return ws, r


def results_rows(ws: Path) -> list[Any]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return [r for r in w.store.iter_rows() if r.kind == "results"]


@pytest.mark.process
def test_a_posted_search_pages_on_with_its_own_body(make_search_site, tmp_path):
    site = make_search_site()
    ws, _ = crawl(tmp_path, site)

    items = workspace_items(ws)
    assert len(items) == len(CATEGORIES) * PER_CATEGORY  # every record, not a third
    # each item carries the category its search posted, and it is the item's own
    assert all(i["cat"] == i["shown"] for i in items.values())
    pages = -(-PER_CATEGORY // PER_PAGE) + 1  # the last one empty: the end
    for cat in CATEGORIES:
        assert site.hits.count(("POST", "/results", cat)) == pages
    assert site.hits.count(("GET", "/results", "")) == 0  # no search lost its body
    # each page of each search is a row of its own: POST, the search's body, ?page=N
    rows = results_rows(ws)
    assert len(rows) == len(CATEGORIES) * pages
    for row in rows:
        assert row.method == "POST"
        assert row.body_type == "form"
        assert parse_qs(row.body)["cat"][0] == row.context["carry"]["cat"]
        page = int(row.context.get("page", 1))
        assert (urlsplit(row.url).query == "") == (page == 1)
        if page > 1:
            assert parse_qs(urlsplit(row.url).query) == {"page": [str(page)]}


@pytest.mark.process
def test_a_search_answered_by_a_redirect_pages_on_by_get(make_search_site, tmp_path):
    """A POST answered by a 303 is a GET of the new URL: its next pages are GETs of that
    URL (the site never asked for the body again), as the crawl fetched page 1."""
    site = make_search_site("/go")
    ws, _ = crawl(tmp_path, site)

    assert len(workspace_items(ws)) == len(CATEGORIES) * PER_CATEGORY
    pages = -(-PER_CATEGORY // PER_PAGE) + 1
    for cat in CATEGORIES:
        assert site.hits.count(("POST", "/go", cat)) == 1
        assert site.hits.count(("GET", "/results", cat)) == pages  # page 1 by the redirect
    next_pages = [r for r in results_rows(ws) if int(r.context.get("page", 1)) > 1]
    assert len(next_pages) == len(CATEGORIES) * (pages - 1)
    assert all(r.method == "GET" and r.body is None for r in next_pages)
    assert all(parse_qs(urlsplit(r.url).query)["cat"] for r in next_pages)


@pytest.mark.process
def test_a_reparse_finds_the_same_next_pages_the_crawl_did(make_search_site, tmp_path):
    """The reparse decides from the stored page as the crawl did from the fetched one:
    read again with the same spec it finds every row it has, and no new one."""
    site = make_search_site()
    ws, _ = crawl(tmp_path, site)
    before = {(r.method, r.url, r.body) for r in results_rows(ws)}
    served = site.hits.total()

    r = run_cli("reparse", str(tmp_path / "postpage.yaml"), "--workspace", str(ws), "--all")
    assert r.returncode == 0, r.stderr[-3000:]
    assert site.hits.total() == served  # nothing fetched
    assert {(r.method, r.url, r.body) for r in results_rows(ws)} == before
    done = [e for e in events(ws) if e.get("event") == "reparse_finished"][-1]
    assert done["counts"]["rows_new"] == 0
    assert "unlinked" not in done  # every row is still linked by the page that found it
