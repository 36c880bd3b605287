"""A spec's expressions, compiled once: CSS (translated to XPath), XPath, value regexes
and JSON paths.

Every one runs bounded (:mod:`framework.extract.patterns`): XPath's EXSLT ``re:``
functions and jsonpath-ng's regex features on the ``regex`` engine under the page's time
budget, JSON paths under a cap on matches. It must not run a field or know about
records: that is :mod:`framework.extract.sources` and :mod:`framework.extract.fields`.
"""

from __future__ import annotations

import re
from typing import Any

from lxml import etree
from parsel.csstranslator import HTMLTranslator

from framework.extract.patterns import (
    EXSLT_REGEXP_FUNCTIONS,
    SafeRegex,
    backtracking_risk,
    budget,
    cached_regex,
    xpath_regex_literals,
)

__all__ = [
    "JsonPath",
    "compile_css",
    "compile_jsonpath",
    "compile_regex",
    "compile_selector",
    "compile_xpath",
    "looks_like_xpath",
]

_EXSLT = {"re": "http://exslt.org/regular-expressions", "set": "http://exslt.org/sets"}
_TRANSLATOR = HTMLTranslator()


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
