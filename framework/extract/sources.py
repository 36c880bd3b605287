"""Where a field's value is found: the record's :class:`Scope`, and the sources a field
tries in the order written (css, xpath, re over the element's text, url regex, embedded
JSON, count, json path, pairs, const), compiled once.

Selector results: an attribute or text node gives its string; an *element* gives its
text content (all descendant text), not its HTML. A source gives its first usable value
or all of them, normalised, within the page's caps on matches and characters; it never
converts a value or checks a rule (:mod:`framework.extract.fields` does).
"""

from __future__ import annotations

import json as _json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lxml import etree
from parsel import Selector

from framework.extract.convert import Normaliser
from framework.extract.embedded import EmbeddedDoc, EmbeddedError, RecordSource
from framework.extract.expressions import (
    compile_css,
    compile_jsonpath,
    compile_regex,
    compile_selector,
    compile_xpath,
)
from framework.extract.patterns import SafeRegex, budget
from framework.extract.simplecss import Match, TreeIndex, match_of

__all__ = [
    "Scope",
    "XPathSource",
    "capped",
    "compile_records",
    "compile_source",
    "embedded_doc",
    "records_of",
    "text_of",
]

_STRING = etree.XPath("string()")


@dataclass(slots=True)
class Scope:
    """Where a record's fields are looked for."""

    url: str  # page URL: `url` regex source, absolute URL resolution
    selector: Selector | None  # the record element (or whole page) for css/xpath/re/count
    json: Any = None  # the record's JSON value (or whole doc) for `json` sources
    page_text: str | None = None  # whole response text, for `embedded`
    _text: str | None = field(default=None, init=False, repr=False)
    # the record's elements by id and class, for simple selectors (simplecss.py)
    _index: TreeIndex | None = field(default=None, init=False, repr=False)

    def text(self) -> str:
        """Text content of the scope element (computed once per scope), for `re`."""
        if self._text is None:
            if self.selector is not None:
                root = self.selector.root
                self._text = root if isinstance(root, str) else str(_STRING(root))
            elif isinstance(self.json, str):
                self._text = self.json
            elif self.json is not None:  # a JSON record: its text, as the server sent it
                self._text = _json.dumps(self.json, ensure_ascii=False)
            else:
                self._text = self.page_text or ""
        return self._text


# isinstance with a tuple: ``list | dict`` written in the call builds a union on every
# call (4x slower), and these run for every value of every record
_CONTAINERS = (list, dict)


def _empty(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, _CONTAINERS) and not value)


def _node_value(node: Any) -> Any:
    if isinstance(node, str):
        return node
    if isinstance(node, bool | float):
        return node
    try:
        return str(_STRING(node))
    except TypeError:  # a comment or processing instruction
        return str(getattr(node, "text", "") or "")


class _Source:
    """One compiled source. ``first`` gives the first usable raw value or None,
    ``all`` every usable raw value; strings come back normalised."""

    __slots__ = ("label",)
    label: str

    def first(self, scope: Scope, norm: Normaliser) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:  # pragma: no cover
        raise NotImplementedError


def _norm(value: Any, norm: Normaliser) -> Any:
    if isinstance(value, str) and not norm.identity:
        return norm(value)
    return value


def capped(values: list[Any], label: str) -> list[Any]:
    """``values`` when within the page's caps on matches and characters, else raise."""
    b = budget()
    if len(values) > b.limits.max_matches:
        b.matches(len(values), label)
    total = 0
    for v in values:
        if isinstance(v, str):
            total += len(v)
    if total > b.limits.max_chars:
        b.chars(total, label)
    return values


def _one(value: Any, label: str) -> Any:
    """One value within the page's cap on characters, else raise."""
    if isinstance(value, str):
        b = budget()
        if len(value) > b.limits.max_chars:
            b.chars(len(value), label)
    return value


class XPathSource(_Source):
    __slots__ = ("indexes", "simple", "xp")

    def __init__(self, label: str, xp: etree.XPath) -> None:
        self.label = label
        self.xp = xp
        # a selector of one element test (simplecss.py) is looked up in the record's
        # index when it has one; `indexes`: this source may build it (its extractor has
        # enough such selectors for one walk of the tree to cost less than theirs)
        self.simple: Match | None = match_of(xp.path)
        self.indexes = False

    def _nodes(self, scope: Scope) -> list[Any]:
        sel = scope.selector
        if sel is None:
            return []
        root = sel.root
        if isinstance(root, str) or root is None:
            return []
        result = None
        if self.simple is not None:
            index = scope._index
            # HTML only: an XML text() tells CDATA sections apart, lxml's .text does not
            if index is None and self.indexes and sel.type == "html":
                index = scope._index = TreeIndex(root)
            if index is not None:
                result = self.simple.nodes(index)
        if result is None:
            result = self.xp(root)
            if not isinstance(result, list):
                return [result]
        if len(result) > budget().limits.max_matches:
            budget().matches(len(result), self.label)
        return result

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        for node in self._nodes(scope):
            value = _norm(_node_value(node), norm)
            if not _empty(value):
                return _one(value, self.label)
        return None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        out = []
        for node in self._nodes(scope):
            value = _norm(_node_value(node), norm)
            if not _empty(value):
                out.append(value)
        return capped(out, self.label)


class _CountSource(XPathSource):
    __slots__ = ()

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        if scope.selector is None:
            return None
        return len(self._nodes(scope))

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        value = self.first(scope, norm)
        return [] if value is None else [value]


class _RegexSource(_Source):
    __slots__ = ("group", "on_url", "pattern")

    def __init__(self, label: str, expr: str, *, on_url: bool) -> None:
        self.label = label
        _, self.group = compile_regex(expr)
        self.pattern = SafeRegex(expr)
        self.on_url = on_url

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        text = scope.url if self.on_url else scope.text()
        for m in self.pattern.finditer(text):
            value = _norm(m.group(self.group), norm)
            if not _empty(value):
                return _one(value, self.label)
        return None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        text = scope.url if self.on_url else scope.text()
        out = []
        limit = budget().limits.max_matches
        for m in self.pattern.finditer(text):
            value = _norm(m.group(self.group), norm)
            if not _empty(value):
                out.append(value)
                if len(out) > limit:
                    break  # capped says why
        return capped(out, self.label)


class _JsonSource(_Source):
    """A JSON path into the record's JSON value, or (``doc``: an embedded source) into
    the literal the page holds."""

    __slots__ = ("doc", "path")

    def __init__(self, label: str, expr: str, doc: EmbeddedDoc | None = None) -> None:
        self.label = label
        self.path = compile_jsonpath(expr)
        self.doc = doc

    def _values(self, scope: Scope, many: bool) -> list[Any]:
        # an attribute test, not a method per kind: this runs for every field of every
        # record of a JSON page
        doc = scope.json if self.doc is None else self._document(scope)
        if doc is None:
            return []
        found = self.path.find(doc)
        if many and len(found) == 1 and isinstance(found[0], list):
            return found[0]
        return found

    def _document(self, scope: Scope) -> Any:
        """The embedded literal of the page, parsed once per page (None when it cannot
        be read: the field is optional unless ``required``)."""
        assert self.doc is not None
        if scope.page_text is None and scope.selector is None:
            return None
        root = scope.selector.root if scope.selector is not None else None
        try:
            return self.doc.load(root, scope.page_text)
        except EmbeddedError:
            return None

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        for value in self._values(scope, False):
            value = _norm(value, norm)
            if not _empty(value):
                return _one(value, self.label)
        return None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        out = []
        for value in self._values(scope, True):
            value = _norm(value, norm)
            if not _empty(value):
                out.append(value)
        return capped(out, self.label)


class _EmbeddedSource(_JsonSource):
    """JSON or a JavaScript literal in the page (:mod:`framework.extract.embedded`),
    then a JSON path into it. The parsed document is kept for the page, so every record
    of it parses once. A literal that cannot be read gives no value (a field is
    optional unless ``required``); one over the size bound stops the page."""

    __slots__ = ()

    def __init__(self, label: str, doc: EmbeddedDoc, path: str) -> None:
        super().__init__(label, path, doc)

    @property
    def _doc(self) -> Any:
        assert self.doc is not None
        return self.doc._doc


def embedded_doc(expr: Any) -> EmbeddedDoc:
    """An ``embedded:`` mapping (or model) compiled: where its literal is."""

    def get(key: str) -> Any:
        return expr.get(key) if isinstance(expr, dict) else getattr(expr, key, None)

    script = get("script")
    return EmbeddedDoc(
        script=(str(script), compile_selector(str(script))) if script else None,
        var=str(get("var")) if get("var") else None,
        pattern=str(get("re")) if get("re") else None,
    )


# the cells of a two-column row (th/td) or of a name/value JSON object
_PAIR_KEY_XP = "./*[1]"
_PAIR_VALUE_XP = "./*[last()]"


class _PairsSource(_Source):
    """A definition list or two-column table as ONE mapping: ``each`` element (or JSON
    value) is a pair, ``key`` and ``value`` are read within it. Both are normalised;
    the first value of a repeated key wins; a pair without a key is skipped."""

    __slots__ = ("each_json", "each_xp", "key_json", "key_xp", "value_json", "value_xp")

    def __init__(self, label: str, expr: Mapping[str, Any]) -> None:
        self.label = label
        each, key, value = str(expr.get("each")), expr.get("key"), expr.get("value")
        self.each_json = self.key_json = self.value_json = None
        self.each_xp = self.key_xp = self.value_xp = None
        if each.lstrip().startswith("$"):  # a JSON path: the pairs are JSON values
            self.each_json = compile_jsonpath(each)
            self.key_json = compile_jsonpath(key or "$.name")
            self.value_json = compile_jsonpath(value or "$.value")
        else:
            self.each_xp = compile_selector(each)
            self.key_xp = compile_selector(key or _PAIR_KEY_XP)
            self.value_xp = compile_selector(value or _PAIR_VALUE_XP)

    def _pairs(self, scope: Scope) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        if self.each_json is not None:
            assert self.key_json is not None
            assert self.value_json is not None
            if scope.json is None:
                return out
            found = self.each_json.find(scope.json)
            if len(found) == 1 and isinstance(found[0], list):
                found = found[0]
            capped(found, self.label)
            for v in found:
                k, val = self.key_json.find(v), self.value_json.find(v)
                out.append((k[0] if k else None, val[0] if val else None))
            return out
        assert self.each_xp is not None
        assert self.key_xp is not None
        assert self.value_xp is not None
        sel = scope.selector
        if sel is None or isinstance(sel.root, str) or sel.root is None:
            return out
        nodes = self.each_xp(sel.root)
        nodes = capped(nodes if isinstance(nodes, list) else [nodes], self.label)
        for node in nodes:
            if isinstance(node, str | bool | float):
                continue
            ks, vs = self.key_xp(node), self.value_xp(node)
            ks = ks if isinstance(ks, list) else [ks]
            vs = vs if isinstance(vs, list) else [vs]
            out.append(
                (
                    _node_value(ks[0]) if ks else None,
                    _node_value(vs[0]) if vs else None,
                )
            )
        return out

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        mapping: dict[str, Any] = {}
        total = 0
        for k, v in self._pairs(scope):
            key = _norm(k if isinstance(k, str) else ("" if k is None else text_of(k)), norm)
            if _empty(key) or key in mapping:
                continue
            value = _norm(v, norm)
            mapping[key] = value
            total += len(key) + (len(value) if isinstance(value, str) else 0)
        if total > budget().limits.max_chars:
            budget().chars(total, self.label)
        return mapping or None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        value = self.first(scope, norm)
        return [] if value is None else [value]


class _ConstSource(_Source):
    __slots__ = ("value",)

    def __init__(self, label: str, value: Any) -> None:
        self.label = label
        self.value = value

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        return self.value

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        v = self.value
        return list(v) if isinstance(v, list) else [v]


def compile_source(kind: str, expr: Any) -> _Source:
    if kind == "embedded":
        path = str(expr.get("path", "$") if isinstance(expr, dict) else expr.path)
        where = " ".join(
            f"{k}={v}"
            for k in ("script", "var", "re")
            if (v := expr.get(k) if isinstance(expr, dict) else getattr(expr, k, None))
        )
        label = f"embedded: {where} -> {path}"
        return _EmbeddedSource(label, embedded_doc(expr), path)
    if kind == "pairs":
        return _PairsSource(f"pairs: {text_of(expr)}", expr)
    label = f"{kind}: {expr}"
    if kind == "css":
        return XPathSource(label, compile_css(expr))
    if kind == "xpath":
        return XPathSource(label, compile_xpath(expr))
    if kind == "count":
        return _CountSource(label, compile_selector(expr))
    if kind in ("re", "url"):
        return _RegexSource(label, expr, on_url=kind == "url")
    if kind == "json":
        return _JsonSource(label, expr)
    if kind == "const":
        return _ConstSource(label, expr)
    raise ValueError(f"unknown source kind {kind!r}")


def compile_records(each: Any) -> RecordSource:
    """An ``each`` mapping (:class:`~framework.spec.models.Records`) compiled."""
    label = str(getattr(each, "label", each))
    if each.embedded is not None:
        return RecordSource(
            label=label,
            doc=embedded_doc(each.embedded),
            path=compile_jsonpath(each.embedded.path),
        )
    return RecordSource(label=label, jsonld=each.jsonld, microdata=each.microdata)


def records_of(source: RecordSource, scope: Scope) -> list[Scope]:
    """The scopes of the records ``source`` finds in the page of ``scope``."""
    root = scope.selector.root if scope.selector is not None else None
    found = source.records(root, scope.page_text, scope.url)
    return [Scope(scope.url, None, v, scope.page_text) for v in found]


def text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return _json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
