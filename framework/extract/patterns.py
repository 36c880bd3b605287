"""What a spec's expressions may cost on one page, and the one engine spec regexes run on.

A spec is data that people share; the pages it runs on come from anyone. This module
owns the bounds that keep one page from taking the crawl down:

* **time**: every spec regex (``re``/``url`` sources, ``embedded``, ``replace``, follow
  ``pattern``, and XPath's EXSLT ``re:test``/``re:match``/``re:replace``) runs on the
  `regex <https://pypi.org/project/regex/>`_ engine with a timeout drawn from the page's
  budget (``FRAMEWORK_EXTRACT_TIMEOUT`` seconds of CPU time for everything one page
  runs: the regex engine counts its timeout in process CPU time, so the budget does
  too, and a loaded machine does not turn into false timeouts). Python's
  ``re`` cannot be interrupted: ``(a+)+$`` on forty characters would never return, and a
  signal cannot stop it either;
* **size**: how many matches one selector or JSON path may return, how many characters,
  and how large one record may be (``FRAMEWORK_MAX_MATCHES``, ``FRAMEWORK_MAX_MATCH_CHARS``,
  ``FRAMEWORK_MAX_ITEM_BYTES``);
* **shape**: :func:`backtracking_risk` names patterns known to backtrack catastrophically
  (nested quantifiers, identical alternatives), so ``validate`` refuses them up front.

Going over a bound raises :class:`LimitExceeded`, which names the setting; the page
becomes a typed ``parse`` error and the crawl goes on. The spec's regex *syntax* stays
Python's ``re`` (that is what validation reports on); only the engine that runs it is
``regex``, in its ``re``-compatible mode.

The budget of the page being parsed is module state (:func:`page_budget`): Scrapy calls
spider callbacks one at a time on one thread, and a page's extraction never yields.
This module must not log, fetch, or know about rows, items or the workspace.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from re import _constants as sre_c  # type: ignore[attr-defined]  # stdlib's own parser
from re import _parser as sre_parse  # type: ignore[attr-defined]  # (used read-only)
from typing import Any

import regex
from lxml import etree

from framework.errors import PageLevelError
from framework.settings import default

__all__ = [
    "EXSLT_REGEXP_FUNCTIONS",
    "EXSLT_REGEXP_NS",
    "LimitExceeded",
    "Limits",
    "NotStorable",
    "SafeRegex",
    "backtracking_risk",
    "budget",
    "cached_regex",
    "page_budget",
    "record_size",
    "search_bounded",
    "surrogates_replaced",
    "xpath_regex_literals",
]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one page's extraction (settings named in the comments)."""

    # CPU seconds of regex work per page
    timeout: float = default("FRAMEWORK_EXTRACT_TIMEOUT")
    max_matches: int = default("FRAMEWORK_MAX_MATCHES")  # per selector / JSON path run
    max_chars: int = default("FRAMEWORK_MAX_MATCH_CHARS")  # text one selector may return
    max_item_bytes: int = default("FRAMEWORK_MAX_ITEM_BYTES")  # one record, as stored JSON

    def __post_init__(self) -> None:
        # zero would refuse every page (or, for the time, every regex): never meant
        for name, value in (
            ("FRAMEWORK_EXTRACT_TIMEOUT", self.timeout),
            ("FRAMEWORK_MAX_MATCHES", self.max_matches),
            ("FRAMEWORK_MAX_MATCH_CHARS", self.max_chars),
            ("FRAMEWORK_MAX_ITEM_BYTES", self.max_item_bytes),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be greater than 0, got {value!r}")


class LimitExceeded(PageLevelError):
    """Extraction went over a bound; the message names the setting that sets it."""


class Budget:
    """The running page's limits and regex deadline, in CPU seconds of the thread that
    extracts (inf: no page; None: a page whose first regex has not run yet).

    The clock starts at the page's first regex, not when the page does: most pages run
    none, and reading a CPU clock is a system call. It is the thread's clock, not the
    process's: the crawl's other threads (the group commit, the checkpointer) must not
    spend a page's budget. (A cProfile of `--processes 2` had put 1.16 s of 3,300 pages
    in ``time.process_time()``; that was wall time, the process descheduled on busy
    cores, not CPU: the change bought no CPU measurable in the benches.)"""

    __slots__ = ("deadline", "limits")

    def __init__(self, limits: Limits, deadline: float | None = float("inf")) -> None:
        self.limits = limits
        self.deadline = deadline

    def timeout(self, what: str) -> float | None:
        """Seconds left for one regex call (None outside a page), or raise when spent."""
        deadline = self.deadline
        if deadline == float("inf"):
            return None
        now = time.thread_time()
        if deadline is None:  # the page's first regex: its clock starts now
            deadline = self.deadline = now + self.limits.timeout
        left = deadline - now
        if left <= 0:
            raise self.spent(what)
        return left

    def spent(self, what: str) -> LimitExceeded:
        return LimitExceeded(
            f"extraction ran over FRAMEWORK_EXTRACT_TIMEOUT ({self.limits.timeout:g}s of CPU "
            f"per page) in {what}; a pattern that backtracks this much needs rewriting"
        )

    def matches(self, n: int, what: str) -> None:
        if n > self.limits.max_matches:
            raise LimitExceeded(
                f"{what} returned {n} matches, over FRAMEWORK_MAX_MATCHES "
                f"({self.limits.max_matches})"
            )

    def chars(self, n: int, what: str) -> None:
        if n > self.limits.max_chars:
            raise LimitExceeded(
                f"{what} returned {n} characters, over FRAMEWORK_MAX_MATCH_CHARS "
                f"({self.limits.max_chars})"
            )


_NO_PAGE = Budget(Limits())
_active: Budget = _NO_PAGE


def budget() -> Budget:
    """The budget of the page being parsed (default limits, no deadline, outside one)."""
    return _active


@contextmanager
def page_budget(limits: Limits) -> Iterator[Budget]:
    """Run one page's extraction under ``limits``; the time budget starts with its
    first regex (see :class:`Budget`)."""
    global _active
    previous = _active
    _active = Budget(limits, None)
    try:
        yield _active
    finally:
        _active = previous


# ------------------------------------------------------------------- regexes

_FLAGS: tuple[tuple[int, int], ...] = (
    (re.IGNORECASE, regex.IGNORECASE),
    (re.MULTILINE, regex.MULTILINE),
    (re.DOTALL, regex.DOTALL),
    (re.VERBOSE, regex.VERBOSE),
    (re.ASCII, regex.ASCII),
)


class SafeRegex:
    """A spec regex: Python ``re`` syntax, run by ``regex`` under the page's time budget.

    Offers the part of ``re.Pattern`` the framework uses (``search``, ``finditer``,
    ``sub``, ``groups``, ``groupindex``, ``pattern``)."""

    __slots__ = ("_rx", "groupindex", "groups", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        re.compile(pattern, flags)  # the spec's syntax is re's: re.error is the error
        rflags = regex.VERSION0  # re-compatible semantics
        for ours, theirs in _FLAGS:
            if flags & ours:
                rflags |= theirs
        try:
            self._rx = regex.compile(pattern, rflags)
        except regex.error as exc:  # the rare pattern re accepts and regex does not
            raise re.error(str(exc), pattern) from None
        self.pattern = pattern
        self.groups: int = self._rx.groups
        self.groupindex: dict[str, int] = dict(self._rx.groupindex)

    def _what(self) -> str:
        return f"regex {self.pattern!r}"

    def search(self, text: str) -> Any:
        b = _active
        try:
            return self._rx.search(text, timeout=b.timeout(self._what()))
        except TimeoutError:
            raise b.spent(self._what()) from None

    def finditer(self, text: str) -> Iterator[Any]:
        b = _active
        try:
            yield from self._rx.finditer(text, timeout=b.timeout(self._what()))
        except TimeoutError:
            raise b.spent(self._what()) from None

    def findall(self, text: str) -> list[Any]:
        b = _active
        try:
            return list(self._rx.findall(text, timeout=b.timeout(self._what())))
        except TimeoutError:
            raise b.spent(self._what()) from None

    def sub(self, repl: str, text: str, count: int = 0) -> str:
        b = _active
        try:
            return str(self._rx.sub(repl, text, count=count, timeout=b.timeout(self._what())))
        except TimeoutError:
            raise b.spent(self._what()) from None

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r})"


def search_bounded(rx: SafeRegex, text: str, limits: Limits) -> bool:
    """Does ``rx`` match in ``text``, within a budget of its own (``limits``: the job's
    ``FRAMEWORK_EXTRACT_TIMEOUT``)? For a spec regex that judges a URL outside any page's
    extraction (a ``blocked`` rule, ``login.expired.url``): raises :class:`LimitExceeded`
    when spent, as a field's regex would."""
    with page_budget(limits):
        return rx.search(text) is not None


# ------------------------------------------------- EXSLT regular expressions

# lxml implements these three with Python's `re` and no way to bound them; XPaths
# compiled by the framework switch lxml's own off (regexp=False) and use these, which
# keep lxml's semantics (flags 'i' and 'g', <match> elements) on the bounded engine.
EXSLT_REGEXP_NS = "http://exslt.org/regular-expressions"
_exslt_cache: dict[tuple[str, bool], SafeRegex] = {}
_EXSLT_CACHE_MAX = 256  # patterns can come from the page itself (an attribute value)


def _xpath_string(value: Any) -> str:
    """An XPath argument as a string, as lxml's EXSLT functions take it: a node-set
    gives the string value of its first node."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if not value:
            return ""
        first = value[0]
        if isinstance(first, str):
            return first
        if isinstance(first, etree._Element):
            return "".join(first.itertext())
        return str(first)
    return str(value)


def cached_regex(pattern: str, ignore_case: bool = False) -> SafeRegex:
    """A :class:`SafeRegex` for a pattern met while evaluating an expression (an XPath
    ``re:`` argument, a JSON path ``=~``), compiled once."""
    key = (pattern, ignore_case)
    compiled = _exslt_cache.get(key)
    if compiled is None:
        if len(_exslt_cache) >= _EXSLT_CACHE_MAX:
            _exslt_cache.clear()
        compiled = SafeRegex(pattern, re.IGNORECASE if ignore_case else 0)
        _exslt_cache[key] = compiled
    return compiled


def _exslt_compile(pattern: Any, flags: str) -> SafeRegex:
    return cached_regex(_xpath_string(pattern), "i" in flags)


def _exslt_test(_ctx: Any, s: Any, pattern: Any, flags: Any = "") -> bool:
    f = _xpath_string(flags)
    return _exslt_compile(pattern, f).search(_xpath_string(s)) is not None


def _exslt_match(_ctx: Any, s: Any, pattern: Any, flags: Any = "") -> Any:
    f = _xpath_string(flags)
    rx = _exslt_compile(pattern, f)
    text = _xpath_string(s)
    results: list[Any]
    if "g" in f:
        results = rx.findall(text)
    else:
        m = rx.search(text)
        results = [] if m is None else [m.group(), *m.groups("")]
    if not results:
        return ()
    root = etree.Element("matches")
    out = []
    for value in results:
        elem = etree.SubElement(root, "match")
        elem.text = "".join(value) if isinstance(value, tuple) else value
        out.append(elem)
    return out


def _exslt_replace(_ctx: Any, s: Any, pattern: Any, flags: Any, replacement: Any) -> str:
    f = _xpath_string(flags)
    rx = _exslt_compile(pattern, f)
    return rx.sub(_xpath_string(replacement), _xpath_string(s), count=0 if "g" in f else 1)


EXSLT_REGEXP_FUNCTIONS = {
    (EXSLT_REGEXP_NS, "test"): _exslt_test,
    (EXSLT_REGEXP_NS, "match"): _exslt_match,
    (EXSLT_REGEXP_NS, "replace"): _exslt_replace,
}


def xpath_regex_literals(expr: str) -> list[str]:
    """The patterns written as string literals in an XPath's ``re:test``/``re:match``/
    ``re:replace`` calls (their second argument), for validation."""
    out: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch in "'\"":  # skip a literal: XPath 1.0 has no escapes inside them
            end = expr.find(ch, i + 1)
            i = n if end < 0 else end + 1
            continue
        m = _RE_CALL.match(expr, i)
        if m is None or (i > 0 and (expr[i - 1].isalnum() or expr[i - 1] in "_-.:")):
            i += 1
            continue
        args = _call_args(expr, m.end())
        if len(args) >= 2:
            arg = args[1].strip()
            if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "'\"" and arg[0] not in arg[1:-1]:
                out.append(arg[1:-1])
        i = m.end()
    return out


_RE_CALL = re.compile(r"re:(?:test|match|replace)\s*\(")


def _call_args(expr: str, start: int) -> list[str]:
    """The top-level arguments of a call whose '(' ends just before ``start``."""
    args: list[str] = []
    depth, i, begin = 0, start, start
    while i < len(expr):
        ch = expr[i]
        if ch in "'\"":
            end = expr.find(ch, i + 1)
            if end < 0:
                break
            i = end + 1
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                args.append(expr[begin:i])
                return args
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(expr[begin:i])
            begin = i + 1
        i += 1
    return args


# ---------------------------------------------------- catastrophic patterns

_REPEATS = frozenset({sre_c.MAX_REPEAT, sre_c.MIN_REPEAT})  # possessive ones never backtrack
_MANY = 16  # a repeat allowing at least this many rounds counts as "many"


def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` is known to backtrack catastrophically, or None when it cannot
    tell (which is not a proof of safety: the time budget covers the rest).

    Caught: a repeated group whose body can match the same text in more than one way
    because it holds another unbounded repeat and nothing else it must match, as in
    ``(a+)+``, ``(a*)*``, ``(\\w+\\s?)+``, ``(?:a|b*)*``; and a repeated group with
    identical alternatives, as in ``(a|a)*``. Atomic groups and possessive quantifiers
    do not backtrack and are never flagged."""
    try:
        tree = sre_parse.parse(pattern)
    except (re.error, RecursionError, TypeError, ValueError):
        return None
    return _walk(list(tree))


def _many(hi: int) -> bool:
    return hi >= _MANY  # MAXREPEAT (unbounded) is a large int


def _walk(seq: list[tuple[Any, Any]]) -> str | None:
    for op, av in seq:
        if op in _REPEATS:
            _lo, hi, body = av
            if _many(hi):
                why = _ambiguous(list(body))
                if why is not None:
                    return why
            found = _walk(list(body))
        elif op is sre_c.SUBPATTERN:
            found = _walk(list(av[3]))
        elif op is sre_c.BRANCH:
            found = next((w for b in av[1] if (w := _walk(list(b))) is not None), None)
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            found = _walk(list(av[1]))
        elif op is sre_c.GROUPREF_EXISTS:
            found = _walk(list(av[1])) or (_walk(list(av[2])) if av[2] is not None else None)
        else:  # literals, sets, anchors; an atomic group never backtracks into itself
            found = None
        if found is not None:
            return found
    return None


def _ambiguous(body: list[tuple[Any, Any]]) -> str | None:
    """Why a repeated body can split the same text in many ways, or None."""
    if _identical_alternatives(body):
        return "repeats a choice between identical alternatives (like (a|a)*)"
    return _lone_repeat(body)


def _identical_alternatives(body: list[tuple[Any, Any]]) -> bool:
    for op, av in body:
        if op is sre_c.SUBPATTERN and _identical_alternatives(list(av[3])):
            return True
        if op is sre_c.BRANCH:
            alternatives = [repr(list(b)) for b in av[1]]
            if len(set(alternatives)) < len(alternatives):
                return True
            if any(_identical_alternatives(list(b)) for b in av[1]):
                return True
    return False


def _lone_repeat(body: list[tuple[Any, Any]]) -> str | None:
    """An unbounded repeat that is all the body must match: each round of the outer
    repeat can then take any share of the text."""
    for i, (op, av) in enumerate(body):
        others = body[:i] + body[i + 1 :]
        if not all(_nullable(o) for o in others):
            continue
        if op in _REPEATS and _many(av[1]) and not all(_nullable(x) for x in av[2]):
            return "nests a repeat inside a repeat (like (a+)+)"
        if op is sre_c.SUBPATTERN:
            why = _lone_repeat(list(av[3]))
            if why is not None:
                return why
        if op is sre_c.BRANCH:
            for b in av[1]:
                why = _lone_repeat(list(b))
                if why is not None:
                    return why
    return None


def _nullable(item: tuple[Any, Any]) -> bool:
    """Whether one parsed item can match the empty string."""
    op, av = item
    if op in (sre_c.AT, sre_c.ASSERT, sre_c.ASSERT_NOT, sre_c.GROUPREF):
        return True
    if op in _REPEATS or op is sre_c.POSSESSIVE_REPEAT:
        return av[0] == 0 or all(_nullable(x) for x in av[2])
    if op is sre_c.SUBPATTERN:
        return all(_nullable(x) for x in av[3])
    if op is sre_c.ATOMIC_GROUP:
        return all(_nullable(x) for x in av)
    if op is sre_c.BRANCH:
        return any(all(_nullable(x) for x in b) for b in av[1])
    return op is sre_c.GROUPREF_EXISTS  # may match nothing; anything else needs text


# --------------------------------------------------------------- records


_SEQUENCES = (list, tuple)  # a tuple, not ``list | tuple``: no union built per value


class NotStorable(PageLevelError, ValueError):
    """A record holds a value that JSON in UTF-8 cannot store: a number that is not
    finite (a JSON page's ``NaN``, ``1e999999``) or a lone UTF-16 surrogate. Stored, it
    would make the item unreadable to SQLite's JSON functions, to the export and to the
    ingest endpoint; the page becomes a typed ``parse`` error instead."""


def _utf8_len(text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise NotStorable("a lone UTF-16 surrogate, which UTF-8 cannot encode") from None


def record_size(value: Any, limit: int) -> int:
    """About how many bytes ``value`` takes as stored JSON (UTF-8), counted only until
    it passes ``limit``, so a huge value costs no more than the limit to measure. Raises
    :class:`NotStorable` for a value JSON cannot store (checked on the way: no second
    walk)."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += (len(v) if v.isascii() else _utf8_len(v)) + 2
        elif isinstance(v, dict):
            total += 2
            for k, x in v.items():
                key = str(k)
                total += (len(key) if key.isascii() else _utf8_len(key)) + 4
                stack.append(x)
        elif isinstance(v, _SEQUENCES):
            total += 2 + len(v)
            stack.extend(v)
        else:
            # numbers, booleans, null: a few characters each
            if isinstance(v, float) and not math.isfinite(v):
                raise NotStorable(f"the number {v!r}, which JSON cannot store")
            total += 8
        if total > limit:
            return total
    return total


# where a parsed JSON document may hold a lone surrogate: a \uD800-\uDFFF escape, or
# (bytes decoded with surrogatepass, as json.loads does) UTF-8 that encodes one
_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_LONE = re.compile("[\ud800-\udfff]")


def surrogates_replaced(doc: Any, raw: str | bytes) -> Any:
    """``doc``, parsed from ``raw``, with each lone UTF-16 surrogate in its strings (and
    keys) replaced by U+FFFD, as a browser shows one; a pair written as two escapes is
    one character. Walks the document only when ``raw`` may hold one (one scan of it)."""
    if isinstance(raw, bytes):
        found = _SURROGATE_BYTES.search(raw) is not None
    else:
        found = _SURROGATE_TEXT.search(raw) is not None
    if not found:
        return doc
    root = [doc]
    stack: list[Any] = [root]
    while stack:  # no recursion: a deep document is the page's to choose
        node = stack.pop()
        if isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, str):
                    node[i] = _no_lone(v)
                elif isinstance(v, dict | list):
                    stack.append(v)
        elif isinstance(node, dict):
            for k in [k for k in node if isinstance(k, str) and _LONE.search(k)]:
                node[_no_lone(k)] = node.pop(k)
            for k, v in node.items():
                if isinstance(v, str):
                    node[k] = _no_lone(v)
                elif isinstance(v, dict | list):
                    stack.append(v)
    return root[0]


def _no_lone(text: str) -> str:
    if _LONE.search(text) is None:
        return text
    # through UTF-16: a pair becomes its character, a lone half U+FFFD
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
