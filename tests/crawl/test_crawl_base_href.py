"""``<base href>`` leads a page's follow links and next page, as browsers, Scrapy's link
extractors and the page's forms read it; what the guard refuses stays refused (a base
on another host does not carry links off-site), and a base of another scheme is
ignored, as browsers ignore it (framework/crawl/page.py ``link_base``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import _page, _rows, _write_spec
from tests.fixtures.hostile import HostileServer

SPEC = """\
name: hostile
source_type: hostile
start_urls: ["{base}/list/"]
pages:
  list:
    follow: {{css: "a.item::attr(href)", to: detail}}
    pagination: {{next: "a.next::attr(href)", max_pages: 2}}
  detail:
    id: {{url: '([^/]+)$'}}
    fields:
      text: {{css: "p::text"}}
"""


@pytest.mark.process
@pytest.mark.timeout(240)
def test_follow_and_next_honour_base_href_and_refuse_what_it_leads_off_site(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    elsewhere = hostile_server()  # the same machine under another name: off-site
    site.route(
        "/list/",
        _page(
            '<a class="item" href="item-1">one</a><a class="next" href="page-2/">next</a>',
            head='<base href="/deep/">',
        ),
    )
    site.route(
        "/deep/page-2/",
        _page(
            '<a class="item" href="item-2">two</a>',
            head=f'<base href="http://localhost:{elsewhere.port}/">',
        ),
    )
    for path in ("/deep/item-1", "/list/item-1"):
        site.route(path, _page(f"<p>{path}</p>"))
    elsewhere.route("/item-2", _page("<p>off-site</p>"))
    spec = _write_spec(tmp_path, SPEC.format(base=site.url))
    ws = tmp_path / "ws"

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(ws)
    assert rows[f"{site.url}/deep/item-1"]["status"] == "ok"
    assert rows[f"{site.url}/deep/page-2/"]["status"] == "ok"
    assert f"{site.url}/list/item-1" not in rows  # the page's own URL is not the base
    assert elsewhere.total_hits() == 0  # an off-site base leads nowhere
    assert not [u for u in rows if "localhost" in u]


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_base_href_of_another_scheme_is_ignored(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    site.route(
        "/list/",
        _page('<a class="item" href="item-1">one</a>', head='<base href="javascript:alert(1)//">'),
    )
    site.route("/list/item-1", _page("<p>one</p>"))
    spec = _write_spec(tmp_path, SPEC.format(base=site.url))
    ws = tmp_path / "ws"

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _rows(ws)[f"{site.url}/list/item-1"]["status"] == "ok"
