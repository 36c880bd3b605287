"""The tree of an HTML page: what Scrapy's ``response.selector`` builds, from one lxml
parser per thread instead of a new one per page.

parsel (``create_root_node``) makes an ``lxml.html.HTMLParser`` for every document, and
with it a new ``HtmlElementClassLookup``, whose lookup then runs Python for every
element touched (see ``HTML_CLASSES``). Together that is ~10 of the ~85 us it
takes to build and index the demo's 1.2 KB detail page (timed interleaved, see
docs/benchmarks.md); the crawl also skips Scrapy's document-URL lookup where no form
reads it (``base_url``). An lxml parser can parse any number of documents, one at a time
(it is not thread-safe: hence one per thread). Everything else is parsel's, step for step:
the same options (recovering, UTF-8 in, no size limit), the text stripped and its NUL
characters dropped, ``<html/>`` for an empty document, and the same Scrapy ``Selector``
on top, so extraction sees the same tree (``tests/extract/test_tree.py`` compares the two).
"""

from __future__ import annotations

import threading
from typing import Any

from lxml import etree, html
from scrapy.http import HtmlResponse
from scrapy.selector import Selector
from scrapy.utils.response import get_base_url

_local = threading.local()


# lxml.html's element classes (HtmlElementClassLookup's defaults: forms keep their
# FormElement, inputs their InputElement...), looked up in C. lxml.html's own lookup is
# a Python method called for every element Python touches; its answer depends only on
# the (lower-case) tag name, which is all this lookup reads. ``tests/extract/test_tree.py``
# checks both give every element the same class.
HTML_CLASSES = {
    "form": html.FormElement,
    "input": html.InputElement,
    "select": html.SelectElement,
    "textarea": html.TextareaElement,
    "label": html.LabelElement,
}


def _lookup() -> etree.ElementNamespaceClassLookup:
    other = etree.ElementDefaultClassLookup(
        element=html.HtmlElement,
        comment=html.HtmlComment,
        pi=html.HtmlProcessingInstruction,
        entity=html.HtmlEntity,
    )
    lookup = etree.ElementNamespaceClassLookup(other)
    lookup.get_namespace(None).update(HTML_CLASSES)  # HTML has no namespaces
    return lookup


def _parser() -> etree.HTMLParser:
    parser: etree.HTMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        # parsel's options for an HTML document (create_root_node), lxml.html's classes
        parser = etree.HTMLParser(recover=True, encoding="utf-8", huge_tree=True)
        parser.set_element_class_lookup(_lookup())
        _local.parser = parser
    return parser


def html_root(text: str, base_url: str | None = None) -> Any:
    """The lxml tree parsel builds from ``text`` (``Selector(text=..., type="html")``)."""
    body = text.strip().replace("\x00", "").encode("utf-8") or b"<html/>"
    parser = _parser()
    root = etree.fromstring(body, parser=parser, base_url=base_url)
    if root is None:  # nothing but a comment, say: what parsel does
        root = etree.fromstring(b"<html/>", parser=parser, base_url=base_url)
    return root


def html_selector(response: HtmlResponse, *, base_url: bool = True) -> Selector:
    """``response.selector``, built with this thread's parser (once per response).

    ``base_url=False``: the tree is built without the document's URL. Only forms read
    it (lxml's ``FormElement.base_url``, for a form's ``action``); Scrapy's
    ``get_base_url`` (the URL made safe, a ``<base>`` looked for) costs ~25-35 us a
    page."""
    cached = response._cached_selector
    if cached is None:
        url = get_base_url(response) if base_url else None
        cached = Selector(root=html_root(response.text, url), type="html")
        cached.response = response  # as Scrapy's own Selector(response) has it
        response._cached_selector = cached
    return cached
