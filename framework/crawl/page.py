"""What one response holds, according to the spec: records, links and next pages.

Pure functions over a Scrapy response: no I/O, no workspace, no Scrapy engine. The
spider turns a :class:`PageResult` into rows and items; this module only reads pages.
Everything that can be compiled (selectors, templates, field extractors) is compiled
once per spec in :class:`CompiledJob`, because this runs for every response.

A page is hostile until proven otherwise. Its :class:`~framework.crawl.links.Guard`
decides what it may make the crawler do (:mod:`framework.crawl.links`: follow rules,
next pages, ``<base href>``); extraction runs under the limits of
:mod:`framework.extract.patterns` (time, matches, characters, record size), and going
over one makes the page a :class:`~framework.crawl.reading.PageError`. Every selector is
compiled by :mod:`framework.extract.expressions`, so XPath ``re:`` functions are the
bounded ones. Sub-tabs are :mod:`framework.crawl.subtabs`; the names of those modules
that importers use are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from parsel import Selector
from scrapy.http import Response, TextResponse

from framework.crawl.changes import ChangeLimits
from framework.crawl.discovery import SitemapError, SitemapReader
from framework.crawl.forms import CompiledForm, FormError, Submission
from framework.crawl.links import (
    LINK_ATTRS,
    SELECTOR_REFUSALS,
    CompiledFollow,
    Guard,
    Link,
    job_domains,
    link_base,
    link_text,
    link_values,
    tally,
)
from framework.crawl.nextlink import lookalike
from framework.crawl.reading import PageError, page_json, page_selector, select
from framework.crawl.subtabs import CompiledSubtab, Request
from framework.extract.embedded import EmbeddedError
from framework.extract.expressions import compile_jsonpath, compile_selector
from framework.extract.fields import Extraction, FieldExtractor, Scope
from framework.extract.patterns import LimitExceeded, NotStorable, page_budget
from framework.extract.sources import compile_records, records_of
from framework.spec.keys import make_dedupe_key, normalise_source_id
from framework.spec.models import Format, JobSpec, PageKind, Pagination, Records

__all__ = [
    "LINK_ATTRS",
    "SELECTOR_REFUSALS",
    "CompiledJob",
    "CompiledKind",
    "CompiledSubtab",
    "FieldsOf",
    "Guard",
    "Link",
    "PageError",
    "PageResult",
    "Record",
    "Request",
    "helper_names",
    "job_domains",
    "link_base",
    "link_values",
]


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
    # the list's size as the page declares it (`total:`; None: not read, or not found)
    total: int | None = None
    # a selector for a next-looking link of a page whose pagination found no next page
    # (framework/crawl/nextlink.py): the `next` selector may be wrong
    suspect: str | None = None


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
        self.follow = [CompiledFollow(f, guard) for f in kind.follow]
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
        # `total:` is read from the whole page, as a field of a page that is one record
        self.total = (
            FieldExtractor({"total": kind.total}, json=self.is_json, languages=job.languages)
            if kind.total is not None
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
                doc, sel, scopes = self._scopes(response)
                result = self._records(response, sel, scopes, carry, depth, fields)
                result.next_pages = self._next(response, sel, doc, len(scopes), carry, page_no)
                if self.total is not None:
                    result.total = self._total(response, sel, doc)
                # only where a `next` link was wanted and none found: no cost elsewhere
                if not result.next_pages and self.next_xp is not None and sel is not None:
                    pg = self.pagination
                    if pg is not None and (pg.max_pages is None or page_no < pg.max_pages):
                        result.suspect = lookalike(sel, response.url, page_no)
                for link in result.next_pages:  # a next page is as deep as its list
                    link.depth = depth
                if self.forms and sel is not None:
                    result.forms = self._forms(response, sel, result, carry)
                return result
            except (LimitExceeded, NotStorable, SitemapError, EmbeddedError) as exc:
                raise PageError(str(exc)) from None

    def _total(self, response: Response, sel: Selector | None, doc: Any) -> int | None:
        assert self.total is not None
        page_text = response.text if isinstance(response, TextResponse) else None
        got = self.total.extract(
            Scope(url=response.url, selector=sel, json=doc, page_text=page_text)
        )
        value = got.values.get("total")
        # a number that is not a whole count (a `type: number` total) counts as one
        return (
            int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )

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

    def _scopes(self, response: Response) -> tuple[Any, Selector | None, list[Scope]]:
        """The page's JSON document (a JSON page), its tree (else) and its records."""
        base = response.url
        if self.is_json:
            doc = page_json(response)
            scopes = (
                [Scope(url=base, selector=None, json=v) for v in self.each_json.find(doc)]
                if self.each_json is not None
                else [Scope(url=base, selector=None, json=doc)]
            )
            return doc, None, scopes
        sel = page_selector(response, base_url=bool(self.forms))
        page_text = response.text if isinstance(response, TextResponse) else None
        if self.records is not None:
            page = Scope(url=base, selector=sel, page_text=page_text)
            scopes = records_of(self.records, page)
        elif self.each_xp is not None:
            scopes = [
                Scope(url=base, selector=row, page_text=page_text)
                for row in select(sel, self.each_xp, str(self.spec.each or ""))
            ]
        else:
            scopes = [Scope(url=base, selector=sel, page_text=page_text)]
        return None, sel, scopes

    def _records(
        self,
        response: Response,
        sel: Selector | None,
        scopes: list[Scope],
        carry: Mapping[str, Any],
        depth: int,
        fields: FieldsOf | None,
    ) -> PageResult:
        """The page's records and the links its follow rules find."""
        result = PageResult(matched=len(scopes))
        # records that are elements have their own links; data records do not
        per_record_follow = isinstance(self.spec.each, str) and not self.is_json
        links_base = link_base(response) if self.follow and sel is not None else response.url
        for scope in scopes:
            record = self._record(scope, carry, fields)
            if self.spec.emits or self.spec.fields:
                result.records.append(record)
            if per_record_follow and scope.selector is not None:
                for rule in self.follow:
                    urls = rule.urls(scope.selector, links_base, depth)
                    tally(result.follows, rule, depth, len(urls))
                    for url in urls:
                        result.links.append(Link(rule.to, url, dict(record.all_values), depth + 1))
        if not per_record_follow and sel is not None:
            for rule in self.follow:
                urls = rule.urls(sel, links_base, depth)
                tally(result.follows, rule, depth, len(urls))
                for url in urls:
                    result.links.append(Link(rule.to, url, dict(carry), depth + 1))
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
                hrefs = [h for h in (link_text(v, self.guard) for v in found[:1]) if h]
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
