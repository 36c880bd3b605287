"""A record's sub-tabs: the request each one makes from the record's values, and the
value its response gives (a list of rows with ``each``, else one mapping)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urljoin

from scrapy.http import Response

from framework.crawl.links import Guard
from framework.crawl.reading import PageError, page_json, page_selector, page_text_of, select
from framework.extract.embedded import EmbeddedError
from framework.extract.expressions import compile_jsonpath, compile_selector
from framework.extract.fields import FieldExtractor, Scope, compile_records
from framework.extract.patterns import LimitExceeded, NotStorable, page_budget
from framework.extract.sources import records_of
from framework.spec.models import Format, Records, SubtabSpec
from framework.spec.template import Template

__all__ = ["CompiledSubtab", "Request"]


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
        return self.read(response)[0]

    def read(self, response: Response) -> tuple[Any, list[tuple[str, str]]]:
        """The tab's value, and the values of its rows that failed their type as
        ``(field, message)`` (``Extraction.errors``): each row is a record of the tab's
        kind, so the crawl counts them as a page kind's (Findings.type_failures)."""
        errors: list[tuple[str, str]] = []
        with page_budget(self.guard.limits):
            try:
                part = self._parse(response, errors)
                self.guard.check_record(part, f"the value of sub-tab {self.name!r}")
            except (LimitExceeded, NotStorable, EmbeddedError) as exc:
                raise PageError(str(exc)) from None
        return part, errors

    def _values(self, scope: Scope, errors: list[tuple[str, str]]) -> dict[str, Any]:
        """One row's values; what of them failed their type goes to ``errors``."""
        assert self.fields is not None
        got = self.fields.extract(scope)
        errors.extend(got.errors)
        return got.values

    def _parse(self, response: Response, errors: list[tuple[str, str]]) -> Any:
        if self.spec.format is Format.JSON:
            doc = page_json(response)
            if self.each_json is not None:
                items = self.each_json.find(doc)
                if self.fields is None:
                    return items
                return [
                    self._values(Scope(url=response.url, selector=None, json=it), errors)
                    for it in items
                ]
            return self._values(Scope(url=response.url, selector=None, json=doc), errors)
        sel = page_selector(response, base_url=False)  # a sub-tab has no forms
        if self.records is not None:
            page = Scope(url=response.url, selector=sel, page_text=page_text_of(response))
            found = records_of(self.records, page)
            if self.fields is None:
                return [s.json for s in found]
            return [self._values(s, errors) for s in found]
        if self.each_xp is not None:
            rows = select(sel, self.each_xp, str(self.spec.each or ""))
            if self.fields is None:
                return [r.xpath("normalize-space(.)").get() for r in rows]
            return [self._values(Scope(url=response.url, selector=r), errors) for r in rows]
        return self._values(Scope(url=response.url, selector=sel), errors)


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
