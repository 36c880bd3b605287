"""Where the crawler may go: http(s) only, the job's hosts only, the addresses its
start hosts lead to only (:mod:`framework.crawl.addresses`), on every hop.

Every request the framework sends carries ``dont_filter=True`` (the workspace rows are
the dedupe), which also switches off Scrapy's own offsite filter. This downloader
middleware takes its place, for every request, whatever made it (a start URL, a row, a
sub-tab, robots.txt) and every redirect hop: Scrapy's RedirectMiddleware and
MetaRefreshMiddleware hand the new request back to the engine, which sends it through
``process_request`` again with the row in its meta. A refusal is an exception carrying
its :class:`~framework.workspace.ErrorKind` (``scheme``, ``offsite`` or
``private_target``), which the spider's errback records as the row's typed error,
naming the target. An IP literal is checked here; a name once the HTTP client has
resolved it (addresses.py); the address a response came from, for other clients.

It also sees what Scrapy would otherwise pass on silently: a 3xx or a meta refresh to a
scheme Scrapy will not follow comes back as the redirect page itself (which would be
parsed as an empty record); here it becomes a ``scheme`` error. And a download Scrapy
cancelled for being over ``DOWNLOAD_MAXSIZE`` becomes a typed ``parse`` error that
says so.

Host rule, as Scrapy's ``allowed_domains``: a host is allowed when it is one of the
domains or a subdomain of one (``example.org`` allows ``www.example.org``); ports do not
matter; an empty list allows every host. Discovery (:mod:`framework.crawl.page`) uses
:func:`url_refusal` too, so refused links never become rows at all, and so does the
playwright plugin for every request a rendered page makes (its notes through
:func:`refused_error`, as here).

Cheap on purpose: it runs for every request. One cached URL parse (Scrapy's
``urlparse_cached``, shared with its other middlewares), a set lookup per domain level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from scrapy import signals
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from scrapy.http import HtmlResponse
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.response import get_meta_refresh
from w3lib.url import safe_url_string

from framework.crawl.addresses import Address, AddressPolicy, policy_of, why_refused
from framework.errors import PageLevelError
from framework.redact import redact_url
from framework.workspace import ErrorKind

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

SCHEMES = frozenset({"http", "https"})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SHOWN = 200  # characters of a refused URL kept in a note
_NETLOCS_KEPT = 1024  # allowed host:port pairs remembered (a crawl has a few)


def host_allowed(host: str, domains: frozenset[str]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one (all allowed when empty)."""
    if not domains or host in domains:
        return True
    dot = host.find(".")
    while dot != -1:
        if host[dot + 1 :] in domains:
            return True
        dot = host.find(".", dot + 1)
    return False


def refusal(scheme: str, host: str | None, domains: frozenset[str]) -> str | None:
    """``"scheme"``, ``"offsite"`` or None (allowed), from a parsed URL's parts."""
    if scheme not in SCHEMES:
        return "scheme"
    if not host_allowed((host or "").rstrip("."), domains):
        return "offsite"
    return None


def url_refusal(
    url: str, domains: frozenset[str], policy: AddressPolicy | None = None
) -> str | None:
    """Why ``url`` may not be requested (``"scheme"``/``"offsite"``, or, given the job's
    ``policy``, ``"private_target"`` for an IP literal it may not reach), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unbalanced "[": no host we could check, so none allowed
        return "scheme" if url.partition(":")[0].lower() not in SCHEMES else "offsite"
    why = refusal(parts.scheme, host, domains)
    if why is None and policy is not None and policy.host_refused(host) is not None:
        return "private_target"
    return why


def via_of(request: Request) -> str:
    """How a redirected request was reached (``"302 from http://site/a"``), or ""."""
    hops = request.meta.get("redirect_urls") or []
    if not hops:
        return ""
    reasons = request.meta.get("redirect_reasons") or []
    how = reasons[-1] if reasons else "redirect"
    return f"{how} from {shown(hops[-1])}"


def shown(url: str) -> str:
    """A refused URL as a note may show it: credentials and secret parameters masked,
    the payload of a ``data:`` (or other non-hierarchical) URL left out, bounded."""
    scheme, sep, _ = url.partition(":")
    if sep and "://" not in url[: len(scheme) + 3] and scheme.lower() not in SCHEMES:
        return f"{scheme}:..."
    out = redact_url(url)
    return out if len(out) <= _SHOWN else out[:_SHOWN] + "..."


def spider_domains(spider: object) -> frozenset[str]:
    """A spider's ``allowed_domains``, normalised as :func:`host_allowed` compares them."""
    return frozenset(_domain(d) for d in getattr(spider, "allowed_domains", None) or () if d)


def refused_error(
    why: str, target: str, domains: frozenset[str], via: str = "", detail: str = ""
) -> Refused:
    """The typed error of a refused ``target`` (``why``: ``"scheme"``/``"offsite"``/
    ``"private_target"``, whose ``detail`` says which address); its note names the
    target (masked, bounded) and, when given, how it was reached (``via``: ``"302 from
    http://site/a"``). Shared by every path that refuses a URL, so the notes read the
    same whoever made the request (the browser's too)."""
    what = f"{via} to {shown(target)}" if via else shown(target)
    if why == "private_target":
        return Refused(ErrorKind.PRIVATE_TARGET, f"refused {what}: {detail}")
    if why == "scheme":
        scheme = target.partition(":")[0].lower()
        return Refused(
            ErrorKind.SCHEME,
            f"refused {what}: scheme {scheme!r} is never requested (only http and https)",
        )
    return Refused(
        ErrorKind.OFFSITE,
        f"refused {what}: host {host_of(target)!r} is not in allowed_domains "
        f"({', '.join(sorted(domains)) or 'none'})",
    )


class Refused(IgnoreRequest):
    """A request the crawler will not send; ``error_kind`` says why (scheme/offsite)."""

    def __init__(self, error_kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.error_kind = error_kind


class ResponseTooLarge(PageLevelError):
    """A download Scrapy cancelled at ``DOWNLOAD_MAXSIZE``: the page is not read."""

    error_kind = ErrorKind.PARSE


class SafetyMiddleware:
    """Downloader middleware: refuse other schemes and hosts, on every hop (see module)."""

    def __init__(
        self,
        *,
        maxsize: int,
        meta_refresh: bool,
        meta_refresh_maxdelay: float,
        meta_refresh_ignore_tags: Iterable[str],
        is_closing: Callable[[], bool] = lambda: False,
        domains: Iterable[str] | None = None,
        policy: AddressPolicy | None = None,
    ) -> None:
        self.maxsize = maxsize
        self.meta_refresh = meta_refresh
        self.meta_refresh_maxdelay = meta_refresh_maxdelay
        self.meta_refresh_ignore_tags = list(meta_refresh_ignore_tags)
        self.is_closing = is_closing
        self.domains: frozenset[str] | None = (
            None if domains is None else frozenset(_domain(d) for d in domains if d)
        )
        self.policy = policy or AddressPolicy()
        self._allowed_netlocs: set[str] = set()  # "host:port" already found allowed
        # addresses responses came from, allowed; kept as the address objects, not their
        # text: an address is equal to another exactly when its text is, and hashing one
        # costs a fraction of writing it out (str(), ~0.5 us a response)
        self._allowed_peers: set[Address] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        mw = cls(
            maxsize=s.getint("DOWNLOAD_MAXSIZE"),
            meta_refresh=s.getbool("METAREFRESH_ENABLED"),
            meta_refresh_maxdelay=s.getfloat("METAREFRESH_MAXDELAY"),
            meta_refresh_ignore_tags=s.getlist("METAREFRESH_IGNORE_TAGS"),
            is_closing=lambda: _engine_closing(crawler),
            policy=policy_of(crawler),
        )
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        self.domains = spider_domains(spider)
        self._allowed_netlocs.clear()

    # ------------------------------------------------------------------ requests
    def process_request(self, request: Request) -> None:
        parts = urlparse_cached(request)  # cached: Scrapy's own middlewares parse it too
        if parts.scheme in SCHEMES and parts.netloc in self._allowed_netlocs:
            return  # the common case: a host:port seen and allowed before
        why = refusal(parts.scheme, parts.hostname, self.domains or frozenset())
        if why is not None:
            raise self._refused(why, request.url, request)
        private = self.policy.host_refused(parts.hostname)
        if private is not None:
            detail = why_refused(parts.hostname or "", *private)
            raise self._refused("private_target", request.url, request, detail=detail)
        if len(self._allowed_netlocs) < _NETLOCS_KEPT:
            self._allowed_netlocs.add(parts.netloc)

    def _refused(
        self, why: str, target: str, request: Request, via: str = "", detail: str = ""
    ) -> Refused:
        return refused_error(
            why, target, self.domains or frozenset(), via or via_of(request), detail
        )

    # ----------------------------------------------------------------- responses
    def process_response(self, request: Request, response: Response) -> Response:
        self._check_peer(request, response)
        # Scrapy's redirect middlewares hand back the redirecting page itself when the
        # target's scheme is not http(s); an http(s) target came back as a new request
        # through process_request instead, so only the scheme is left to check here.
        if response.status in REDIRECT_STATUSES:
            location = response.headers.get(b"Location")
            if location and not request.meta.get("dont_redirect"):
                target = _redirect_target(request, location)
                if urlsplit(target).scheme not in SCHEMES:
                    raise self._refused("scheme", target, request, f"{response.status}")
        elif (
            self.meta_refresh
            and isinstance(response, HtmlResponse)
            and request.method != "HEAD"
            and not request.meta.get("dont_redirect")
        ):
            # cached per response: MetaRefreshMiddleware has already parsed it
            interval, url = get_meta_refresh(response, ignore_tags=self.meta_refresh_ignore_tags)
            if (
                url
                and interval is not None
                and interval < self.meta_refresh_maxdelay
                and urlsplit(url).scheme not in SCHEMES
            ):
                raise self._refused("scheme", url, request, "meta refresh")
        return response

    def _check_peer(self, request: Request, response: Response) -> None:
        """The address the answer came from, for clients that resolve names themselves
        (the default one refuses before connecting: addresses.py). Through a proxy, the
        address is the proxy's: the URL was checked, the proxy resolved the name."""
        ip = response.ip_address
        if ip is None or request.meta.get("proxy"):
            return
        if ip in self._allowed_peers:
            return
        kind = self.policy.refused(ip)
        if kind is None:
            if len(self._allowed_peers) < _NETLOCS_KEPT:
                self._allowed_peers.add(ip)
            return
        host = urlparse_cached(request).hostname or str(ip)
        detail = why_refused(host, ip, kind) + "; the answer is not read"
        raise self._refused("private_target", request.url, request, detail=detail)

    # ---------------------------------------------------------------- exceptions
    def process_exception(self, request: Request, exception: Exception) -> Any:
        # Scrapy 2.19's HTTP handler cancels a download for one reason of its own: the
        # body (announced or received) passed DOWNLOAD_MAXSIZE. A stopping engine's
        # cancellations are left as they are (the row stays for the next run).
        if isinstance(exception, DownloadCancelledError) and not self.is_closing():
            limit = request.meta.get("download_maxsize", self.maxsize)
            raise ResponseTooLarge(
                f"response larger than DOWNLOAD_MAXSIZE ({limit} bytes): download cancelled, "
                "page not read"
            ) from exception
        return None


def host_of(url: str) -> str:
    """The host of ``url`` as it is compared and shown ("" when it has none or cannot be
    parsed)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def _domain(d: str) -> str:
    return d.strip().lower().strip(".")


def _redirect_target(request: Request, location: bytes) -> str:
    """Where a 3xx points, resolved the way Scrapy's RedirectMiddleware resolves it."""
    target = safe_url_string(location)
    if location.startswith(b"//"):
        target = urlparse_cached(request).scheme + "://" + target.lstrip("/")
    return urljoin(request.url, target)


def _engine_closing(crawler: Crawler) -> bool:
    # Scrapy has no public "closing" flag before spider_closed; its engine slot's
    # `closing` is set the moment close_spider starts (as framework.crawl.politeness reads).
    slot = getattr(crawler.engine, "_slot", None)
    return slot is not None and getattr(slot, "closing", None) is not None
