"""The download handler of jobs that render: scrapy-playwright's, with Debian's Chromium
and a pool of pages reused between requests.

Requests without ``meta["playwright"]`` (plain pages, robots.txt) go through Scrapy's
HTTP client as usual. Rendered requests get a page from the :class:`PagePool` and give
it back once the response is built (the page object never reaches a callback or an
errback, and never a request that could be stored: rows resume from the workspace);
a failed request closes its page. Settings, read here and nowhere else:

* ``FRAMEWORK_CHROMIUM`` (``-s`` only: a spec may not name a program to run): the browser,
  else ``$FRAMEWORK_CHROMIUM``, else the usual paths;
* ``PLAYWRIGHT_MAX_PAGES_PER_CONTEXT``: pages open at once (the pool; one browser context);
* ``FRAMEWORK_RENDER_PAGE_USES`` (``-s`` only): requests a page serves before it is
  replaced by a fresh one (0: no limit);
* ``FRAMEWORK_RENDER_REUSE`` (``-s`` only): reuse pages (default true); false opens and
  closes a page per request, as scrapy-playwright does by default (kept for measurements).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from scrapy import Spider
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

from framework_playwright.actions import navigation_failure
from framework_playwright.browser import find_chromium
from framework_playwright.pool import PagePool, close_page

if TYPE_CHECKING:
    from playwright.async_api import Page
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

__all__ = ["RenderingHandler"]


DEFAULT_PAGES = 4
# All pages of one site share a renderer process: about 60-90 MiB less per open page,
# measured with no loss of pages/s on 2 cores (docs/benchmarks.md, "Rendered pages").
DEFAULT_ARGS = ("--process-per-site",)
DEFAULT_USES = 20  # requests a page serves before a fresh one replaces it (memory)


class RenderingHandler(ScrapyPlaywrightDownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        launch: dict[str, Any] = dict(self.config.launch_options)
        if not (self.config.cdp_url or self.config.connect_url):
            # Fails before the first page with one sentence (validate said it first).
            launch.setdefault(
                "executable_path", str(find_chromium(settings.get("FRAMEWORK_CHROMIUM")))
            )
            launch.setdefault("headless", True)
            launch.setdefault("args", list(DEFAULT_ARGS))
        self.config.launch_options = launch
        # One context holds the pool's pages: its page limit is the pool's size.
        pages = max(self.config.max_pages_per_context, 1)
        self.reuse = settings.getbool("FRAMEWORK_RENDER_REUSE", True)
        self.pool = PagePool(pages, settings.getint("FRAMEWORK_RENDER_PAGE_USES", DEFAULT_USES))
        self._launch_lock = asyncio.Lock()
        self._started = False
        self._stats = crawler.stats

    async def _maybe_launch_in_thread(self) -> None:
        # scrapy-playwright starts Playwright (a node process, ~100 MiB) when the engine
        # starts, in every handler instance: one per scheme. Started on the first
        # rendered request instead, an https handler of an http site costs nothing.
        return None

    async def _launched(self) -> None:
        async with self._launch_lock:
            if not self._started:
                await self._launch()
                self._started = True

    async def _download_request(self, request: Request, spider: Spider | None = None) -> Response:
        await self._launched()
        try:
            return await self._render(request, spider)
        except PlaywrightError as exc:
            typed = navigation_failure(str(exc))
            if typed is None:
                raise
            raise typed from None  # a refused connection is `connect`, as for plain pages

    async def _render(self, request: Request, spider: Spider | None) -> Response:
        if not self.reuse:
            return await super()._download_request(request, spider)
        spider = spider or self._crawler.spider

        async def create() -> Page:
            return await self._create_page(request=request, spider=spider)

        page = await self.pool.acquire(create)
        request.meta["playwright_page"] = page
        request.meta["playwright_include_page"] = True  # ours to close or keep, not the handler's
        healthy = False
        try:
            response = await super()._download_request(request, spider)
            healthy = True
            return response
        finally:
            # After a closed target scrapy-playwright may have opened another page.
            used = request.meta.pop("playwright_page", page)
            request.meta.pop("playwright_include_page", None)
            if used is not page:
                await self.pool.release(page, healthy=False)
                await close_page(used)  # not the pool's: it holds no slot
            else:
                await self.pool.release(page, healthy=healthy)
            self._stats.set_value("framework/render/pages_created", self.pool.created)
            self._stats.set_value("framework/render/pages_reused", self.pool.reused)
            self._stats.set_value("framework/render/pages_discarded", self.pool.discarded)
            self._stats.set_value("framework/render/pages_retired", self.pool.retired)

    async def _close(self) -> None:
        await self.pool.close()
        await super()._close()
