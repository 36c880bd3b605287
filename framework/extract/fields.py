"""Field extraction: a spec's fields, compiled once, applied to every record.

Owns how a :class:`~framework.spec.models.FieldSpec` finds its value in a record:
sources tried in the order written (css, xpath, re over the element's text, url regex,
embedded JSON, count, json path, const), normalisation, type conversion, the field's
rules (min/max, pattern, enum, lengths, expected: reported as violations, the value
kept) and nested groups of repeated rows. It must not fetch, log, or know about items, queues
or the workspace: it returns an :class:`Extraction` and the spider decides.

Spec expressions run bounded (:mod:`framework.extract.patterns`): regexes (and XPath's
EXSLT ``re:`` functions) on the ``regex`` engine under the page's time budget, selectors
and JSON paths under a cap on matches and characters. Going over a bound raises
:class:`~framework.extract.patterns.LimitExceeded`.

This is the hot path of every crawled record, so everything that can be prepared is
prepared in :class:`FieldExtractor.__init__`: CSS is translated to XPath and compiled
with lxml once, regexes and JSON paths are compiled once, and evaluation works on the
lxml tree directly, without wrapping every match in a parsel ``Selector``. A kind with
several simple selectors (one compound CSS selector each) has them answered from one
index of the record's elements instead of one walk of the tree each
(:mod:`framework.extract.simplecss`).

Selector results: an attribute or text node gives its string; an *element* gives its
text content (all descendant text), not its HTML; a single-valued field takes the
first match that is non-empty after normalisation.
"""

from __future__ import annotations

import json as _json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree
from parsel import Selector
from parsel.csstranslator import HTMLTranslator

from framework.extract.convert import (
    CONVERTERS,
    ConversionError,
    ConvertContext,
    Normaliser,
    date_order_of,
)
from framework.extract.embedded import EmbeddedDoc, EmbeddedError, RecordSource
from framework.extract.patterns import (
    EXSLT_REGEXP_FUNCTIONS,
    SafeRegex,
    backtracking_risk,
    budget,
    cached_regex,
    xpath_regex_literals,
)
from framework.extract.simplecss import Match, TreeIndex, match_of

if TYPE_CHECKING:  # the models import nothing from here; avoid a package import cycle
    from framework.spec.models import FieldSpec

__all__ = [
    "CompiledField",
    "Extraction",
    "FieldExtractor",
    "JsonPath",
    "Scope",
    "compile_css",
    "compile_jsonpath",
    "compile_records",
    "compile_regex",
    "compile_selector",
    "compile_xpath",
    "looks_like_xpath",
    "records_of",
]

# Simple selectors (simplecss.py) of one record kind from which its records' elements
# are indexed. The index costs about three XPath walks (a 1.2 KB page: 25-35 us against
# 10-15 us a walk; 9,000 elements, 6,000 with a class: 10.5 ms against 3.5 ms) and a
# lookup 1-3 us, so three selectors break even: from four on it is a gain.
INDEX_MIN_SELECTORS = 4
_EXSLT = {"re": "http://exslt.org/regular-expressions", "set": "http://exslt.org/sets"}
_TRANSLATOR = HTMLTranslator()
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


@dataclass(slots=True)
class Extraction:
    values: dict[str, Any]  # converted values; absent fields: default, else None ([] for lists)
    missing: list[str]  # required fields that found no usable value
    fallbacks: list[tuple[str, int, str]]  # (field, index, source) a non-first source won
    errors: list[tuple[str, str]]  # (field, message): conversion failed
    # (field, rule, value): a converted value breaks a rule of the spec (min, pattern,
    # expected, ...); the record keeps the value and is stored as invalid, not shipped
    violations: list[tuple[str, str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing


# ---------------------------------------------------------------- compile helpers


def looks_like_xpath(expr: str) -> bool:
    return expr.lstrip().startswith(("/", "(", "./", "../"))


def compile_xpath(expr: str) -> etree.XPath:
    """Compile an XPath (raises ``etree.XPathSyntaxError``/``XPathError``, or
    ``ValueError`` for an ``re:`` pattern known to backtrack catastrophically).

    EXSLT ``re:`` functions are the framework's bounded ones, not lxml's (which run
    Python's ``re`` with no limit): see :mod:`framework.extract.patterns`."""
    ns = {p: uri for p, uri in _EXSLT.items() if f"{p}:" in expr}
    if "re" not in ns:
        return etree.XPath(expr, namespaces=ns, smart_strings=False)
    for pattern in xpath_regex_literals(expr):
        risk = backtracking_risk(pattern)
        if risk is not None:
            raise ValueError(
                f"the re: pattern {pattern!r} {risk}: it can backtrack catastrophically"
            )
    return etree.XPath(
        expr,
        namespaces=ns,
        smart_strings=False,
        regexp=False,
        extensions=EXSLT_REGEXP_FUNCTIONS,
    )


def compile_css(expr: str) -> etree.XPath:
    """Translate CSS (with parsel's ``::text``/``::attr(x)``) and compile it."""
    return compile_xpath(_TRANSLATOR.css_to_xpath(expr))


def compile_selector(expr: str) -> etree.XPath:
    """A selector that may be either: XPath when it looks like one, else CSS."""
    return compile_xpath(expr) if looks_like_xpath(expr) else compile_css(expr)


def compile_regex(expr: str) -> tuple[re.Pattern[str], int | str]:
    """Compile a value regex and pick its group: ``value`` if named, else 1, else 0.
    (Validation's view: Python's ``re``. Extraction runs it as a :class:`SafeRegex`.)"""
    pattern = re.compile(expr)
    group: int | str = "value" if "value" in pattern.groupindex else (1 if pattern.groups else 0)
    return pattern, group


_SIMPLE_STEP = re.compile(
    r"""\.([A-Za-z_][\w-]*)|\[(-?\d+)\]|(\[\*\]|\.\*)|\[['"]([^'"\]]+)['"]\]"""
)


class JsonPath:
    """A compiled JSON path. Plain child/index/wildcard paths (``$.a.b[0].c``,
    ``$.rows[*]``) are walked natively; anything else goes through jsonpath-ng's
    extended parser (filters, slices, recursive descent)."""

    __slots__ = ("_ng", "_seen", "_steps", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._steps = self._simple(text)
        self._ng: Any = None
        self._seen = 0  # matches made by the running evaluation (jsonpath-ng paths)
        if self._steps is None:
            from jsonpath_ng.ext import parse  # slow to import; only when needed

            self._ng = _counted(parse(text), self)

    @staticmethod
    def _simple(text: str) -> list[tuple[int, Any]] | None:
        body = text.strip()
        if body.startswith("$"):
            body = body[1:]
        elif body and body[0] not in ".[":
            body = "." + body
        steps: list[tuple[int, Any]] = []
        pos = 0
        while pos < len(body):
            m = _SIMPLE_STEP.match(body, pos)
            if m is None:
                return None
            name, index, _star, quoted = m.groups()
            if name is not None or quoted is not None:
                steps.append((0, name if name is not None else quoted))
            elif index is not None:
                steps.append((1, int(index)))
            else:
                steps.append((2, None))
            pos = m.end()
        return steps

    def find(self, doc: Any) -> list[Any]:
        """Every match; over ``FRAMEWORK_MAX_MATCHES`` (counting the matches of every
        step, so ``$..*..*..*`` stops early) raises ``LimitExceeded``."""
        if self._steps is None:
            self._seen = 0
            return [m.value for m in self._ng.find(doc)]
        b = budget()
        current = [doc]
        for kind, arg in self._steps:
            nxt: list[Any] = []
            for v in current:
                if kind == 0:
                    if isinstance(v, dict) and arg in v:
                        nxt.append(v[arg])
                elif kind == 1:
                    if isinstance(v, list) and -len(v) <= arg < len(v):
                        nxt.append(v[arg])
                elif isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            current = nxt
            if not current:
                break
            if len(current) > b.limits.max_matches:
                b.matches(len(current), f"JSON path {self.text!r}")
        return current


def _bound_filter_regex(ng_filter: Any) -> None:
    """jsonpath-ng looks its ``=~`` operator up in a module table at every comparison;
    the entry is replaced once per process by one on the bounded engine."""
    if getattr(ng_filter.OPERATOR_MAP["=~"], "bounded", False):
        return

    def search(value: Any, pattern: Any) -> bool:
        return isinstance(value, str) and cached_regex(str(pattern)).search(value) is not None

    search.bounded = True  # type: ignore[attr-defined]
    ng_filter.OPERATOR_MAP["=~"] = search


def _counted(node: Any, owner: JsonPath) -> Any:
    """``node`` (a parsed jsonpath-ng path) with every sub-path counting its matches
    against ``owner``'s running evaluation: a recursive path such as ``$..*..*..*``
    multiplies its matches at every step (millions from 600 bytes of JSON), and the
    count stops it long before memory runs out. The page's time budget applies too.

    jsonpath-ng's two regex features (the filter operator ``=~`` and ``sub(/re/, x)``)
    run on the bounded engine as well; a pattern known to backtrack catastrophically
    is refused here (``ValueError``), as everywhere else."""
    from jsonpath_ng.ext import filter as ng_filter
    from jsonpath_ng.jsonpath import JSONPath

    _bound_filter_regex(ng_filter)

    class Counted(JSONPath):
        __slots__ = ("_inner",)

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def find(self, datum: Any) -> Any:
            found = self._inner.find(datum)
            owner._seen += len(found) if isinstance(found, list) else 1
            b = budget()
            what = f"JSON path {owner.text!r}"
            b.matches(owner._seen, what)
            b.timeout(what)
            return found

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def __str__(self) -> str:
            return str(self._inner)

    def wrap(n: Any) -> Any:
        try:
            attrs = vars(n)
        except TypeError:  # a node without a __dict__ has no sub-paths to wrap
            return Counted(n)
        pattern = None
        if isinstance(n, ng_filter.Expression) and n.op == "=~" and isinstance(n.value, str):
            pattern = n.value
        elif isinstance(attrs.get("regex"), re.Pattern):  # jsonpath_ng.ext.string.Sub
            pattern = n.regex.pattern
            n.regex = SafeRegex(pattern)
        if pattern is not None and (risk := backtracking_risk(pattern)) is not None:
            raise ValueError(f"the pattern {pattern!r} {risk}: it can backtrack catastrophically")
        for name, value in list(attrs.items()):
            if isinstance(value, JSONPath):
                setattr(n, name, wrap(value))
            elif isinstance(value, list):
                setattr(n, name, [wrap(v) if isinstance(v, JSONPath) else v for v in value])
        return Counted(n)

    return wrap(node)


def compile_jsonpath(expr: str) -> JsonPath:
    """Compile a JSON path (raises on a syntax error)."""
    return JsonPath(expr)


# ---------------------------------------------------------------- sources


# isinstance with a tuple: ``list | dict`` written in the call builds a union on every
# call (4x slower), and these run for every value of every record
_CONTAINERS = (list, dict)
_KEPT_AS_IS = (str, dict, list)  # what a string field keeps unconverted


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


def _capped(values: list[Any], label: str) -> list[Any]:
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


class _XPathSource(_Source):
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
        return _capped(out, self.label)


class _CountSource(_XPathSource):
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
                    break  # _capped says why
        return _capped(out, self.label)


class _JsonSource(_Source):
    __slots__ = ("path",)

    def __init__(self, label: str, expr: str) -> None:
        self.label = label
        self.path = compile_jsonpath(expr)

    def _values(self, doc: Any, many: bool) -> list[Any]:
        if doc is None:
            return []
        found = self.path.find(doc)
        if many and len(found) == 1 and isinstance(found[0], list):
            return found[0]
        return found

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        for value in self._values(scope.json, False):
            value = _norm(value, norm)
            if not _empty(value):
                return _one(value, self.label)
        return None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        out = []
        for value in self._values(scope.json, True):
            value = _norm(value, norm)
            if not _empty(value):
                out.append(value)
        return _capped(out, self.label)


class _EmbeddedSource(_JsonSource):
    """JSON or a JavaScript literal in the page (:mod:`framework.extract.embedded`),
    then a JSON path into it. The parsed document is kept for the page, so every record
    of it parses once. A literal that cannot be read gives no value (a field is
    optional unless ``required``); one over the size bound stops the page."""

    __slots__ = ("doc",)

    def __init__(self, label: str, doc: EmbeddedDoc, path: str) -> None:
        super().__init__(label, path)
        self.doc = doc

    @property
    def _doc(self) -> Any:
        return self.doc._doc

    def _document(self, scope: Scope) -> Any:
        if scope.page_text is None and scope.selector is None:
            return None
        root = scope.selector.root if scope.selector is not None else None
        try:
            return self.doc.load(root, scope.page_text)
        except EmbeddedError:
            return None

    def first(self, scope: Scope, norm: Normaliser) -> Any:
        for value in self._values(self._document(scope), False):
            value = _norm(value, norm)
            if not _empty(value):
                return _one(value, self.label)
        return None

    def all(self, scope: Scope, norm: Normaliser) -> list[Any]:
        out = []
        for value in self._values(self._document(scope), True):
            value = _norm(value, norm)
            if not _empty(value):
                out.append(value)
        return _capped(out, self.label)


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
            _capped(found, self.label)
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
        nodes = _capped(nodes if isinstance(nodes, list) else [nodes], self.label)
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
            key = _norm(k if isinstance(k, str) else ("" if k is None else _text_of(k)), norm)
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


def _compile_source(kind: str, expr: Any) -> _Source:
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
        return _PairsSource(f"pairs: {_text_of(expr)}", expr)
    label = f"{kind}: {expr}"
    if kind == "css":
        return _XPathSource(label, compile_css(expr))
    if kind == "xpath":
        return _XPathSource(label, compile_xpath(expr))
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


# ---------------------------------------------------------------- fields

FOUND, NOTHING, FAILED = 0, 1, 2


class _Rules:
    """A field's rules on its converted value; ``check`` names the first one broken."""

    __slots__ = ("enum", "expected", "max", "max_length", "min", "min_length", "pattern")

    def __init__(self, spec: FieldSpec) -> None:
        self.min, self.max = spec.min, spec.max
        self.min_length, self.max_length = spec.min_length, spec.max_length
        self.pattern = SafeRegex(spec.pattern) if spec.pattern is not None else None
        self.enum = spec.enum
        self.expected = spec.expected

    @classmethod
    def of(cls, spec: FieldSpec) -> _Rules | None:
        given = (spec.min, spec.max, spec.min_length, spec.max_length, spec.pattern, spec.enum)
        if all(v is None for v in given) and spec.expected is None:
            return None  # most fields: no per-value work at all
        return cls(spec)

    def check(self, value: Any, many: bool) -> tuple[str, Any] | None:
        """(rule, value) of the first rule broken, or None. ``expected`` compares the whole
        value (a list for ``many``); the others each value of a list."""
        if self.expected is not None and value != self.expected:
            return "expected", value
        for one in value if many else (value,):
            broken = self._one(one)
            if broken is not None:
                return broken, one
        return None

    def _one(self, value: Any) -> str | None:
        if self.min is not None or self.max is not None:
            # a price is bounded by its amount
            n = value["amount"] if isinstance(value, dict) else value
            if isinstance(n, int | float) and not isinstance(n, bool):
                if self.min is not None and n < self.min:
                    return "min"
                if self.max is not None and n > self.max:
                    return "max"
        if isinstance(value, str):
            if self.min_length is not None and len(value) < self.min_length:
                return "min_length"
            if self.max_length is not None and len(value) > self.max_length:
                return "max_length"
        if self.pattern is not None and self.pattern.search(_text_of(value)) is None:
            return "pattern"
        if self.enum is not None and value not in self.enum:
            return "enum"
        return None


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return _json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)


class CompiledField:
    """One field, ready to run: its sources, normaliser, converter and rules."""

    __slots__ = (
        "_child",
        "_convert",
        "_ctx",
        "_each_json",
        "_each_label",
        "_each_records",
        "_each_xp",
        "_needs_base",
        "default",
        "has_default",
        "helper",
        "many",
        "name",
        "norm",
        "required",
        "rules",
        "sources",
    )

    def __init__(
        self, name: str, spec: FieldSpec, json: bool = False, languages: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self.helper = spec.helper
        self.required = spec.required
        self.default = spec.default
        self.has_default = spec.default is not None
        self.many = spec.many
        self.norm = Normaliser(
            strip=spec.strip,
            collapse=spec.collapse,
            lowercase=spec.lowercase,
            replace=tuple((SafeRegex(r.pattern), r.to) for r in spec.replace),
        )
        self.sources = tuple(_compile_source(s.kind, s.expr) for s in spec.sources)
        self.rules = _Rules.of(spec)
        type_name = spec.type.value
        self._convert = None if type_name == "string" else CONVERTERS[type_name]
        self._needs_base = type_name == "url"
        field_languages = spec.languages or languages  # the field's own, else the job's
        self._ctx = ConvertContext(
            date_format=spec.date_format,
            absolute=spec.absolute,
            languages=field_languages,
            date_order=date_order_of(spec.date_order, field_languages)
            if type_name in ("date", "datetime")
            else None,
            magnitude=spec.magnitude,
            pick=spec.pick,
            free=spec.free,
        )
        self._child: FieldExtractor | None = None
        self._each_xp: etree.XPath | None = None
        self._each_json: JsonPath | None = None
        self._each_records: RecordSource | None = None
        each = spec.each
        self._each_label = str(getattr(each, "label", each or ""))
        if spec.fields is not None and each is not None and not isinstance(each, str):
            # rows that are data in the page (embedded JSON, JSON-LD, microdata)
            self._child = FieldExtractor(spec.fields, json=True, languages=languages)
            self._each_records = compile_records(each)
        elif spec.fields is not None and isinstance(each, str):
            # The page's format says what `each` is (validation checks it the same way).
            self._child = FieldExtractor(spec.fields, json=json, languages=languages)
            if json or each.lstrip().startswith("$"):  # "$..." is never a selector
                self._each_json = compile_jsonpath(each)
            else:
                self._each_xp = compile_selector(each)

    def _convert_one(self, value: Any, url: str) -> Any:
        if self._convert is None:
            if isinstance(value, _KEPT_AS_IS):
                return value
            return CONVERTERS["string"](value, self._ctx)
        ctx = self._ctx
        if self._needs_base:
            ctx.base_url = url
        return self._convert(value, ctx)

    def run(self, scope: Scope) -> tuple[int, Any, int]:
        """(FOUND, value, source index) | (NOTHING, None, -1) | (FAILED, message, index).

        A source whose value fails the type or breaks a rule gives way to the next one
        (the page changed what the first source finds: a fallback, reported as drift
        like any other); when none gives a right value the first failure stands: its
        error (FAILED), or its value with the rule it breaks (FOUND, kept as invalid)."""
        if self._child is not None:
            return self._rows(scope)
        norm = self.norm
        failed: tuple[int, Any, int] | None = None
        for index, source in enumerate(self.sources):
            if self.many:
                raw = source.all(scope, norm)
                if not raw:
                    continue
                try:
                    value = [self._convert_one(v, scope.url) for v in raw]
                except ConversionError as exc:
                    failed = failed or (FAILED, str(exc), index)
                    continue
            else:
                value = source.first(scope, norm)
                if value is None or value == "":
                    continue
                try:
                    value = self._convert_one(value, scope.url)
                except ConversionError as exc:
                    failed = failed or (FAILED, str(exc), index)
                    continue
            if self.rules is not None and self.rules.check(value, self.many) is not None:
                failed = failed or (FOUND, value, index)
                continue
            return FOUND, value, index
        return failed or (NOTHING, None, -1)

    def _rows(self, scope: Scope) -> tuple[int, Any, int]:
        child = self._child
        assert child is not None
        children: list[Scope]
        if self._each_records is not None:
            children = records_of(self._each_records, scope)
        elif scope.selector is not None and self._each_xp is not None:
            root = scope.selector.root
            nodes = [] if isinstance(root, str) else self._each_xp(root)
            if isinstance(nodes, list):
                _capped(nodes, f"each: {self._each_label}")
            children = [
                Scope(scope.url, Selector(root=n, type="html"), None, scope.page_text)
                for n in nodes
                if not isinstance(n, str | bool | float)
            ]
        elif scope.json is not None and self._each_json is not None:
            children = [
                Scope(scope.url, None, v, scope.page_text)
                for v in _capped(self._each_json.find(scope.json), f"each: {self._each_label}")
            ]
        else:
            children = []
        if not children:
            return NOTHING, None, -1
        return FOUND, [child.extract(c) for c in children], 0


class FieldExtractor:
    """All fields of one record kind, compiled once; ``extract`` runs them on a scope."""

    __slots__ = ("_fields", "helpers")

    def __init__(
        self,
        fields: Mapping[str, FieldSpec],
        *,
        json: bool = False,
        languages: tuple[str, ...] = (),
    ) -> None:
        """``json``: the records are JSON values (a ``format: json`` page or tab), so a
        nested group's ``each`` is a JSON path; else a CSS/XPath selector. ``languages``:
        the job's, for date fields that name none."""
        self._fields = tuple(
            CompiledField(name, spec, json, languages) for name, spec in fields.items()
        )
        # fields for templates only: never part of the item (see FieldSpec.helper)
        self.helpers = frozenset(cf.name for cf in self._fields if cf.helper)
        simple = [
            src
            for cf in self._fields
            for src in cf.sources
            if isinstance(src, _XPathSource) and src.simple is not None
        ]
        if len(simple) >= INDEX_MIN_SELECTORS:
            for src in simple:
                src.indexes = True

    def extract(self, scope: Scope) -> Extraction:
        values: dict[str, Any] = {}
        missing: list[str] = []
        fallbacks: list[tuple[str, int, str]] = []
        errors: list[tuple[str, str]] = []
        violations: list[tuple[str, str, Any]] = []
        for cf in self._fields:
            outcome, value, index = cf.run(scope)
            if outcome == FOUND:
                name = cf.name
                if cf._child is not None:
                    rows = []
                    for i, sub in enumerate(value):
                        rows.append(sub.values)
                        prefix = f"{name}[{i}]."
                        missing.extend(prefix + m for m in sub.missing)
                        fallbacks.extend((prefix + f, j, s) for f, j, s in sub.fallbacks)
                        errors.extend((prefix + f, msg) for f, msg in sub.errors)
                        violations.extend((prefix + f, r, v) for f, r, v in sub.violations)
                    values[name] = rows
                    continue
                values[name] = value
                if index > 0:
                    fallbacks.append((name, index, cf.sources[index].label))
                if cf.rules is not None:
                    broken = cf.rules.check(value, cf.many)
                    if broken is not None:
                        violations.append((name, *broken))
            elif outcome == NOTHING:
                if cf.rules is not None and cf.rules.expected is not None and not cf.has_default:
                    # a vanished identity value breaks `expected`: never taken as agreeing
                    violations.append((cf.name, "expected", None))
                if cf.has_default:
                    values[cf.name] = cf.default
                else:
                    # Every record has every field: an absent value is an explicit null
                    # (an empty list for lists), never invented, and the shape is stable.
                    values[cf.name] = [] if cf.many or cf._child is not None else None
                    if cf.required:
                        missing.append(cf.name)
            else:
                values[cf.name] = None
                errors.append((cf.name, value))
                if cf.required:
                    missing.append(cf.name)
        return Extraction(values, missing, fallbacks, errors, violations)
