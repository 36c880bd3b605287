"""The links a page leads to, and what it may make the crawler do.

A page is hostile until proven otherwise. Its :class:`Guard` decides: links (follow
rules, next pages) to a scheme other than http(s) or to a host outside the job's
``allowed_domains`` are never discovered (counted and handed to the guard's
``on_refused`` so the spider can say so), and a record over the size limit stops the
page. A selection is read as Scrapy's ``response.follow`` reads it, relative to the
page's ``<base href>`` (:func:`link_base`). Pure functions over responses and trees:
no I/O, no workspace.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from lxml import etree
from parsel import Selector
from scrapy.http import HtmlResponse, Response
from scrapy.utils.response import get_base_url

from framework.crawl.addresses import AddressPolicy
from framework.crawl.discovery import DEFAULT_MAX_BYTES
from framework.crawl.reading import nodes
from framework.crawl.safety import url_refusal
from framework.extract.expressions import compile_css, compile_xpath
from framework.extract.patterns import LimitExceeded, Limits, NotStorable, SafeRegex, record_size
from framework.spec.models import FollowRule, JobSpec

__all__ = [
    "LINK_ATTRS",
    "SELECTOR_REFUSALS",
    "CompiledFollow",
    "Guard",
    "Link",
    "job_domains",
    "link_base",
    "link_text",
    "link_values",
    "tally",
]


class Guard:
    """What pages may make the crawler do, shared by every kind of one job.

    ``limits`` and ``on_refused`` are set once per crawl by the spider (from settings);
    the defaults are the framework's."""

    def __init__(self, allowed_domains: Iterable[str]) -> None:
        self.domains = frozenset(d.lower().strip(".") for d in allowed_domains if d)
        self.limits = Limits()
        # "scheme" / "offsite" / "userinfo" / "private_target" -> links dropped
        self.refused: Counter[str] = Counter()
        # the addresses the job may reach (an IP literal refused here; a name when the
        # crawl resolves it): set by the spider, none when the page is read offline
        self.policy: AddressPolicy | None = None
        self.on_refused: Callable[[str, str], None] | None = None  # (url, why)
        # what a gzip sitemap may decompress to (the crawl sets DOWNLOAD_MAXSIZE)
        self.max_body = DEFAULT_MAX_BYTES
        self._allowed: set[str] = set()  # "scheme://host:port" prefixes found allowed

    def admit(self, url: str) -> bool:
        """Whether a discovered link may become a row; a refusal is counted and told."""
        # A page links to a few origins many times: one allowed origin is checked once.
        end = url.find("/", url.find("://") + 3) if "://" in url else -1
        origin = url[:end] if end > 0 else url
        if origin in self._allowed and "?" not in origin and "#" not in origin:
            return True
        # A link with user:password@ would put a credential in rows, logs and requests
        # that nobody chose to send: a page is not allowed to hand the crawler one.
        why = "userinfo" if "@" in origin.partition("://")[2] else None
        why = why or url_refusal(url, self.domains, self.policy)
        if why is None:
            if len(self._allowed) < 1024 and "?" not in origin and "#" not in origin:
                self._allowed.add(origin)
            return True
        self.refuse(url, why)
        return False

    def refuse(self, value: str, why: str) -> None:
        """Count a link that is not requested, and tell ``on_refused``. Besides the
        guard's own reasons: ``not_a_link`` (a selected element that is not a link,
        ``value`` its tag) and ``not_a_url`` (markup or text, not an address)."""
        self.refused[why] += 1
        if self.on_refused is not None:
            self.on_refused(value, why)

    def check_record(self, values: Any, what: str) -> None:
        limit = self.limits.max_item_bytes
        try:
            size = record_size(values, limit)
        except NotStorable as exc:
            raise NotStorable(f"{what} holds {exc}") from None
        if size > limit:
            raise LimitExceeded(
                f"{what} is larger than FRAMEWORK_MAX_ITEM_BYTES ({limit} bytes as JSON)"
            )


@dataclass
class Link:
    kind: str
    url: str
    carry: dict[str, Any] = field(default_factory=dict)  # fields carried to the next page
    depth: int = 0  # of the page it leads to, in links from a start URL (follow rules)
    # a `param` pagination's next page is the page's own request again, its counter in
    # the query: a POSTed search's page 2 is the same search (its method and body)
    same_request: bool = False


_ALL_LINKS = compile_css("a::attr(href)")
# Not requests at all: a fragment, a script, an address. Dropped without a word.
_NOT_LINKS = ("#", "javascript:", "mailto:", "tel:")
# A selected element is read as Scrapy's response.follow reads it (the href of an <a>
# or <link>), and as a browser would load the two others that name a document.
LINK_ATTRS = {"a": "href", "link": "href", "area": "href", "iframe": "src"}
# Markup or words (`li.next a::text` gives "Next page"): never an address to request.
_NOT_URL = re.compile(r"[<>\s]")
# The refusals that are a selector's mistake rather than the site's, and how to say
# what was selected ({target}: the element, as "<div>")
SELECTOR_REFUSALS = {
    "not_a_link": "{target} elements, which are not links (select the <a>, or its ::attr(href))",
    "not_a_url": "values that are not URLs (markup or words: select the link's ::attr(href))",
}


class CompiledFollow:
    def __init__(self, rule: FollowRule, guard: Guard) -> None:
        self.to = rule.to
        self.guard = guard
        if rule.css is not None:
            self.xp = compile_css(rule.css)
        elif rule.xpath is not None:
            self.xp = compile_xpath(rule.xpath)
        else:
            self.xp = _ALL_LINKS
        self.pattern = SafeRegex(rule.pattern) if rule.pattern else None
        self.deny = [SafeRegex(d) for d in rule.deny]
        self.max_depth = rule.max_depth

    def wants(self, url: str, depth: int) -> bool:
        """Whether this rule leads from a page at ``depth`` to ``url`` (the guard aside)."""
        if self.max_depth is not None and depth + 1 > self.max_depth:
            return False
        if self.pattern is not None and not self.pattern.search(url):
            return False
        return not any(d.search(url) for d in self.deny)

    def reads(self, depth: int) -> bool:
        """Whether a page at ``depth`` is read for this rule's links at all."""
        return self.max_depth is None or depth < self.max_depth

    def urls(self, sel: Selector, base: str, depth: int = 0) -> list[str]:
        out: list[str] = []
        if not self.reads(depth):
            return out  # not even read: a deep page's links cost nothing
        for href in link_values(sel, self.xp, "follow", self.guard):
            url = urljoin(base, href)
            if not self.wants(url, depth):
                continue
            if self.guard.admit(url):
                out.append(url)
        return out


def tally(follows: dict[str, int], rule: CompiledFollow, depth: int, found: int) -> None:
    if rule.reads(depth):
        follows[rule.to] = follows.get(rule.to, 0) + found


# `<base` as the first 4 KB of a page may hold it (where Scrapy's get_base_url looks)
_BASE_TAG = re.compile(r"<base[\s/>]", re.IGNORECASE)
_BASE_SCAN = 4096


def link_base(response: Response) -> str:
    """The URL a page's links (follow rules, next pages) are relative to: its ``<base
    href>``, as browsers, Scrapy's link extractors and the page's forms read it, else
    its own URL. A base of another scheme (``javascript:``, ``data:``) is ignored, as
    browsers ignore it; one on another host leads the links there, where the guard
    refuses them as it refuses any link. The tag is looked for before Scrapy's
    ``get_base_url`` is asked (~25-35 us a page): most pages have none."""
    if not isinstance(response, HtmlResponse):
        return response.url
    if _BASE_TAG.search(response.text, 0, _BASE_SCAN) is None:
        return response.url
    found = get_base_url(response)
    try:
        scheme = urlsplit(found).scheme.lower()
    except ValueError:  # an unbalanced "[" in it: no base a browser would use either
        return response.url
    return found if scheme in ("http", "https") else response.url


def job_domains(spec: JobSpec) -> list[str]:
    """The hosts a job may request: its ``allowed_domains`` (each with its subdomains),
    else the hosts of its start URLs. An explicit empty list allows every host."""
    if spec.allowed_domains is not None:
        return list(spec.allowed_domains)
    return sorted({urlsplit(u).hostname or "" for u in spec.start_urls} - {""})


def link_values(
    sel: Selector, xp: etree.XPath, what: str, guard: Guard, *, first: bool = False
) -> list[str]:
    """The addresses a follow or next selection names, as ``response.follow`` reads a
    selection: a string as it is (stripped), an ``<a>``/``<link>``/``<area>`` element
    its ``href``, an ``<iframe>`` its ``src``. Any other element, and a value that is
    markup or words, is refused through the guard (counted, told), never requested; a
    fragment, a script or an address (``mailto:``), or a link element with no address
    (a disabled "next" on a list's last page), is no link at all. ``first``: stop at
    the first address (a next page is one)."""
    out: list[str] = []
    for n in nodes(sel, xp, what):
        if isinstance(n, str):
            href = link_text(n, guard)
        elif isinstance(n, (bool, float)):  # an XPath count() or boolean(): no address
            guard.refuse(str(n), "not_a_url")
            continue
        else:
            tag = n.tag if isinstance(n.tag, str) else "!--"  # a comment's tag is a function
            attr = LINK_ATTRS.get(tag.lower())
            if attr is None:
                guard.refuse(f"<{tag}>", "not_a_link")
                continue
            href = link_text(n.get(attr) or "", guard)
        if href:
            out.append(href)
            if first:
                break
    return out


def link_text(value: str, guard: Guard) -> str:
    """``value`` stripped when it may be an address, else "" (refused when it is markup
    or words: a cheap test, most hrefs are short and clean)."""
    href = value.strip()
    if not href or href.lower().startswith(_NOT_LINKS):
        return ""
    if _NOT_URL.search(href) is not None:
        guard.refuse(href, "not_a_url")
        return ""
    return href
