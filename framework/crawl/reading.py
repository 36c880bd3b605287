"""A response read as the spec says: its tree, its text, its JSON, the elements a
compiled selector picks in it, and :class:`PageError` when it cannot be read so or
reading it goes over an extraction limit. Shared by pages, sub-tabs and links."""

from __future__ import annotations

import json
from typing import Any

from lxml import etree
from parsel import Selector
from scrapy.http import HtmlResponse, Response, TextResponse

from framework.errors import PageLevelError
from framework.extract.patterns import budget, surrogates_replaced
from framework.extract.tree import html_selector

__all__ = ["PageError", "nodes", "page_json", "page_selector", "page_text_of", "select"]


class PageError(PageLevelError):
    """The response cannot be read as the spec says (not JSON, not text), or reading it
    went over an extraction limit (the message names the setting)."""


def page_selector(response: Response, *, base_url: bool = True) -> Selector:
    """The page's tree. ``base_url``: with the document's URL (only forms read it, for
    their ``action``; finding it costs Scrapy's ``get_base_url``, ~25-35 us a page)."""
    if isinstance(response, HtmlResponse):
        # Scrapy's tree, from a parser kept per thread
        return html_selector(response, base_url=base_url)
    if not isinstance(response, TextResponse):
        raise PageError(f"expected a text response, got {type(response).__name__}")
    return response.selector


def page_text_of(response: Response) -> str | None:
    return response.text if isinstance(response, TextResponse) else None


def page_json(response: Response) -> Any:
    try:
        doc = json.loads(response.body)
    except ValueError as exc:
        raise PageError(f"expected JSON: {exc}") from None
    return surrogates_replaced(doc, response.body)


def nodes(sel: Selector, xp: etree.XPath, what: str) -> list[Any]:
    root = sel.root
    if root is None or isinstance(root, str):
        return []
    found = xp(root)
    if not isinstance(found, list):
        return [found]
    if len(found) > budget().limits.max_matches:
        budget().matches(len(found), what)
    return found


def select(sel: Selector, xp: etree.XPath, expr: str) -> list[Selector]:
    """Like ``sel.xpath(expr)`` (or ``.css``), with the framework's compiled selector."""
    return [Selector(root=n, type=sel.type) for n in nodes(sel, xp, f"each: {expr}")]
