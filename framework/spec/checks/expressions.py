"""Expressions of a spec compile and are safe to run: CSS selectors, XPath, JSON paths,
regexes (none that backtracks catastrophically or is nested too deeply to read) and
templates that name only known fields.

Every other check calls these where an expression stands; they know nothing of where
that is (page kinds, fields, logins) beyond the path they are given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from cssselect import SelectorError
from lxml import etree

from framework.extract.fields import (
    compile_css,
    compile_jsonpath,
    compile_regex,
    compile_xpath,
    looks_like_xpath,
)
from framework.extract.patterns import backtracking_risk
from framework.spec.checks.report import Path_, Report
from framework.spec.template import Template, TemplateError

__all__ = [
    "deny",
    "expression",
    "jsonpath",
    "regex",
    "risk",
    "selector",
    "selectors",
    "template",
]

_NO_NESTING = "one repeat per run of text, e.g. (a+)+ -> a+, (\\w+\\s?)+ -> [\\w\\s]+"
_PROBE = etree.fromstring("<html><body><p class='a'>x</p></body></html>")
_SHALLOW = "fewer nested groups or steps (a few dozen at most)"


def _short(expr: str) -> str:
    """``expr`` as a message quotes it: a selector of 500 steps is not shown whole."""
    return repr(expr) if len(expr) <= 60 else repr(expr[:60]) + f"... ({len(expr)} characters)"


def selector(r: Report, path: Path_, expr: Any, *, kind: str) -> None:
    """kind: css, xpath, or any (xpath when it looks like one)."""
    if not isinstance(expr, str) or not expr.strip():
        r.add(path, f"empty or non-text {kind} selector", "a selector string")
        return
    use_xpath = kind == "xpath" or (kind == "any" and looks_like_xpath(expr))
    try:
        xp = compile_xpath(expr) if use_xpath else compile_css(expr)
        xp(_PROBE)  # unknown functions only fail when evaluated
    except SelectorError as exc:
        hint = " (this looks like XPath: write it under `xpath:`)" if looks_like_xpath(expr) else ""
        r.add(path, f"invalid CSS selector {expr!r}: {exc}", f"a valid CSS selector{hint}")
    except (etree.XPathError, ValueError) as exc:
        label = "XPath" if use_xpath else "CSS selector"
        r.add(path, f"invalid {label} {expr!r}: {exc}", f"a valid {label}")
    except RecursionError:  # a spec is data anyone may write: 500 nested steps
        label = "XPath" if use_xpath else "CSS selector"
        r.add(path, f"{label} {_short(expr)} is nested too deeply to read", _SHALLOW)


def jsonpath(r: Report, path: Path_, expr: Any) -> None:
    if not isinstance(expr, str) or not expr.strip():
        r.add(path, "empty or non-text JSON path", "a JSON path such as $.rows[*]")
        return
    try:
        compile_jsonpath(expr)
    except Exception as exc:  # jsonpath-ng raises bare Exception subclasses
        r.add(path, f"invalid JSON path {expr!r}: {exc}", "a JSON path such as $.rows[*]")


def regex(r: Report, path: Path_, expr: Any, *, group: str | None = None) -> re.Pattern[str] | None:
    if not isinstance(expr, str) or expr == "":
        r.add(path, "empty or non-text regex", "a regular expression")
        return None
    try:
        pattern, _ = compile_regex(expr)
        empty = pattern.fullmatch("") is not None
    except re.error as exc:
        r.add(path, f"invalid regex {expr!r}: {exc}", "a valid Python regular expression")
        return None
    except RecursionError:  # Python's regex parser recurses per group: 500 nested
        r.add(path, f"regex {_short(expr)} is nested too deeply to read", _SHALLOW)
        return None
    if empty:
        r.add(path, f"regex {expr!r} matches the empty string", "a regex that needs text")
    try:
        risk(r, path, expr)
    except RecursionError:
        r.add(path, f"regex {_short(expr)} is nested too deeply to read", _SHALLOW)
    return pattern


def risk(r: Report, path: Path_, expr: str) -> None:
    """A pattern known to backtrack catastrophically (framework.extract.patterns)."""
    why = backtracking_risk(expr)
    if why is not None:
        r.add(path, f"regex {expr!r} {why}: it can backtrack catastrophically", _NO_NESTING)


def template(r: Report, path: Path_, text: Any, known: Iterable[str], what: str) -> None:
    if not isinstance(text, str):
        r.add(path, f"{what} is not text", "a template string such as /cases/{id}")
        return
    try:
        tpl = Template(text)
    except TemplateError as exc:
        r.add(path, f"invalid {what}: {exc}", "{name} or {name|filter}; {{ and }} for braces")
        return
    known_set = set(known)
    for name in sorted(tpl.names - known_set):
        r.add(
            path,
            f"{what} {text!r} names unknown field '{name}'",
            f"one of: {', '.join(sorted(known_set))}",
        )


def expression(r: Report, path: Path_, expr: Any, *, json_page: bool) -> None:
    """Records (``each``) or a next link: a JSON path on a JSON page, else a selector
    (CSS, or XPath when it looks like one)."""
    if json_page:
        jsonpath(r, path, expr)
    else:
        selector(r, path, expr, kind="any")


def deny(r: Report, rpath: Path_, deny: Iterable[str]) -> None:
    """A follow rule's ``deny`` regexes (one, or a list)."""
    for i, expr in enumerate(deny):
        regex(r, r.item((*rpath, "deny"), i), expr)


def selectors(r: Report, path: Path_, css: str | None, xpath: str | None) -> None:
    """The ``css``/``xpath`` of a rule that finds elements (follow, blocked, form)."""
    if css is not None:
        selector(r, (*path, "css"), css, kind="css")
    if xpath is not None:
        selector(r, (*path, "xpath"), xpath, kind="xpath")
