"""Follow and next selectors that select something the crawl will never request.

A follow rule's or a next link's selector may select an address (``::attr(href)``,
``/@href``) or a link element, whose ``href`` (``src`` of an ``<iframe>``) the crawl
takes as Scrapy's ``response.follow`` does (:func:`framework.crawl.links.link_values`).
Text (``::text``, ``text()``) or an element that is no link (``div.pager``) is refused
on every page. These warnings say so before a crawl does; they are warnings, not
problems, because a selector is only read here, not run: ``.next`` may be an ``<a>``.
"""

from __future__ import annotations

import re
from typing import Any

import cssselect
from cssselect.parser import CombinedSelector, Element

from framework.errors import SpecProblem
from framework.extract.fields import looks_like_xpath
from framework.spec.checks.kinds import kind_paths
from framework.spec.checks.report import Path_, Report
from framework.spec.load import Document
from framework.spec.models import Format, JobSpec

__all__ = ["link_warnings", "not_a_link"]

# the elements whose address the crawl takes (framework/crawl/links.py's LINK_ATTRS)
_LINKS = frozenset(("a", "link", "area", "iframe"))
# an XPath's last step: a name with predicates, or text()
_LAST_STEP = re.compile(r"(?:^|/)\s*([A-Za-z][\w.-]*|text\(\))\s*(?:\[[^\[\]]*\]\s*)*$")


def link_warnings(spec: JobSpec, doc: Document) -> list[SpecProblem]:
    """A warning per follow or next selector of an HTML kind that selects text or an
    element that is not a link, located at the selector."""
    r = Report(spec, doc)
    paths = kind_paths(spec)
    for name, kind in spec.page_kinds().items():
        if kind.format is not Format.HTML or name not in paths:
            continue
        path = paths[name]
        if path == ("list",) and isinstance(r.raw(("list", "follow")), str):
            rule = kind.follow[0] if kind.follow else None
            if rule is not None and rule.css is not None:
                _warn(r, ("list", "follow"), rule.css, css=True)
        else:
            for i, rule in enumerate(kind.follow):
                rpath = r.item((*path, "follow"), i)
                if rule.css is not None:
                    _warn(r, (*rpath, "css"), rule.css, css=True)
                elif rule.xpath is not None:
                    _warn(r, (*rpath, "xpath"), rule.xpath, css=False)
        pg = kind.pagination
        if pg is not None and pg.next is not None:
            ppath: Path_ = (*path, "next") if path == ("list",) else (*path, "pagination")
            npath = ppath if isinstance(r.raw(ppath), str) else (*ppath, "next")
            _warn(r, npath, pg.next, css=not looks_like_xpath(pg.next))
    return r.problems


def _warn(r: Report, path: Path_, expr: str, *, css: bool) -> None:
    what = not_a_link(expr, css=css)
    if what is not None:
        fix = "::attr(href)" if css else "/@href"
        r.add(
            path,
            f"{expr!r} selects {what}: the crawl requests no such link (it counts them "
            "as links_refused)",
            f"a link element (<a>, <link>, <area>, <iframe>) or its address ({fix})",
        )


def not_a_link(expr: str, *, css: bool) -> str | None:
    """What a follow or next selector selects when that is surely no link ("text",
    "<div> elements"), else None (an address, a link element, or what cannot be told)."""
    return _css(expr) if css else _xpath(expr)


def _css(expr: str) -> str | None:
    try:
        groups = cssselect.parse(expr)
    except cssselect.SelectorError:
        return None  # the expression checks say so
    for sel in groups:
        pseudo = sel.pseudo_element
        if pseudo == "text":
            return "text"
        if pseudo is not None:
            continue  # ::attr(...): an address, or a data-* one the site uses
        tag = _subject(sel.parsed_tree)
        if tag is not None and tag.lower() not in _LINKS:
            return f"<{tag.lower()}> elements"
    return None


def _subject(tree: Any) -> str | None:
    """The element name of what a parsed CSS selector selects (its last compound),
    None for ``*`` (any element: cannot be told)."""
    while True:
        if isinstance(tree, CombinedSelector):  # `a b`, `a > b`: the right side selects
            tree = tree.subselector
        elif isinstance(tree, Element):
            name: str | None = tree.element
            return None if name in (None, "*") else name
        elif hasattr(tree, "selector"):  # a class, id, attribute or pseudo-class of one
            tree = tree.selector
        else:
            return None


def _xpath(expr: str) -> str | None:
    if "|" in expr:
        return None  # a union: each side would need reading; not worth a guess
    m = _LAST_STEP.search(expr.strip())
    if m is None:
        return None  # an attribute (@href), a function, an axis: cannot be told
    step = m.group(1)
    if step == "text()":
        return "text"
    return None if step.lower() in _LINKS else f"<{step.lower()}> elements"
