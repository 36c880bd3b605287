"""What one response holds, according to the spec: records, links and next pages.

Pure functions over a Scrapy response: no I/O, no workspace, no Scrapy engine. The
spider turns a :class:`PageResult` into rows and items; this module only reads pages.
Everything that can be compiled (selectors, templates, field extractors) is compiled
once per spec in :class:`CompiledJob`, because this runs for every response.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from parsel import Selector
from scrapy.http import Response, TextResponse

from framework.extract.fields import (
    Extraction,
    FieldExtractor,
    Scope,
    compile_jsonpath,
    looks_like_xpath,
)
from framework.spec.keys import make_dedupe_key, normalise_source_id
from framework.spec.models import (
    Format,
    JobSpec,
    PageKind,
    Pagination,
    SubtabSpec,
)
from framework.spec.template import Template


class PageError(Exception):
    """The response cannot be read as the spec says (not JSON, not text)."""


@dataclass
class Link:
    kind: str
    url: str
    carry: dict[str, Any] = field(default_factory=dict)  # fields carried to the next page


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
    values: dict[str, Any]
    source_id: str | None = None
    dedupe_key: str | None = None
    missing: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    fallbacks: list[tuple[str, int, str]] = field(default_factory=list)
    subtabs: list[Request] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.missing


@dataclass
class PageResult:
    records: list[Record] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    next_pages: list[Link] = field(default_factory=list)


class _CompiledFollow:
    def __init__(self, css: str | None, xpath: str | None, pattern: str | None, to: str):
        self.css, self.xpath, self.to = css, xpath, to
        self.pattern = re.compile(pattern) if pattern else None

    def urls(self, sel: Selector, base: str) -> list[str]:
        if self.css is not None:
            raw = sel.css(self.css).getall()
        elif self.xpath is not None:
            raw = sel.xpath(self.xpath).getall()
        else:
            raw = sel.css("a::attr(href)").getall()
        out: list[str] = []
        for href in raw:
            href = href.strip()
            if not href or href.startswith(("#", "javascript:", "mailto:")):
                continue
            url = urljoin(base, href)
            if self.pattern is not None and not self.pattern.search(url):
                continue
            out.append(url)
        return out


class CompiledSubtab:
    def __init__(self, kind: str, name: str, spec: SubtabSpec) -> None:
        self.kind = f"{kind}.{name}"
        self.name = name
        self.spec = spec
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
        self.fields = FieldExtractor(spec.fields, json=is_json) if spec.fields else None
        self.each_json = (
            compile_jsonpath(spec.each) if spec.each and spec.format is Format.JSON else None
        )

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
        sel = _selector(response)
        if self.spec.each is not None:
            rows = _select(sel, self.spec.each)
            if self.fields is None:
                return [r.xpath("normalize-space(.)").get() for r in rows]
            return [self.fields.extract(Scope(url=response.url, selector=r)).values for r in rows]
        assert self.fields is not None
        return self.fields.extract(Scope(url=response.url, selector=sel)).values


class CompiledKind:
    def __init__(self, job: JobSpec, name: str, kind: PageKind) -> None:
        self.job = job
        self.name = name
        self.spec = kind
        self.is_json = kind.format is Format.JSON
        self.fields = FieldExtractor(kind.fields, json=self.is_json)
        self.id = (
            FieldExtractor({"id": kind.id.model_copy(update={"required": True})}, json=self.is_json)
            if (kind.id is not None)
            else None
        )
        self.each_json = compile_jsonpath(kind.each) if kind.each and self.is_json else None
        self.follow = [_CompiledFollow(f.css, f.xpath, f.pattern, f.to) for f in kind.follow]
        self.subtabs = [CompiledSubtab(name, n, t) for n, t in kind.subtabs.items()]
        self.pagination: Pagination | None = kind.pagination
        self.next_json = (
            compile_jsonpath(kind.pagination.next)
            if kind.pagination is not None and kind.pagination.next and self.is_json
            else None
        )
        self.stop_json = (
            compile_jsonpath(kind.pagination.stop.json_path)
            if kind.pagination is not None and kind.pagination.stop.json_path
            else None
        )

    # ------------------------------------------------------------------ records
    def parse(self, response: Response, carry: Mapping[str, Any], page_no: int) -> PageResult:
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
            sel = _selector(response)
            page_text = response.text if isinstance(response, TextResponse) else None
            scopes = (
                [
                    Scope(url=base, selector=row, page_text=page_text)
                    for row in _select(sel, self.spec.each)
                ]
                if self.spec.each is not None
                else [Scope(url=base, selector=sel, page_text=page_text)]
            )
        per_record_follow = self.spec.each is not None and not self.is_json
        for scope in scopes:
            record = self._record(scope, carry)
            if self.spec.emits or self.spec.fields:
                result.records.append(record)
            if per_record_follow and scope.selector is not None:
                for rule in self.follow:
                    for url in rule.urls(scope.selector, base):
                        result.links.append(Link(rule.to, url, dict(record.values)))
        if not per_record_follow and sel is not None:
            for rule in self.follow:
                for url in rule.urls(sel, base):
                    result.links.append(Link(rule.to, url, dict(carry)))
        result.next_pages = self._next(response, sel, doc, len(scopes), carry, page_no)
        return result

    def _record(self, scope: Scope, carry: Mapping[str, Any]) -> Record:
        ext: Extraction = self.fields.extract(scope)
        values = {**carry, **ext.values}
        record = Record(
            values=values,
            missing=list(ext.missing),
            errors=list(ext.errors),
            fallbacks=list(ext.fallbacks),
        )
        if self.id is not None:
            got = self.id.extract(scope)
            record.fallbacks.extend(got.fallbacks)
            record.errors.extend(got.errors)
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
                hrefs = [v for v in self.next_json.find(doc) if isinstance(v, str) and v]
            elif sel is not None:
                hrefs = _select_values(sel, pg.next)
            else:
                return []
            return [
                Link(self.name, urljoin(response.url, h.strip()), dict(carry)) for h in hrefs[:1]
            ]
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
        return [Link(self.name, url, dict(carry))]


class CompiledJob:
    """A spec compiled for crawling: every kind and sub-tab, ready for responses."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.kinds = {name: CompiledKind(spec, name, k) for name, k in spec.page_kinds().items()}
        self.subtabs = {t.kind: t for k in self.kinds.values() for t in k.subtabs}
        self.start_kind = spec.start_kind()


# ---------------------------------------------------------------------- helpers
def _selector(response: Response) -> Selector:
    if not isinstance(response, TextResponse):
        raise PageError(f"expected a text response, got {type(response).__name__}")
    return response.selector


def _json(response: Response) -> Any:
    try:
        return json.loads(response.body)
    except ValueError as exc:
        raise PageError(f"expected JSON: {exc}") from None


def _select(sel: Selector, expr: str) -> list[Selector]:
    return list(sel.xpath(expr) if looks_like_xpath(expr) else sel.css(expr))


def _select_values(sel: Selector, expr: str) -> list[str]:
    return (sel.xpath(expr) if looks_like_xpath(expr) else sel.css(expr)).getall()


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
