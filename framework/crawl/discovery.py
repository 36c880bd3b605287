"""Discovery from sitemaps: robots.txt ``Sitemap:`` lines, sitemap indexes, sitemaps.

A page kind with ``format: sitemap`` reads one of three documents, told apart the way
Scrapy's ``SitemapSpider`` tells them: a URL ending in ``/robots.txt`` is a robots.txt
whose ``Sitemap:`` lines name sitemaps; otherwise the body (gunzipped first when it is
gzip, as ``.xml.gz`` files are) is a sitemap index, whose entries are sitemaps, or a
URL set, whose entries are pages. Sitemaps found in a robots.txt or an index become
rows of the same kind; a URL set's entries become rows of the kind of the first follow
rule that wants them (``pattern`` matches, no ``deny`` does), as ``sitemap_rules`` do
in Scrapy. An entry no rule wants is not a request at all.

Parsing is Scrapy's own (:class:`scrapy.utils.sitemap.Sitemap`: no entities resolved,
recovering from broken markup; :func:`scrapy.utils.sitemap.sitemap_urls_from_robots`),
and so is gunzipping (:func:`scrapy.utils.gz.gunzip`), bounded by ``DOWNLOAD_MAXSIZE``:
a gzip bomb stops at the bound and the row is a typed parse error, never a body that
fills the memory. Every URL found goes through the job's :class:`~framework.crawl.page.Guard`
like any link (other schemes and hosts are refused and counted).

Nothing here is a state of its own: every robots.txt and sitemap is a workspace row
like any page, so a resumed crawl goes on with the rows still pending instead of
finding its start URLs "already seen" and stopping (the pitfall of a dupe filter kept
across runs).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urljoin, urlsplit

from lxml import etree

# Scrapy raises this private ValueError subclass when gunzip passes max_size; its own
# SitemapSpider catches it the same way.
from scrapy.utils._compression import _DecompressionMaxSizeExceeded
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from framework.crawl.safety import shown
from framework.errors import PageLevelError
from framework.extract.patterns import SafeRegex, budget
from framework.settings import default

if TYPE_CHECKING:
    from scrapy.http import Response

    from framework.spec.models import SitemapOptions

logger = logging.getLogger(__name__)

# the framework's DOWNLOAD_MAXSIZE; the crawl sets the job's (runtime.from_crawler)
DEFAULT_MAX_BYTES: int = default("DOWNLOAD_MAXSIZE")


class SitemapError(PageLevelError):
    """The body is not a sitemap, an index or a robots.txt that can be read, or it is
    larger than allowed once decompressed; the message says which."""


class Rule(Protocol):
    """What discovery needs of a compiled follow rule (page.py's)."""

    to: str

    def wants(self, url: str, depth: int) -> bool: ...


@dataclass(frozen=True)
class Found:
    kind: str
    url: str
    nested: bool  # a sitemap of the reading kind: it keeps the depth of its finder


class SitemapReader:
    """One ``format: sitemap`` page kind, compiled."""

    def __init__(
        self,
        name: str,
        options: SitemapOptions | None,
        rules: Sequence[Rule],
        admit: Callable[[str], bool],
    ) -> None:
        self.name = name
        self.rules = rules
        self.admit = admit
        self.follow = [SafeRegex(p) for p in options.follow] if options else []
        self.alternate = options.alternate if options else False
        self.since = options.modified_since if options else None
        self._told_unmatched = False

    def links(self, response: Response, depth: int, max_bytes: int) -> list[Found]:
        """The rows this document names, each admitted by the guard."""
        out: list[Found] = []
        if urlsplit(response.url).path.endswith("/robots.txt"):
            locs = sitemap_urls_from_robots(response.body, base_url=response.url)
            n = 0
            for n, url in enumerate(locs, 1):
                _count(n, "the Sitemap: lines of a robots.txt")
                # every one: `sitemap.follow` chooses among an index's entries only, as
                # Scrapy's sitemap_follow does
                if self.admit(url):
                    out.append(Found(self.name, url, nested=True))
            if not n:  # the crawl ends here; its follow rules' finding says only that
                logger.warning(
                    "%s names no sitemap (no `Sitemap:` line): start from the sitemap's "
                    "own URL instead (often /sitemap.xml or /sitemap_index.xml)",
                    shown(response.url),
                )
            return out
        body = sitemap_body(response, max_bytes)
        doc = _open(body)
        index = doc.type == "sitemapindex"
        what = "the entries of a sitemap index" if index else "the entries of a sitemap"
        n = 0
        unmatched: list[str] = []
        for entry in doc:
            if self.since is not None and _before(entry.get("lastmod", ""), self.since):
                continue
            urls = [entry["loc"]]
            if self.alternate and not index:
                urls += entry.get("alternate", [])
            for loc in urls:
                n += 1
                _count(n, what)
                url = urljoin(response.url, loc.strip())
                if index:
                    if self._wanted(url) and self.admit(url):
                        out.append(Found(self.name, url, nested=True))
                    continue
                for rule in self.rules:
                    if rule.wants(url, depth):
                        if self.admit(url):
                            out.append(Found(rule.to, url, nested=False))
                        break
                else:
                    unmatched.append(url)
        if unmatched and len(unmatched) == n and not self._told_unmatched:
            # a pattern that matches nothing is the usual mistake; said once per kind
            self._told_unmatched = True
            logger.info(
                "no entry of sitemap %s matched a follow rule of %r (%d entries, first: %s)",
                shown(response.url),
                self.name,
                n,
                shown(unmatched[0]),
            )
        return out

    def _wanted(self, url: str) -> bool:
        """Whether an index entry is read (``sitemap.follow``)."""
        return not self.follow or any(p.search(url) for p in self.follow)


def sitemap_body(response: Response, max_bytes: int) -> bytes:
    """The XML of a sitemap response: gunzipped (at most ``max_bytes``) when gzip.

    A body still gzip after the transfer's Content-Encoding was undone is a ``.xml.gz``
    file; Scrapy's HttpCompressionMiddleware has already undone the encoding, under the
    same bound, when the server sent one."""
    body = response.body
    if not gzip_magic_number(response):
        return body
    try:
        return gunzip(body, max_size=max_bytes)
    except _DecompressionMaxSizeExceeded:
        raise SitemapError(
            f"gzip sitemap larger than DOWNLOAD_MAXSIZE ({max_bytes} bytes) when "
            f"decompressed ({len(body)} bytes compressed): not read"
        ) from None
    except (OSError, EOFError, struct.error) as exc:
        raise SitemapError(f"gzip sitemap that does not decompress: {exc}") from None


def _open(body: bytes) -> Sitemap:
    try:
        doc = Sitemap(body)
    except (etree.LxmlError, StopIteration, ValueError) as exc:
        # StopIteration has no message (an HTML page, plain text): say what it means
        detail = str(exc) or "no element could be read"
        raise SitemapError(f"not a sitemap (no XML document): {detail}") from None
    if doc.type not in ("urlset", "sitemapindex"):
        raise SitemapError(
            f"not a sitemap: the root element is <{doc.type}>, expected <urlset> or <sitemapindex>"
        )
    return doc


def _count(n: int, what: str) -> None:
    # one page's URLs are bounded like one selector's matches (FRAMEWORK_MAX_MATCHES)
    if n > budget().limits.max_matches:
        budget().matches(n, what)


def _before(lastmod: str, since: date) -> bool:
    """Whether a W3C datetime (``2024``, ``2024-05``, ``2024-05-01``, ``2024-05-01T..``)
    is on a day before ``since``; a value that is none of those is not before."""
    try:
        nums = [int(p) for p in lastmod.strip()[:10].split("-")]
        if len(nums) >= 3:
            return date(nums[0], nums[1], nums[2]) < since
    except ValueError:
        return False
    # a year or a month: before only when the whole of it is
    return tuple(nums) < (since.year, since.month)[: len(nums)]
