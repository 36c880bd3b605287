"""A next page the spec's ``next`` selector missed: the ``pagination_suspect`` check.

A ``next`` selector that matches nothing ends every list at its first page, and the
crawl would drain with exit 0 on half a harvest. The last page of a list has no next
page either, so "no next page" alone says nothing; a page that has none *and* carries a
link that looks like one (``rel=next``, an ``<a>`` or ``<button>`` whose text is Next,
``»``, U+203A (a single angle quote) or the next page's number, an ``href`` with
``page=N+1``) is suspect, and the crawl says so with a selector for that link.

:func:`lookalike` is one XPath compiled at import (the same for every kind, the next
page's number a variable), asked only about the pages of a kind with a ``next``
pagination where that found no next page, so a page that has one costs nothing.
A look-alike that is disabled (``disabled``, ``aria-disabled``, a
``disabled`` class on it or its parent), that has no address (``#``, ``javascript:``),
that points to the page itself, or to a page number not after this one, is the end of
a list, not a suspect. Pure: a parsed page in, a suggestion out.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urljoin, urlsplit

from lxml import etree
from parsel import Selector

__all__ = ["lookalike", "suggestion"]

# a word of the class list or rel list, as XPath 1.0 can ask it
_HAS = "contains(concat(' ', normalize-space({attr}), ' '), ' {word} ')"
_REL_NEXT = _HAS.format(attr="@rel", word="next")
# the visible text (or title / aria-label) of a next control, lowercased
_TEXT = "translate(normalize-space(string(.)), 'NEXTPAG', 'nextpag')"
_LABEL = "translate(normalize-space(concat(@aria-label, ' ', @title)), 'NEXTPAG', 'nextpag')"
_ANGLE = "\u203a"  # a single right-pointing angle quotation mark
_NEXT_WORDS = ("next", "next page", "next »", f"next {_ANGLE}", "next >", "»", _ANGLE, ">>", ">")
_TEXT_IS_NEXT = " or ".join(f"{_TEXT} = '{w}'" for w in _NEXT_WORDS)
# $n: the next page's number (this page's + 1), as text
_CANDIDATES = etree.XPath(
    f"//link[{_REL_NEXT}][@href]"
    f" | //a[{_REL_NEXT}]"
    f" | //a[{_TEXT_IS_NEXT} or {_TEXT} = $n or {_TEXT} = concat('page ', $n)"
    f" or starts-with({_LABEL}, 'next')]"
    f" | //button[{_TEXT_IS_NEXT} or starts-with({_LABEL}, 'next')]"
    " | //a[contains(@href, concat('page=', $n))]"
)
_PAGE_PARAM = re.compile(r"^(page|p|pg|pagenum|page_?no|pagenumber)$", re.IGNORECASE)
_CLASS_WORD = re.compile(r"^[A-Za-z_][\w-]*$")


def lookalike(sel: Selector, url: str, page_no: int) -> str | None:
    """A selector for the next-looking link of a page (page ``page_no`` of its list, at
    ``url``) that has no next page by the spec; None when it has none, or only the
    end of a list."""
    root = sel.root
    if not isinstance(root, etree._Element):
        return None
    n = str(page_no + 1)
    found = _CANDIDATES(root, n=n)
    best: tuple[int, etree._Element] | None = None
    for el in found if isinstance(found, list) else ():
        if not isinstance(el, etree._Element) or _disabled(el):
            continue
        if el.tag != "button" and not _goes_on((el.get("href") or "").strip(), url, page_no):
            continue
        rank = _rank(el)
        if best is None or rank < best[0]:  # the first of the best kind, in page order
            best = (rank, el)
    return suggestion(best[1], n) if best is not None else None


def _rank(el: etree._Element) -> int:
    """How surely ``el`` is the next link: ``rel=next`` (0), a next word in its text or
    classes or its parent's (1), a page number or a ``page=`` address (2)."""
    if "next" in (el.get("rel") or "").split():
        return 0
    parent = el.getparent()
    words = " ".join(
        [
            " ".join("".join(el.itertext()).split()).lower(),
            el.get("class") or "",
            "" if parent is None else parent.get("class") or "",
        ]
    ).lower()
    return 1 if "next" in words or "»" in words or _ANGLE in words else 2


def _disabled(el: etree._Element) -> bool:
    for node in (el, el.getparent()):
        if node is None:
            continue
        if node.get("disabled") is not None or node.get("aria-disabled") == "true":
            return True
        if "disabled" in (node.get("class") or "").split():
            return True
    return False


def _goes_on(href: str, url: str, page_no: int) -> bool:
    """Whether ``href`` leads on from the page at ``url`` (page ``page_no`` of its list):
    an address, not this page, not a page number already passed."""
    if not href or href.startswith("#") or href.lower().startswith("javascript:"):
        return False
    target = urljoin(url, href).split("#", 1)[0]
    if target == url.split("#", 1)[0]:
        return False
    for key, value in parse_qsl(urlsplit(target).query):
        if _PAGE_PARAM.match(key) and value.isdigit() and int(value) <= page_no:
            return False
    return True


def suggestion(el: etree._Element, n: str) -> str:
    """A selector a spec can take for ``el``: by ``rel``, its id, its class or its
    parent's, else by its text (an XPath)."""
    tag = str(el.tag)
    attr = "" if tag == "button" else "::attr(href)"
    rel = (el.get("rel") or "").split()
    if "next" in rel:
        return f"{tag}[rel=next]{attr}"
    if el.get("id") and _CLASS_WORD.match(el.get("id") or ""):
        return f"{tag}#{el.get('id')}{attr}"
    words = [c for c in (el.get("class") or "").split() if _CLASS_WORD.match(c)]
    # a generic class (every page link has it) says less than the parent's own
    parent = el.getparent()
    pwords = [] if parent is None else (parent.get("class") or "").split()
    pwords = [c for c in pwords if _CLASS_WORD.match(c)]
    if any("next" in c.lower() for c in words):
        return f"{tag}.{next(c for c in words if 'next' in c.lower())}{attr}"
    if parent is not None and any("next" in c.lower() for c in pwords):
        cls = next(c for c in pwords if "next" in c.lower())
        return f"{parent.tag}.{cls} {tag}{attr}"
    text = " ".join("".join(el.itertext()).split())
    if text and "'" not in text:
        return f"//{tag}[normalize-space()='{text}']" + ("" if tag == "button" else "/@href")
    return f"//{tag}[contains(@href, 'page={n}')]/@href"
