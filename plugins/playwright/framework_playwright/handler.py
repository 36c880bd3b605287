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

Every request the browser makes is held to the crawl's rule (http(s), the spider's
``allowed_domains``) by :class:`~framework_playwright.guard.BrowserGuard`, installed
here: the route hook, the context's WebSocket route and service-worker block, the
resolver rule in Chromium's launch arguments, and the checks of a navigation's redirect
hops and final URL. A job's own ``PLAYWRIGHT_ABORT_REQUEST`` still runs, after it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from scrapy import Spider
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

from framework.crawl.addresses import policy_of
from framework.crawl.safety import refused_error, shown, spider_domains
from framework.settings import default
from framework_playwright.actions import navigation_failure
from framework_playwright.browser import find_chromium
from framework_playwright.guard import BrowserGuard, Event, chain, resolver_rule
from framework_playwright.pool import PagePool, close_page

if TYPE_CHECKING:
    from playwright.async_api import Page
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy_playwright.handler import BrowserContextWrapper

__all__ = ["RenderingHandler"]


DEFAULT_PAGES: int = default("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT")
# All pages of one site share a renderer process: about 60-90 MiB less per open page,
# measured with no loss of pages/s on 2 cores (docs/benchmarks.md, "Rendered pages").
DEFAULT_ARGS = ("--process-per-site",)
# requests a page serves before a fresh one replaces it (memory)
DEFAULT_USES: int = default("FRAMEWORK_RENDER_PAGE_USES")
RESOLVER_FLAG = "--host-resolver-rules"


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
        self.reuse = settings.getbool("FRAMEWORK_RENDER_REUSE", default("FRAMEWORK_RENDER_REUSE"))
        self.pool = PagePool(pages, settings.getint("FRAMEWORK_RENDER_PAGE_USES", DEFAULT_USES))
        self._launch_lock = asyncio.Lock()
        self._started = False
        self._stats = crawler.stats
        self.guard = BrowserGuard(event=self._run_event, count=self._stats.inc_value)
        # ours first: a refused request never reaches the job's own hook
        jobs_own = getattr(self, "abort_request", None)  # PLAYWRIGHT_ABORT_REQUEST
        self.abort_request = chain(self.guard.abort_request, jobs_own)

    def _run_event(self) -> Event | None:
        # the crawl's event log (framework.crawl.runtime), when this crawl has one
        runtime = getattr(self._crawler.spider, "runtime", None)
        event: Event | None = getattr(runtime, "event", None)
        return event

    async def _maybe_launch_in_thread(self) -> None:
        # scrapy-playwright starts Playwright (a node process, ~100 MiB) when the engine
        # starts, in every handler instance: one per scheme. Started on the first
        # rendered request instead, an https handler of an http site costs nothing.
        return None

    async def _launched(self) -> None:
        async with self._launch_lock:
            if not self._started:
                # the first rendered request comes after spider_opened: its hosts are known
                self.guard.domains = spider_domains(self._crawler.spider)
                self.guard.policy = policy_of(self._crawler)
                self._add_resolver_rule()
                await self._launch()
                self._started = True

    def _add_resolver_rule(self) -> None:
        """Hosts outside allowed_domains do not resolve in the launched Chromium: the
        only guard of redirect hops, which no route sees. Not with a proxy (the proxy
        resolves the hosts; the rule would only hide the proxy's own name), not for a
        browser this crawl does not launch, not over a rule the launch options give."""
        launch = self.config.launch_options
        rule = resolver_rule(self.guard.domains or frozenset())
        if rule is None or self.config.cdp_url or self.config.connect_url or "proxy" in launch:
            return
        args = list(launch.get("args") or ())
        if any(str(a).startswith(RESOLVER_FLAG) for a in args):
            return
        launch["args"] = [*args, f"{RESOLVER_FLAG}={rule}"]

    async def _create_browser_context(
        self, name: str, context_kwargs: dict[str, Any] | None, spider: Spider | None = None
    ) -> BrowserContextWrapper:
        kwargs = dict(context_kwargs or {})
        kwargs.setdefault("service_workers", "block")  # their requests pass no page route
        wrapper = await super()._create_browser_context(name, kwargs, spider)
        await wrapper.context.route_web_socket("**", self.guard.websocket)
        return wrapper

    async def _create_page(self, request: Request, spider: Spider) -> Page:
        page = await super()._create_page(request=request, spider=spider)
        self.guard.watch(page)
        return page

    async def _download_request_with_page(
        self, request: Request, page: Page, spider: Spider
    ) -> Response:
        self.guard.forget(page)
        try:
            response = await super()._download_request_with_page(request, page, spider)
        except PlaywrightError:
            self._refuse_navigation(page)  # a refused hop fails the navigation: say why
            raise
        self._refuse_navigation(page)
        why = self.guard.why(response.url)
        if why is not None:  # e.g. a redirect to an address no resolver rule can stop
            raise refused_error(
                why,
                response.url,
                self.guard.domains or frozenset(),
                f"browser navigation from {shown(request.url)}",
                self.guard.detail(why, response.url),
            )
        return response

    def _refuse_navigation(self, page: Page) -> None:
        """The row's typed error when the page's main frame was sent where it may not go
        (``scheme``/``offsite``, naming the target, as for a plain page's redirect)."""
        refused = self.guard.take_navigation(page)
        if refused is None:
            return
        why, how, target = refused
        raise refused_error(
            why, target, self.guard.domains or frozenset(), how, self.guard.detail(why, target)
        )

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
