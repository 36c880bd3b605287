"""The next page of a list goes before the details it was found with.

List pages are a chain: page k+1 is known only from page k. Sent behind the details
each page found, the chain sets the pace of a crawl whose per-host limit is below its
global one (and of every worker of a crawl in several processes). The spider gives a
paginated kind's rows the first place (PRIORITY_CHAIN) and the framework's downloader
serves a host's queue by that priority (framework/crawl/downloader.py).
"""

from __future__ import annotations

import statistics
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from framework.crawl.downloader import first_by_priority
from tests.fixtures.crawl import url_log

QUIET = ("-L", "WARNING")


def test_a_hosts_queue_is_served_by_priority_then_by_arrival() -> None:
    queue: deque[tuple[Request, Any]] = deque(
        (Request(f"http://site/{name}", priority=p), name)
        for name, p in [("a", 10), ("b", 10), ("c", 30), ("d", 0), ("e", 30)]
    )
    order = [first_by_priority(queue)[1] for _ in range(5)]
    assert order == ["c", "e", "a", "b", "d"]
    assert not queue


def _details_before_each_next_page(lines: list[dict[str, Any]]) -> list[int]:
    """For each list page after the first: how many detail pages were done between it
    and the list page before it (in the URL log's order: the order of commits)."""
    counts: list[int] = []
    since: int | None = None
    for line in lines:
        if line["kind"] == "list":
            if since is not None:
                counts.append(since)
            since = 0
        elif line["kind"] == "detail" and since is not None:
            since += 1
    return counts


@pytest.mark.process
def test_the_next_list_page_is_fetched_before_the_details_it_was_found_with(
    make_site: Any, good_spec: Any, crawl_cli: Any, tmp_path: Path
) -> None:
    # two in flight for the host, sixteen for the crawl: the engine hands the host's
    # requests to the downloader, whose queue for the host then holds most of them
    site = make_site(cases=80, delay=0.02, edge_cases=False)
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl",
        str(spec),
        "--workspace",
        str(ws),
        "-s",
        "CONCURRENT_REQUESTS_PER_DOMAIN=2",
        "-s",
        "CONCURRENT_REQUESTS=16",
        *QUIET,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    between = _details_before_each_next_page(url_log(ws))
    assert len(between) == 7  # 80 cases, 10 a page: 8 list pages
    # Each list page found 10 details; sent behind them, the next list page came after
    # all 10 (measured before the change: 10 every time). Sent first, it goes out as
    # soon as one of the two transfers ends, behind at most the ones in flight and the
    # ones whose response was being handled.
    assert statistics.median(between) <= 5, between
