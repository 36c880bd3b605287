"""A fast path for the commonest selectors: one element test, answered from an index.

Most field selectors in specs are one compound CSS selector: ``h1::text``,
``.price::text``, ``#sku::text``, ``td.amount``, ``[itemprop=name]::attr(content)``.
Translated, each is an XPath that walks every element under the record and tests it
(``descendant-or-self::*[@class and contains(...)]/text()``): ten such fields on a detail
page are ten walks of the same tree, the largest part of a page's extraction (see
docs/benchmarks.md, "Simple selectors"). Here the tree is walked once per record, into an
index by id and class token, and each such selector is a lookup.

The fast path is derived from the *translated XPath*, not from the CSS: :func:`match_of`
recognises only the exact forms parsel's ``HTMLTranslator`` writes for a tag, ``#id``,
``.class``, ``[attr]`` and ``[attr=value]`` (with quote-free values), joined by ``and``
(and grouped by parentheses, which a conjunction makes moot),
followed by ``/text()``, ``/@name`` or nothing, and returns None for everything else,
which keeps its compiled XPath. Each test is the XPath's own meaning: a name test on the
element's tag, string equality on an attribute, and the class test's token match after
``normalize-space`` (which splits on XPath's four whitespace characters only). Results come
in document order, as XPath gives them; when matched elements nest, their text nodes
interleave, so such a ``/text()`` result is left to the XPath (:meth:`Match.nodes`
returns None). ``tests/extract/test_simplecss.py`` compares both ways on generated and real pages.
"""

from __future__ import annotations

import re
from typing import Any

from lxml import etree

__all__ = ["Match", "TreeIndex", "match_of"]

_NAME = r"[A-Za-z_][\w.-]*"
_LITERAL = r"'([^'\"]*)'"
_CLASS = re.compile(
    rf"@class and contains\(@class, {_LITERAL}\) and "
    rf"contains\(concat\(' ', normalize-space\(@class\), ' '\), ' ([^'\" ]*) '\)"
)
_EQUALS = re.compile(rf"@({_NAME}) = {_LITERAL}")
_EXISTS = re.compile(rf"@({_NAME})")
_WHOLE = re.compile(rf"descendant-or-self::(\*|{_NAME})(?:\[(.*)\])?(/text\(\)|/@{_NAME})?")
# XPath's whitespace (normalize-space): space, tab, carriage return, line feed; not the
# other characters str.split() would split on
_XPATH_SPACE = str.maketrans("\t\r\n", "   ")


def _tokens(value: str) -> list[str]:
    """A class attribute's tokens as the translator's class test sees them (empty
    strings between repeated spaces included: no class is named "")."""
    return value.translate(_XPATH_SPACE).split(" ")


class Match:
    """One element test and what to take from the matched elements."""

    __slots__ = ("attrs", "classes", "element_id", "exists", "tag", "take", "tests")

    def __init__(
        self,
        tag: str | None,
        element_id: str | None,
        classes: tuple[str, ...],
        attrs: tuple[tuple[str, str], ...],
        exists: tuple[str, ...],
        take: str | None,
    ) -> None:
        self.tag = tag
        self.element_id = element_id
        self.classes = classes
        self.attrs = attrs  # (name, value): @name = 'value'
        self.exists = exists  # @name
        self.take = take  # "text()", an attribute name, or None: the element
        # whether the candidates need a test beyond the index key they came from
        # (by id, else by first class, else by tag, else every element)
        if element_id is not None:
            self.tests = bool(tag is not None or classes or attrs or exists)
        elif classes:
            self.tests = bool(tag is not None or classes[1:] or attrs or exists)
        else:
            self.tests = bool(attrs or exists)

    def _test(self, el: Any) -> bool:
        if self.tag is not None and el.tag != self.tag:
            return False
        get = el.get
        if self.element_id is not None and get("id") != self.element_id:
            return False
        if self.classes:
            cls = get("class")
            if cls is None:
                return False
            tokens = _tokens(cls)
            if any(c not in tokens for c in self.classes):
                return False
        for name, value in self.attrs:
            if get(name) != value:
                return False
        return all(get(name) is not None for name in self.exists)

    def nodes(self, index: TreeIndex) -> list[Any] | None:
        """What the XPath would return, in its order; None: ask the XPath."""
        if self.element_id is not None:
            candidates = index.by_id.get(self.element_id, ())
        elif self.classes:
            candidates = index.by_class.get(self.classes[0], ())
        else:
            candidates = index.by_tag(self.tag)
        matched = [el for el in candidates if self._test(el)] if self.tests else list(candidates)
        take = self.take
        if take is None or not matched:
            return matched
        if take != "text()":
            out = []
            for el in matched:
                value = el.get(take)
                if value is not None:
                    out.append(value)
            return out
        if len(matched) > 1 and _nested(matched):
            return None
        texts: list[Any] = []
        for el in matched:
            if el.text is not None:
                texts.append(el.text)
            for child in el:  # comments and processing instructions have tails too
                if child.tail is not None:
                    texts.append(child.tail)
        return texts


def _nested(elements: list[Any]) -> bool:
    """Whether one of ``elements`` is inside another."""
    members = set(elements)
    for el in elements:
        parent = el.getparent()
        while parent is not None:
            if parent in members:
                return True
            parent = parent.getparent()
    return False


# the elements an index keys: those with a class or an id (one walk, in C)
_KEYED = etree.XPath("descendant-or-self::*[@class or @id]")


class TreeIndex:
    """The elements of a record (its root and every element under it, in document
    order) that have an id or a class, by id and by class token; the others by tag
    when a selector asks. Built once per record, read by every simple selector."""

    __slots__ = ("_by_tag", "_root", "by_class", "by_id")

    def __init__(self, root: Any) -> None:
        self._root = root
        self._by_tag: dict[str | None, list[Any]] = {}
        self.by_id: dict[str, list[Any]] = {}
        self.by_class: dict[str, list[Any]] = {}
        for el in _KEYED(root):
            get = el.get
            cls = get("class")
            if cls:
                for token in _tokens(cls):
                    if not token:
                        continue
                    found = self.by_class.get(token)
                    if found is None:
                        self.by_class[token] = [el]
                    elif found[-1] is not el:  # class="a a": the element once
                        found.append(el)
            element_id = get("id")
            if element_id is not None:
                found = self.by_id.get(element_id)
                if found is None:
                    self.by_id[element_id] = [el]
                else:
                    found.append(el)

    def by_tag(self, tag: str | None) -> list[Any]:
        """The elements named ``tag`` (None: every element), in document order."""
        found = self._by_tag.get(tag)
        if found is None:
            it = self._root.iter(tag) if tag is not None else self._root.iter(etree.Element)
            found = self._by_tag[tag] = list(it)
        return found


def match_of(xpath: str) -> Match | None:
    """The :class:`Match` an XPath written by parsel's CSS translator stands for, or
    None when it is anything else (it then runs as XPath)."""
    whole = _WHOLE.fullmatch(xpath)
    if whole is None:
        return None
    name, conditions, take = whole.groups()
    tag = None if name == "*" else name
    element_id: str | None = None
    classes: list[str] = []
    attrs: list[tuple[str, str]] = []
    exists: list[str] = []
    rest = conditions or ""
    depth = 0  # the translator parenthesises each term; with only `and`, grouping is moot
    while rest:
        while rest.startswith("("):
            depth += 1
            rest = rest[1:]
        found = _CLASS.match(rest)
        if found is not None:
            if found.group(1) != found.group(2) or not found.group(1):
                return None
            classes.append(found.group(1))
        else:
            found = _EQUALS.match(rest)
            if found is not None:
                if found.group(1) == "id" and element_id is None:
                    element_id = found.group(2)
                else:
                    attrs.append((found.group(1), found.group(2)))
            else:
                found = _EXISTS.match(rest)
                if found is None:
                    return None
                exists.append(found.group(1))
        rest = rest[found.end() :]
        while rest.startswith(")"):
            depth -= 1
            rest = rest[1:]
            if depth < 0:
                return None
        if rest.startswith(" and "):
            rest = rest[len(" and ") :]
            if not rest:
                return None
        elif rest:
            return None
    if depth != 0:
        return None
    if take is not None and take != "/text()":
        take = take[len("/@") :]
    elif take == "/text()":
        take = "text()"
    return Match(tag, element_id, tuple(classes), tuple(attrs), tuple(exists), take)
