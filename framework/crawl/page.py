"""What one response holds, according to the spec: records, links and next pages.

Pure functions over a Scrapy response: no I/O, no workspace, no Scrapy engine. The
spider turns a :class:`PageResult` into rows and items; this module only reads pages.
Everything that can be compiled (selectors, templates, field extractors) is compiled
once per spec in :class:`CompiledJob`, because this runs for every response.

A page is hostile until proven otherwise. Its :class:`Guard` decides what it may make
the crawler do: links (follow rules, next pages) to a scheme other than http(s) or to a
host outside the job's ``allowed_domains`` are never discovered (counted and handed to
the guard's ``on_refused`` so the spider can say so); extraction runs under the limits
of :mod:`framework.extract.patterns` (time, matches, characters, record size), and going
over one makes the page a :class:`PageError`. Every selector is compiled by
:mod:`framework.extract.fields`, so XPath ``re:`` functions are the bounded ones.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from lxml import etree
from parsel import Selector
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.response import get_base_url

from framework.crawl.addresses import AddressPolicy
from framework.crawl.changes import ChangeLimits
from framework.crawl.discovery import DEFAULT_MAX_BYTES, SitemapError, SitemapReader
from framework.crawl.forms import CompiledForm, FormError, Submission
from framework.crawl.safety import url_refusal
from framework.extract.embedded import EmbeddedError
from framework.extract.fields import (
    Extraction,
    FieldExtractor,
    Scope,
    compile_css,
    compile_jsonpath,
    compile_records,
    compile_selector,
    compile_xpath,
    records_of,
)
from framework.extract.patterns import (
    LimitExceeded,
    Limits,
    NotStorable,
    SafeRegex,
    budget,
    page_budget,
    record_size,
    surrogates_replaced,
)
from framework.extract.tree import html_selector
from framework.spec.keys import make_dedupe_key, normalise_source_id
from framework.spec.models import (
    FollowRule,
    Format,
    JobSpec,
    PageKind,
    Pagination,
    Records,
    SubtabSpec,
)
from framework.spec.template import Template


class PageError(Exception):
    """The response cannot be read as the spec says (not JSON, not text), or reading it
    went over an extraction limit (the message names the setting)."""


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


@dataclass
class Request:
    """A sub-tab request, ready to become a row."""

    kind: str
    url: str
    method: str
    body: str | None
    body_type: str | None
    tab: str
    required: bool


@dataclass
class Record:
    values: dict[str, Any]  # the item's data: helper fields left out
    source_id: str | None = None
    dedupe_key: str | None = None
    missing: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    fallbacks: list[tuple[str, int, str]] = field(default_factory=list)
    subtabs: list[Request] = field(default_factory=list)
    # (field, rule, value): rules of the spec this record breaks; it is stored as invalid
    violations: list[tuple[str, str, Any]] = field(default_factory=list)
    # every value, helper fields included: what templates and carried values see
    # (None: the same as `values`, a record of a kind without helpers)
    context: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return not self.missing

    @property
    def all_values(self) -> dict[str, Any]:
        return self.values if self.context is None else self.context


@dataclass
class PageResult:
    records: list[Record] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    next_pages: list[Link] = field(default_factory=list)
    forms: list[Submission] = field(default_factory=list)  # form requests (forms.py)
    # links found per follow target, for the rules this page read (a rule past its
    # max_depth, or per record on a page with no record, was not): found-nothing
    # warnings tell a rule that never finds a link (framework/crawl/findings.py)
    follows: dict[str, int] = field(default_factory=dict)
    # what `each` matched (1 for a page that is one record): a kind with no fields
    # keeps no record of them, yet its links come from them
    matched: int = 0


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


class _CompiledFollow:
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


def _tally(follows: dict[str, int], rule: _CompiledFollow, depth: int, found: int) -> None:
    if rule.reads(depth):
        follows[rule.to] = follows.get(rule.to, 0) + found


class CompiledSubtab:
    def __init__(
        self,
        kind: str,
        name: str,
        spec: SubtabSpec,
        guard: Guard,
        languages: tuple[str, ...] = (),
    ) -> None:
        self.kind = f"{kind}.{name}"
        self.name = name
        self.spec = spec
        self.guard = guard
        self.url = Template(spec.url)
        self.form = (
            {k: Template(v) for k, v in spec.body.form.items()}
            if spec.body is not None and spec.body.form is not None
            else None
        )
        self.json_body = (
            _compile_json(spec.body.json_body)
            if spec.body is not None and spec.body.json_body is not None
            else None
        )
        is_json = spec.format is Format.JSON
        each = spec.each if isinstance(spec.each, str) else None
        # records that are data in the page: JSON values, read with `json:` paths
        self.records = compile_records(spec.each) if isinstance(spec.each, Records) else None
        self.fields = (
            FieldExtractor(
                spec.fields, json=is_json or self.records is not None, languages=languages
            )
            if spec.fields
            else None
        )
        self.each_json = compile_jsonpath(each) if each and spec.format is Format.JSON else None
        self.each_xp = compile_selector(each) if each and spec.format is not Format.JSON else None

    def request(self, base: str, ctx: Mapping[str, Any]) -> Request:
        url = urljoin(base, self.url.render(ctx, quote=True))
        body: str | None = None
        body_type: str | None = None
        if self.form is not None:
            body = urlencode({k: t.render(ctx) for k, t in self.form.items()})
            body_type = "form"
        elif self.json_body is not None:
            body = json.dumps(_render_json(self.json_body, ctx), sort_keys=True)
            body_type = "json"
        return Request(
            self.kind, url, self.spec.method, body, body_type, self.name, self.spec.required
        )

    def parse(self, response: Response) -> Any:
        """The tab's value: a list of row dicts with ``each``, else one dict."""
        with page_budget(self.guard.limits):
            try:
                part = self._parse(response)
                self.guard.check_record(part, f"the value of sub-tab {self.name!r}")
            except (LimitExceeded, NotStorable, EmbeddedError) as exc:
                raise PageError(str(exc)) from None
        return part

    def _parse(self, response: Response) -> Any:
        if self.spec.format is Format.JSON:
            doc = _json(response)
            if self.each_json is not None:
                items = self.each_json.find(doc)
                if self.fields is None:
                    return items
                return [
                    self.fields.extract(Scope(url=response.url, selector=None, json=it)).values
                    for it in items
                ]
            assert self.fields is not None
            return self.fields.extract(Scope(url=response.url, selector=None, json=doc)).values
        sel = _selector(response, base_url=False)  # a sub-tab has no forms
        if self.records is not None:
            page = Scope(url=response.url, selector=sel, page_text=_text(response))
            found = records_of(self.records, page)
            if self.fields is None:
                return [s.json for s in found]
            return [self.fields.extract(s).values for s in found]
        if self.each_xp is not None:
            rows = _select(sel, self.each_xp, str(self.spec.each or ""))
            if self.fields is None:
                return [r.xpath("normalize-space(.)").get() for r in rows]
            return [self.fields.extract(Scope(url=response.url, selector=r)).values for r in rows]
        assert self.fields is not None
        return self.fields.extract(Scope(url=response.url, selector=sel)).values


# gives a record's fields from its scope in place of FieldExtractor.extract
FieldsOf = Callable[[Scope], Extraction]
_NO_VALUE: tuple[Any, ...] = (None, "", [], {})  # what `required_any` takes as no value


class CompiledKind:
    def __init__(self, job: JobSpec, name: str, kind: PageKind, guard: Guard) -> None:
        self.job = job
        self.name = name
        self.spec = kind
        self.guard = guard
        self.is_json = kind.format is Format.JSON
        # records that are data in the page (embedded JSON, JSON-LD, microdata): JSON
        # values, so their fields are `json:` paths as on a JSON page
        self.records = compile_records(kind.each) if isinstance(kind.each, Records) else None
        json_records = self.is_json or self.records is not None
        self.fields = FieldExtractor(kind.fields, json=json_records, languages=job.languages)
        # helper fields of every kind: a carried one is no part of this kind's items either
        self.helpers = helper_names(job)
        self.limits = ChangeLimits(kind.fields)  # max_change / frozen on a re-crawl
        self.id = (
            FieldExtractor(
                {"id": kind.id.model_copy(update={"required": True})},
                json=json_records,
                languages=job.languages,
            )
            if (kind.id is not None)
            else None
        )
        each = kind.each if isinstance(kind.each, str) else None
        self.each_json = compile_jsonpath(each) if each and self.is_json else None
        self.each_xp = compile_selector(each) if each and not self.is_json else None
        self.follow = [_CompiledFollow(f, guard) for f in kind.follow]
        self.sitemap = (
            SitemapReader(name, kind.sitemap, self.follow, guard.admit)
            if kind.format is Format.SITEMAP
            else None
        )
        self.subtabs = [
            CompiledSubtab(name, n, t, guard, job.languages) for n, t in kind.subtabs.items()
        ]
        self.pagination: Pagination | None = kind.pagination
        self.forms = [CompiledForm(name, i, f) for i, f in enumerate(kind.forms)]
        self.next_json = (
            compile_jsonpath(kind.pagination.next)
            if kind.pagination is not None and kind.pagination.next and self.is_json
            else None
        )
        self.next_xp = (
            compile_selector(kind.pagination.next)
            if kind.pagination is not None and kind.pagination.next and not self.is_json
            else None
        )
        self.stop_json = (
            compile_jsonpath(kind.pagination.stop.json_path)
            if kind.pagination is not None and kind.pagination.stop.json_path
            else None
        )

    # ------------------------------------------------------------------ records
    def parse(
        self,
        response: Response,
        carry: Mapping[str, Any],
        page_no: int,
        depth: int = 0,
        fields: FieldsOf | None = None,
    ) -> PageResult:
        """``depth``: the page's, in links from a start URL (for ``max_depth``).
        ``fields``: what gives a record's fields instead of extracting them all (a
        reparse that reads only the changed fields: framework/crawl/narrow.py)."""
        with page_budget(self.guard.limits):
            try:
                if self.sitemap is not None:
                    return self._sitemap(response, carry, depth)
                return self._parse(response, carry, page_no, depth, fields)
            except (LimitExceeded, NotStorable, SitemapError, EmbeddedError) as exc:
                raise PageError(str(exc)) from None

    def _sitemap(self, response: Response, carry: Mapping[str, Any], depth: int) -> PageResult:
        assert self.sitemap is not None
        found = self.sitemap.links(response, depth, self.guard.max_body)
        # a robots.txt or an index that names sitemaps leads to no page of a rule's
        # kind itself: only a page that names no sitemap reads the rules
        follows: dict[str, int] = {}
        if not any(f.nested for f in found):
            follows = dict.fromkeys((rule.to for rule in self.follow), 0)
            for f in found:
                follows[f.kind] = follows.get(f.kind, 0) + 1
        return PageResult(
            links=[
                Link(f.kind, f.url, dict(carry), depth if f.nested else depth + 1) for f in found
            ],
            follows=follows,
        )

    def _parse(
        self,
        response: Response,
        carry: Mapping[str, Any],
        page_no: int,
        depth: int = 0,
        fields: FieldsOf | None = None,
    ) -> PageResult:
        result = PageResult()
        base = response.url
        if self.is_json:
            doc = _json(response)
            sel: Selector | None = None
            scopes = (
                [Scope(url=base, selector=None, json=v) for v in self.each_json.find(doc)]
                if self.each_json is not None
                else [Scope(url=base, selector=None, json=doc)]
            )
        else:
            doc = None
            sel = _selector(response, base_url=bool(self.forms))
            page_text = response.text if isinstance(response, TextResponse) else None
            if self.records is not None:
                page = Scope(url=base, selector=sel, page_text=page_text)
                scopes = records_of(self.records, page)
            elif self.each_xp is not None:
                scopes = [
                    Scope(url=base, selector=row, page_text=page_text)
                    for row in _select(sel, self.each_xp, str(self.spec.each or ""))
                ]
            else:
                scopes = [Scope(url=base, selector=sel, page_text=page_text)]
        result.matched = len(scopes)
        # records that are elements have their own links; data records do not
        per_record_follow = isinstance(self.spec.each, str) and not self.is_json
        links_base = link_base(response) if self.follow and sel is not None else base
        for scope in scopes:
            record = self._record(scope, carry, fields)
            if self.spec.emits or self.spec.fields:
                result.records.append(record)
            if per_record_follow and scope.selector is not None:
                for rule in self.follow:
                    urls = rule.urls(scope.selector, links_base, depth)
                    _tally(result.follows, rule, depth, len(urls))
                    for url in urls:
                        result.links.append(Link(rule.to, url, dict(record.all_values), depth + 1))
        if not per_record_follow and sel is not None:
            for rule in self.follow:
                urls = rule.urls(sel, links_base, depth)
                _tally(result.follows, rule, depth, len(urls))
                for url in urls:
                    result.links.append(Link(rule.to, url, dict(carry), depth + 1))
        result.next_pages = self._next(response, sel, doc, len(scopes), carry, page_no)
        for link in result.next_pages:  # a next page is as deep as its list
            link.depth = depth
        if self.forms and sel is not None:
            result.forms = self._forms(response, sel, result, carry)
        return result

    def _forms(
        self, response: Response, sel: Selector, result: PageResult, carry: Mapping[str, Any]
    ) -> list[Submission]:
        """The page's form requests. A page that is one record hands its values on, as
        its follow links do; templates also see ``url`` and ``source_type``."""
        values = dict(carry)
        if self.spec.each is None and result.records:
            values.update(result.records[0].all_values)
        ctx = {**values, "url": response.url, "source_type": self.job.source_type}
        encoding = response.encoding if isinstance(response, TextResponse) else "utf-8"
        out: list[Submission] = []
        try:
            for form in self.forms:
                out.extend(form.submissions(sel, encoding, ctx, values, self.guard.admit))
        except FormError as exc:
            raise PageError(str(exc)) from None
        return out

    def _record(
        self, scope: Scope, carry: Mapping[str, Any], fields: FieldsOf | None = None
    ) -> Record:
        ext: Extraction = self.fields.extract(scope) if fields is None else fields(scope)
        values = {**carry, **ext.values}
        self.guard.check_record(values, f"a record of {self.name!r}")
        helpers = self.helpers
        record = Record(
            values={k: v for k, v in values.items() if k not in helpers} if helpers else values,
            context=values if helpers else None,
            missing=list(ext.missing),
            errors=list(ext.errors),
            fallbacks=list(ext.fallbacks),
            violations=list(ext.violations),
        )
        for group in self.spec.required_any:
            if all(values.get(n) in _NO_VALUE for n in group):
                record.violations.append(("|".join(group), "required_any", None))
        if self.id is not None:
            got = self.id.extract(scope)
            record.fallbacks.extend(got.fallbacks)
            record.errors.extend(got.errors)
            record.violations.extend(got.violations)
            if "id" in got.values and got.values["id"] not in (None, ""):
                ctx = {
                    **values,
                    "id": got.values["id"],
                    "source_type": self.job.source_type,
                    "url": scope.url,
                }
                record.source_id = normalise_source_id(str(got.values["id"]))
                if self.job.key.lowercase:
                    record.source_id = record.source_id.lower()
                record.dedupe_key = make_dedupe_key(
                    self.job.key, self.job.source_type, record.source_id, ctx
                )
                ctx["source_id"] = record.source_id
                for tab in self.subtabs:
                    record.subtabs.append(tab.request(scope.url, ctx))
            else:
                record.missing.insert(0, "id")
        return record

    # --------------------------------------------------------------- pagination
    def _next(
        self,
        response: Response,
        sel: Selector | None,
        doc: Any,
        n_records: int,
        carry: Mapping[str, Any],
        page_no: int,
    ) -> list[Link]:
        pg = self.pagination
        if pg is None:
            return []
        if pg.max_pages is not None and page_no >= pg.max_pages:
            return []
        if pg.next is not None:
            if self.next_json is not None:  # a JSON page names its next URL by a JSON path
                found = [v for v in self.next_json.find(doc) if isinstance(v, str) and v]
                hrefs = [h for h in (_link_text(v, self.guard) for v in found[:1]) if h]
            elif sel is not None and self.next_xp is not None:
                hrefs = link_values(sel, self.next_xp, "next", self.guard, first=True)
            else:
                return []
            base = response.url if self.next_json is not None else link_base(response)
            urls = [urljoin(base, h) for h in hrefs[:1]]
            return [Link(self.name, u, dict(carry)) for u in urls if self.guard.admit(u)]
        # number / offset pagination
        if pg.stop.empty and n_records == 0:
            return []
        if self.stop_json is not None and doc is not None:
            found = self.stop_json.find(doc)
            if found and found[0] == pg.stop.equals:
                return []
        assert pg.param is not None
        parts = urlsplit(response.url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        current = pg.start
        kept: list[tuple[str, str]] = []
        for k, v in query:
            if k == pg.param:
                try:
                    current = int(v)
                except ValueError:
                    return []
            else:
                kept.append((k, v))
        kept.append((pg.param, str(current + pg.step)))
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
        return [Link(self.name, url, dict(carry), same_request=True)]


def helper_names(spec: JobSpec) -> frozenset[str]:
    """The names of the helper fields of every page kind (``helper: true``): values for
    templates and carrying, never part of an item. Validation keeps a name either a
    helper everywhere or nowhere, so a carried helper is left out wherever it lands."""
    return frozenset(
        name for kind in spec.page_kinds().values() for name, f in kind.fields.items() if f.helper
    )


class CompiledJob:
    """A spec compiled for crawling: every kind and sub-tab, ready for responses."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.guard = Guard(job_domains(spec))
        self.kinds = {
            name: CompiledKind(spec, name, k, self.guard) for name, k in spec.page_kinds().items()
        }
        self.subtabs = {t.kind: t for k in self.kinds.values() for t in k.subtabs}
        self.start_kind = spec.start_kind()
        # rows carry their depth only when a rule reads it (other workspaces unchanged)
        self.tracks_depth = any(
            r.max_depth is not None for k in self.kinds.values() for r in k.spec.follow
        )


# ---------------------------------------------------------------------- helpers
def _selector(response: Response, *, base_url: bool = True) -> Selector:
    """The page's tree. ``base_url``: with the document's URL (only forms read it, for
    their ``action``; finding it costs Scrapy's ``get_base_url``, ~25-35 us a page)."""
    if isinstance(response, HtmlResponse):
        # Scrapy's tree, from a parser kept per thread
        return html_selector(response, base_url=base_url)
    if not isinstance(response, TextResponse):
        raise PageError(f"expected a text response, got {type(response).__name__}")
    return response.selector


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


def _text(response: Response) -> str | None:
    return response.text if isinstance(response, TextResponse) else None


def _json(response: Response) -> Any:
    try:
        doc = json.loads(response.body)
    except ValueError as exc:
        raise PageError(f"expected JSON: {exc}") from None
    return surrogates_replaced(doc, response.body)


def job_domains(spec: JobSpec) -> list[str]:
    """The hosts a job may request: its ``allowed_domains`` (each with its subdomains),
    else the hosts of its start URLs. An explicit empty list allows every host."""
    if spec.allowed_domains is not None:
        return list(spec.allowed_domains)
    return sorted({urlsplit(u).hostname or "" for u in spec.start_urls} - {""})


def _nodes(sel: Selector, xp: etree.XPath, what: str) -> list[Any]:
    root = sel.root
    if root is None or isinstance(root, str):
        return []
    found = xp(root)
    if not isinstance(found, list):
        return [found]
    if len(found) > budget().limits.max_matches:
        budget().matches(len(found), what)
    return found


def _select(sel: Selector, xp: etree.XPath, expr: str) -> list[Selector]:
    """Like ``sel.xpath(expr)`` (or ``.css``), with the framework's compiled selector."""
    return [Selector(root=n, type=sel.type) for n in _nodes(sel, xp, f"each: {expr}")]


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
    for n in _nodes(sel, xp, what):
        if isinstance(n, str):
            href = _link_text(n, guard)
        elif isinstance(n, (bool, float)):  # an XPath count() or boolean(): no address
            guard.refuse(str(n), "not_a_url")
            continue
        else:
            tag = n.tag if isinstance(n.tag, str) else "!--"  # a comment's tag is a function
            attr = LINK_ATTRS.get(tag.lower())
            if attr is None:
                guard.refuse(f"<{tag}>", "not_a_link")
                continue
            href = _link_text(n.get(attr) or "", guard)
        if href:
            out.append(href)
            if first:
                break
    return out


def _link_text(value: str, guard: Guard) -> str:
    """``value`` stripped when it may be an address, else "" (refused when it is markup
    or words: a cheap test, most hrefs are short and clean)."""
    href = value.strip()
    if not href or href.lower().startswith(_NOT_LINKS):
        return ""
    if _NOT_URL.search(href) is not None:
        guard.refuse(href, "not_a_url")
        return ""
    return href


def _compile_json(value: Any) -> Any:
    """A JSON body template with every string compiled to a Template, once."""
    if isinstance(value, str):
        return Template(value)
    if isinstance(value, list):
        return [_compile_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _compile_json(v) for k, v in value.items()}
    return value


def _render_json(value: Any, ctx: Mapping[str, Any]) -> Any:
    if isinstance(value, Template):
        return value.render(ctx)
    if isinstance(value, list):
        return [_render_json(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: _render_json(v, ctx) for k, v in value.items()}
    return value
