"""How a page kind leads to more pages: its follow rules (selectors or URL patterns,
``deny``, a ``to:`` that names a kind), its pagination (a next link, or numbers that
must stop), a sitemap kind's rules, and soft-ban rules; and the parts of them that
would validate as shapes but never run (follow rules on a JSON page, ``max_pages: 1``,
a ``follow`` with no ``detail:``).
"""

from __future__ import annotations

from typing import Any

from framework.spec.checks.expressions import (
    deny,
    expression,
    jsonpath,
    regex,
    selector,
    selectors,
)
from framework.spec.checks.kinds import Graph, subtab_hint
from framework.spec.checks.report import Path_, Report
from framework.spec.models import BlockRule, PageKind

__all__ = ["blocked_rules", "follow_rules", "pagination"]


def follow_rules(r: Report, g: Graph, name: str, raw: dict[str, Any]) -> None:
    """A page kind's ``follow`` (the short form's selector on ``list``)."""
    kind, path, kinds = g.kinds[name], g.paths[name], g.kinds
    if path == ("list",):
        if isinstance(raw.get("follow"), str):
            selector(r, ("list", "follow"), raw["follow"], kind="any")
        short = r.spec.list_
        if short is not None and short.follow and "detail" not in kinds:
            r.add(
                ("list", "follow"),
                "`follow` leads to the detail page, but the spec has no `detail:`",
                "a `detail:` section (its `id` and fields)",
            )
    else:
        for i, rule in enumerate(kind.follow):
            rpath = r.item((*path, "follow"), i)
            selectors(r, rpath, rule.css, rule.xpath)
            if rule.pattern is not None:
                regex(r, (*rpath, "pattern"), rule.pattern)
            deny(r, rpath, rule.deny)
            if kind.format.value == "sitemap" and rule.pattern is None:
                r.add(
                    (*rpath, "css" if rule.css is not None else "xpath"),
                    "a sitemap's follow rules match its URLs, not its markup",
                    "`pattern:` (a regex over the URL)",
                    key=True,
                )
            if rule.to not in kinds:
                r.add(
                    (*rpath, "to"),
                    f"`to: {rule.to}` names no page kind{subtab_hint(rule.to, kinds)}",
                    f"one of: {', '.join(kinds)}",
                )
    if kind.format.value == "json" and kind.follow:
        r.add(
            r.item((*path, "follow"), 0),
            f"follow rules of page kind '{name}' are never applied: links are read from "
            "HTML pages, and it is `format: json`",
            "`pagination: {next: <JSON path>}` for next pages, or `format: html`",
        )
    _sitemap_kind(r, path, kind, raw)


def pagination(r: Report, kind: PageKind, path: Path_, *, json_page: bool) -> None:
    """A next link that compiles, or page numbers (offsets) that stop."""
    pg = kind.pagination
    if pg is None:
        return
    ppath: Path_ = (*path, "next") if path == ("list",) else (*path, "pagination")
    if pg.max_pages == 1:
        r.add(
            (*ppath, "max_pages"),
            "pagination with `max_pages: 1` never fetches a next page",
            "`max_pages` of 2 or more, or no pagination",
        )
    if pg.next is not None:
        next_path = ppath if isinstance(r.raw(ppath), str) else (*ppath, "next")
        expression(r, next_path, pg.next, json_page=json_page)
        return
    if pg.start < 0:
        r.add((*ppath, "start"), f"pagination starts at {pg.start}", "0 or more")
    if pg.step < 1:
        r.add((*ppath, "step"), f"pagination step {pg.step}", "1 or more")
    if pg.stop.json_path is not None:
        if not json_page:
            r.add(
                (*ppath, "stop", "json"),
                "a JSON stop flag on an HTML page",
                "`format: json`",
            )
        else:
            jsonpath(r, (*ppath, "stop", "json"), pg.stop.json_path)
    if not pg.stop.empty and pg.stop.json_path is None and pg.max_pages is None:
        r.add(
            ppath,
            "this pagination never stops",
            "`max_pages`, `stop: {empty: true}` or `stop: {json: ...}`",
        )
    if pg.stop.empty and kind.each is None and not json_page:
        r.add(
            ppath,
            "`stop: empty` needs `each` (what counts as a record)",
            "`each:` on this page kind",
        )


def blocked_rules(r: Report, path: Path_, rules: tuple[BlockRule, ...]) -> None:
    """A soft-ban rule's selectors, URL regex and statuses (crawl/blocking.py)."""
    for i, rule in enumerate(rules):
        rpath = r.item(path, i)
        selectors(r, rpath, rule.css, rule.xpath)
        if rule.url is not None:
            regex(r, (*rpath, "url"), rule.url)
        for code in rule.status:
            if not 100 <= code <= 599:
                r.add((*rpath, "status"), f"status {code}", "an HTTP status, 100 to 599")


def _sitemap_kind(r: Report, path: Path_, kind: PageKind, raw: dict[str, Any]) -> None:
    """A ``format: sitemap`` kind only discovers: its rules map URLs to kinds."""
    if kind.format.value != "sitemap":
        if kind.sitemap is not None:
            r.add(
                (*path, "sitemap"),
                "`sitemap:` on a page that is not a sitemap",
                "`format: sitemap` on this page kind",
                key=True,
            )
        return
    for key in ("each", "id", "fields", "pagination", "subtabs", "required_any"):
        if key in raw:
            r.add(
                (*path, key),
                f"`{key}` on a sitemap page kind (a sitemap holds URLs, not records)",
                "`follow` rules (pattern -> to) and `sitemap` options only",
                key=True,
            )
    # without a `render` of its own a sitemap is fetched over HTTP (spec/render.py)
    if kind.render is not None and kind.render.value != "http":
        r.add((*path, "render"), "a sitemap is not rendered", "`render: http`")
    if not kind.follow:
        r.add(
            path,
            "a sitemap page kind without follow rules discovers no page",
            "`follow: [{pattern: <regex>, to: <kind>}]`",
            key=True,
        )
    if kind.sitemap is not None:
        for i, expr in enumerate(kind.sitemap.follow):
            regex(r, r.item((*path, "sitemap", "follow"), i), expr)
