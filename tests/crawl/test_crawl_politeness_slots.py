"""CONCURRENT_REQUESTS_PER_DOMAIN holds: what the site sees in flight at once.

Scrapy 2.19 on the asyncio reactor starts a slot's whole queue at once
(framework/crawl/downloader.py says why); the framework's downloader keeps the limit.
The control runs the same crawl with Scrapy's own downloader and Twisted's HTTP client:
when it stops exceeding the limit, Scrapy has fixed the loop and
framework.crawl.downloader can go. (The framework's aiohttp client caps connections per
host as well, but a request queued there would spend its DOWNLOAD_TIMEOUT waiting, and
the slot's priority order would be lost: the downloader's limit is the one that counts.)
"""

from __future__ import annotations

import pytest

from tests.crawl.test_crawl_fightback import EXIT_OK, crawl, write_spec
from tests.fixtures.blocking_site import ITEMS, BlockingSite
from tests.fixtures.crawl import TWISTED_CLIENT


@pytest.mark.slow
@pytest.mark.process
def test_per_host_concurrency_from_the_spec_holds(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(delay=0.15)
    spec = write_spec(tmp_path, site.url, job="settings: {CONCURRENT_REQUESTS_PER_DOMAIN: 2}\n")
    result = crawl(spec, tmp_path / "ws")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert site.seen["item"].requests == ITEMS
    assert site.pages.max_in_flight == 2  # reached, never exceeded

    control: BlockingSite = blocking_site(delay=0.15)
    spec = write_spec(
        tmp_path,
        control.url,
        name="fb-scrapy",
        job="settings: {CONCURRENT_REQUESTS_PER_DOMAIN: 2}\n",
    )
    result = crawl(
        spec,
        tmp_path / "ws-scrapy",
        "-s",
        "DOWNLOADER=scrapy.core.downloader.Downloader",
        *TWISTED_CLIENT,
    )
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert control.pages.max_in_flight > 2


@pytest.mark.process
def test_the_default_eight_per_host_holds(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(delay=0.15)
    spec = write_spec(tmp_path, site.url)
    result = crawl(spec, tmp_path / "ws")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert 2 < site.pages.max_in_flight <= 8
