"""Where a rendered page may go: the crawl's own rule, on every request the browser makes.

A rendered page runs the site's scripts, and a script can make the browser ask for
anything: an image or a ``fetch()`` from another host, a WebSocket, ``location =
"file:///etc/passwd"``, a redirect to another host. The rule of plain requests
(:mod:`framework.crawl.safety`: http(s) only, the job's ``allowed_domains`` and their
subdomains, ports aside, everything when the list is empty) holds for all of them:

* **Routed requests** (documents, frames, scripts, styles, images, fonts, fetch/XHR):
  scrapy-playwright's route handler asks :meth:`BrowserGuard.abort_request` first; a
  refused request is aborted before it leaves the browser.
* **WebSockets** are not routed with the rest: :meth:`BrowserGuard.websocket` connects
  only those whose host is allowed (``ws``/``wss`` are checked as ``http``/``https``).
* **Redirect hops** are never routed (Chromium follows them in its network stack), so
  Chromium is launched with a host-resolver rule (:func:`resolver_rule`) under which a
  host outside ``allowed_domains`` does not resolve: the hop fails before any
  connection (Chromium applies the rule to IP addresses as well).
* **Service workers** make requests no page route sees: the browser context blocks them.

A refused navigation of the page itself (a redirect hop of the page's URL, or a script's
``location = "http://elsewhere/"``) leaves Chromium's error page where the page was: the
row becomes a ``scheme``/``offsite`` error naming the target, as a meta refresh there
does for a plain page (:meth:`BrowserGuard.take_navigation`, asked by the handler). A
rendered response whose final URL is refused is never read either.

Chromium refuses a page's own navigation to ``file:`` by itself (``Not allowed to load
local resource``); that console message is counted as a ``scheme`` refusal, so it is not
silent either. ``data:``, ``blob:`` and ``about:`` URLs are not requests (nothing leaves
the browser, nothing is read from the machine) and are let be.

Every refusal is counted (stat ``framework/render/refused/<why>``, ``why`` being
``scheme`` or ``offsite`` as for rows) and said once per scheme or host: a log line and a
``browser_request_refused`` event (``why``, ``target``, ``url``, ``page``, ``resource``),
in the vocabulary of refused links (``link_refused``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from framework.crawl.addresses import AddressPolicy, why_refused
from framework.crawl.safety import shown, url_refusal

if TYPE_CHECKING:
    from playwright.async_api import ConsoleMessage, Page, WebSocketRoute
    from playwright.async_api import Request as PlaywrightRequest

__all__ = ["EVENT", "LOCAL_SCHEMES", "STAT", "BrowserGuard", "chain", "resolver_rule"]

logger = logging.getLogger(__name__)

EVENT = "browser_request_refused"
STAT = "framework/render/refused/{why}"
# URLs a page may load without a request: nothing leaves the browser or reads the disk
LOCAL_SCHEMES = frozenset({"data", "blob", "about"})
_WS = {"ws": "http", "wss": "https"}
_LOCAL_FILE = "Not allowed to load local resource: "  # Chromium's console text
_NAVIGATIONS_KEPT = 256  # pages whose refused navigation waits for its handler

Event = Callable[..., None]


def resolver_rule(domains: frozenset[str]) -> str | None:
    """Chromium's ``--host-resolver-rules`` value that leaves only ``domains`` (and
    their subdomains) resolvable; None when every host is allowed, or when a domain
    cannot be written in the rule (an IPv6 address, a comma): then the routes alone
    guard, and redirect hops are not stopped."""
    if not domains or any(c in d for d in domains for c in ":, "):
        return None
    keep = [rule for d in sorted(domains) for rule in (f"EXCLUDE {d}", f"EXCLUDE *.{d}")]
    return ", ".join(["MAP * ~NOTFOUND", *keep])


class BrowserGuard:
    """The crawl's URL rule inside the browser; counts and reports what it refuses.

    ``domains``: None until the spider is open (then its ``allowed_domains``).
    ``event``: appends a run event (``name, **data``), or None where there is no run.
    ``count``: increments a stat by name."""

    def __init__(
        self,
        domains: frozenset[str] | None = None,
        *,
        event: Callable[[], Event | None] = lambda: None,
        count: Callable[[str], None] = lambda name: None,
    ) -> None:
        self.domains = domains
        # the job's address rule (None until the spider is open): an IP literal the job
        # may not reach is refused in the browser as before a plain request
        self.policy: AddressPolicy | None = None
        self._event = event
        self._count = count
        self._told: set[tuple[str, str]] = set()
        # id(page) -> (why, how, target): a main-frame navigation refused in a request
        self._navigations: dict[int, tuple[str, str, str]] = {}

    # ------------------------------------------------------------------- the rule
    def why(self, url: str) -> str | None:
        """``"scheme"``/``"offsite"`` when the browser may not request ``url``, else None."""
        scheme, sep, rest = url.partition(":")
        scheme = scheme.lower()
        if sep and scheme in LOCAL_SCHEMES:
            return None
        if sep and scheme in _WS:
            url = f"{_WS[scheme]}:{rest}"
        return url_refusal(url, self.domains or frozenset(), self.policy)

    def detail(self, why: str, url: str) -> str:
        """What a ``private_target`` refusal names: the address and its class."""
        if why != "private_target" or self.policy is None:
            return ""
        host = urlsplit(url).hostname or ""
        found = self.policy.host_refused(host)
        return why_refused(host, *found) if found is not None else ""

    # ----------------------------------------------------------- the four places
    async def abort_request(self, request: PlaywrightRequest) -> bool:
        """scrapy-playwright's ``abort_request`` hook: True aborts the request."""
        why = self.why(request.url)
        if why is None:
            return False
        self.refused(why, request.url, _page_url(request), request.resource_type)
        if request.is_navigation_request():
            page = _main_frame_page(request)
            if page is not None:  # the page is leaving: what is left is an error page
                self._navigation(
                    page, (why, f"browser navigation from {shown(page.url)}", request.url)
                )
        return True

    async def websocket(self, ws: WebSocketRoute) -> None:
        """A page's WebSocket: connected to its server only when its host is allowed."""
        why = self.why(ws.url)
        if why is None:
            ws.connect_to_server()
            return
        self.refused(why, ws.url, "", "websocket")
        await ws.close(code=1008, reason="refused by the crawl")  # 1008: policy violation

    def watch(self, page: Page) -> None:
        """Listen to what the routes cannot see: redirect hops and local file loads."""

        def on_request(request: PlaywrightRequest) -> None:
            if request.redirected_from is None:
                return
            why = self.why(request.url)
            if why is None:
                return
            # stopped at the resolver rule before any connection (unless it is not
            # installed: a proxy, a browser not launched here; see the handler)
            self.refused(why, request.url, _page_url(request), request.resource_type)
            if request.is_navigation_request() and _main_frame_page(request) is page:
                via = f"browser redirect from {shown(request.redirected_from.url)}"
                self._navigation(page, (why, via, request.url))

        def on_console(message: ConsoleMessage) -> None:
            text = message.text
            if message.type == "error" and text.startswith(_LOCAL_FILE):
                url = text[len(_LOCAL_FILE) :].strip()
                self.refused("scheme", url, _safe_page_url(page), "navigation")

        page.on("request", on_request)
        page.on("console", on_console)

    def _navigation(self, page: Page, refused: tuple[str, str, str]) -> None:
        if len(self._navigations) < _NAVIGATIONS_KEPT:
            self._navigations[id(page)] = refused

    def take_navigation(self, page: Page) -> tuple[str, str, str] | None:
        """The refused main-frame navigation of ``page`` since :meth:`forget` (a redirect
        hop, or a script's ``location = ...``), if any: ``(why, how, target)``, ``how``
        saying from where (``browser redirect from http://site/a``). Forgotten
        once taken."""
        return self._navigations.pop(id(page), None)

    def forget(self, page: Page) -> None:
        self._navigations.pop(id(page), None)

    # ---------------------------------------------------------------- reporting
    def refused(self, why: str, url: str, page_url: str, resource: str) -> None:
        """Count a refusal; say it once per scheme or host (log line and event)."""
        self._count(STAT.format(why=why))
        target = url.partition(":")[0].lower() if why == "scheme" else _hostname(url)
        if (why, target) in self._told:
            return
        self._told.add((why, target))
        what = f"scheme {target!r}" if why == "scheme" else f"off-site host {target!r}"
        logger.info(
            "refused a rendered page's requests to %s (first: %s from %s); they are "
            "counted, not sent",
            what,
            shown(url),
            shown(page_url) if page_url else "the page",
        )
        event = self._event()
        if event is not None:
            event(
                EVENT,
                why=why,
                target=target,
                url=shown(url),
                page=shown(page_url) if page_url else None,
                resource=resource,
            )


def chain(
    first: Callable[[PlaywrightRequest], Awaitable[bool]],
    then: Callable[[PlaywrightRequest], Any] | None,
) -> Callable[[PlaywrightRequest], Awaitable[bool]]:
    """An ``abort_request`` hook: ``first``, then (when it lets the request go) the
    job's own ``PLAYWRIGHT_ABORT_REQUEST``, if any."""
    if then is None:
        return first

    async def both(request: PlaywrightRequest) -> bool:
        if await first(request):
            return True
        verdict = then(request)
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        return bool(verdict)

    return both


def _hostname(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""


def _page_url(request: PlaywrightRequest) -> str:
    try:
        return request.frame.page.url
    except Exception:  # a service worker's request has no frame
        return ""


def _safe_page_url(page: Page) -> str:
    try:
        return page.url
    except Exception:
        return ""


def _main_frame_page(request: PlaywrightRequest) -> Page | None:
    """The page whose main frame made ``request`` (None for a sub-frame's, a worker's)."""
    try:
        frame = request.frame
        return frame.page if frame.parent_frame is None else None
    except Exception:
        return None
