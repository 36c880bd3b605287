"""Semantic checks of a spec whose shape the models accepted, each located to
``file:line:col``.

Owns the meaning across keys: selectors, regexes and JSON paths compile; start URLs
and the ship endpoint are absolute http(s) URLs; ``to:``/``start:`` name existing page
kinds; templates (URL, body, dedupe key) name only known fields and filters;
pagination can stop; selectors on ``format: json`` pages are JSON paths. It walks the
raw YAML data (for the marks) alongside the model (for the meaning) and must not read
files or parse YAML: that is :mod:`framework.spec.load`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from cssselect import SelectorError
from lxml import etree

from framework.errors import SpecError, SpecProblem
from framework.extract.convert import CONVERTERS, ConversionError, ConvertContext
from framework.extract.fields import (
    compile_css,
    compile_jsonpath,
    compile_regex,
    compile_xpath,
    looks_like_xpath,
)
from framework.spec.load import Document, Path_
from framework.spec.models import KIND_NAME_RE, SOURCE_KEYS, JobSpec, PageKind
from framework.spec.template import Template, TemplateError

__all__ = ["BUILTIN_NAMES", "RESERVED_FIELDS", "check", "validate"]

# Names every template may use besides the record's fields.
BUILTIN_NAMES = frozenset({"id", "source_id", "source_type", "url"})
# Keys every item carries; a field of that name would be overwritten.
RESERVED_FIELDS = frozenset({"dedupe_key", "source_type", "source_id"})
_SETTING_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_PROBE = etree.fromstring("<html><body><p class='a'>x</p></body></html>")


def _http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. "http://[oops/": not a URL, a spec problem, not a crash
        return False


class _Checker:
    def __init__(self, spec: JobSpec, doc: Document) -> None:
        self.spec = spec
        self.doc = doc
        self.problems: list[SpecProblem] = []

    def add(self, path: Path_, what: str, expected: str = "", *, key: bool = False) -> None:
        self.problems.append(self.doc.problem(path, what, expected, key=key))

    def raw(self, path: Path_) -> Any:
        node = self.doc.data
        for part in path:
            if isinstance(node, dict):
                if part not in node:
                    return None
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return None
        return node

    # ------------------------------------------------------------ expressions

    def selector(self, path: Path_, expr: Any, *, kind: str) -> None:
        """kind: css, xpath, or any (xpath when it looks like one)."""
        if not isinstance(expr, str) or not expr.strip():
            self.add(path, f"empty or non-text {kind} selector", "a selector string")
            return
        use_xpath = kind == "xpath" or (kind == "any" and looks_like_xpath(expr))
        try:
            xp = compile_xpath(expr) if use_xpath else compile_css(expr)
            xp(_PROBE)  # unknown functions only fail when evaluated
        except SelectorError as exc:
            hint = (
                " (this looks like XPath: write it under `xpath:`)"
                if looks_like_xpath(expr)
                else ""
            )
            self.add(path, f"invalid CSS selector {expr!r}: {exc}", f"a valid CSS selector{hint}")
        except (etree.XPathError, ValueError) as exc:
            label = "XPath" if use_xpath else "CSS selector"
            self.add(path, f"invalid {label} {expr!r}: {exc}", f"a valid {label}")

    def jsonpath(self, path: Path_, expr: Any) -> None:
        if not isinstance(expr, str) or not expr.strip():
            self.add(path, "empty or non-text JSON path", "a JSON path such as $.rows[*]")
            return
        try:
            compile_jsonpath(expr)
        except Exception as exc:  # jsonpath-ng raises bare Exception subclasses
            self.add(path, f"invalid JSON path {expr!r}: {exc}", "a JSON path such as $.rows[*]")

    def regex(self, path: Path_, expr: Any, *, group: str | None = None) -> re.Pattern[str] | None:
        if not isinstance(expr, str) or expr == "":
            self.add(path, "empty or non-text regex", "a regular expression")
            return None
        try:
            pattern, _ = compile_regex(expr)
        except re.error as exc:
            self.add(path, f"invalid regex {expr!r}: {exc}", "a valid Python regular expression")
            return None
        if pattern.fullmatch("") is not None:
            self.add(path, f"regex {expr!r} matches the empty string", "a regex that needs text")
        return pattern

    def template(self, path: Path_, text: Any, known: Iterable[str], what: str) -> None:
        if not isinstance(text, str):
            self.add(path, f"{what} is not text", "a template string such as /cases/{id}")
            return
        try:
            tpl = Template(text)
        except TemplateError as exc:
            self.add(
                path, f"invalid {what}: {exc}", "{name} or {name|filter}; {{ and }} for braces"
            )
            return
        known_set = set(known)
        for name in sorted(tpl.names - known_set):
            self.add(
                path,
                f"{what} {text!r} names unknown field '{name}'",
                f"one of: {', '.join(sorted(known_set))}",
            )

    # ------------------------------------------------------------ fields

    def field(self, path: Path_, raw: Any, *, json_page: bool) -> None:
        if isinstance(raw, str):
            if json_page:
                self.add(
                    path,
                    "a bare string is a CSS selector, but this page is `format: json`",
                    "`json: <JSON path>`",
                )
            else:
                self.selector(path, raw, kind="css")
            return
        if not isinstance(raw, dict):
            return
        type_ = raw.get("type", "string")
        for key in SOURCE_KEYS:
            if key not in raw:
                continue
            value = raw[key]
            items: list[tuple[Path_, Any]]
            if isinstance(value, list) and key not in ("embedded", "const"):
                items = [((*path, key, i), v) for i, v in enumerate(value)]
                if not value:
                    self.add((*path, key), f"empty list of `{key}` fallbacks", "at least one")
            else:
                items = [((*path, key), value)]
            for p, v in items:
                self.source(p, key, v, json_page=json_page)
        if "format" in raw:
            if type_ not in ("date", "datetime"):
                self.add(
                    (*path, "format"),
                    f"`format` on a field of type {type_}",
                    "type date or datetime",
                )
            elif "%" not in str(raw["format"]):
                self.add(
                    (*path, "format"),
                    f"date format {raw['format']!r} has no % directive",
                    "e.g. %d.%m.%Y",
                )
        for key in ("min", "max"):
            if key in raw and type_ not in ("integer", "number"):
                self.add(
                    (*path, key), f"`{key}` on a field of type {type_}", "type integer or number"
                )
        lo, hi = raw.get("min"), raw.get("max")
        if isinstance(lo, int | float) and isinstance(hi, int | float) and lo > hi:
            self.add((*path, "max"), f"max {hi} is below min {lo}", "min <= max")
        for i, rep in enumerate(raw.get("replace") or ()):
            if isinstance(rep, dict):
                pattern = rep.get("pattern")
                try:
                    re.compile(pattern if isinstance(pattern, str) else "")
                except re.error as exc:
                    self.add(
                        (*path, "replace", i, "pattern"),
                        f"invalid regex {pattern!r}: {exc}",
                        "a valid regex",
                    )
        default = raw.get("default")
        if default is not None and type_ in CONVERTERS and type_ not in ("string", "url"):
            try:
                CONVERTERS[type_](
                    default, ConvertContext(date_format=raw.get("format"), absolute=False)
                )
            except (ConversionError, TypeError, ValueError) as exc:
                self.add(
                    (*path, "default"), f"default {default!r} is not a {type_}: {exc}", f"a {type_}"
                )
        each, fields = raw.get("each"), raw.get("fields")
        if each is not None and fields is None:
            self.add(
                (*path, "each"),
                "`each` without `fields`",
                "`fields:` for the rows of a nested group",
            )
        if fields is not None and each is not None:
            if json_page:
                self.jsonpath((*path, "each"), each)
            else:
                self.selector((*path, "each"), each, kind="any")
            if isinstance(fields, dict):
                for name, sub in fields.items():
                    self.field((*path, "fields", name), sub, json_page=json_page)

    def source(self, path: Path_, key: str, value: Any, *, json_page: bool) -> None:
        if key in ("css", "xpath", "count"):
            if json_page:
                self.add(
                    path, f"a `{key}` selector on a `format: json` page", "`json: <JSON path>`"
                )
                return
            self.selector(path, value, kind={"count": "any"}.get(key, key))
        elif key in ("re", "url"):
            self.regex(path, value)
        elif key == "json":
            if not json_page:
                self.add(
                    path,
                    "a `json` path on an HTML page",
                    "css/xpath, or `embedded: {re, path}` for JSON inside the page",
                )
                return
            self.jsonpath(path, value)
        elif key == "embedded":
            if not isinstance(value, dict) or "re" not in value:
                self.add(
                    path,
                    "`embedded` needs a mapping with `re` (and `path`)",
                    "{re: ..., path: $...}",
                )
                return
            for extra in sorted(set(value) - {"re", "path"}):
                self.add(
                    (*path, extra), f"unknown key '{extra}' in `embedded`", "re, path", key=True
                )
            self.regex((*path, "re"), value["re"])
            if "path" in value:
                self.jsonpath((*path, "path"), value["path"])

    # ------------------------------------------------------------ pages

    def kind_paths(self) -> dict[str, Path_]:
        if self.spec.pages:
            return {name: ("pages", name) for name in self.spec.pages}
        out: dict[str, Path_] = {}
        if self.spec.list_ is not None:
            out["list"] = ("list",)
        if self.spec.detail is not None:
            out["detail"] = ("detail",)
        return out

    def run(self) -> list[SpecProblem]:
        spec = self.spec
        for i, url in enumerate(spec.start_urls):
            if not _http_url(url):
                self.add(
                    ("start_urls", i),
                    f"start URL {url!r} is not an absolute http(s) URL",
                    "http://host/path",
                )
        for i, domain in enumerate(spec.allowed_domains or ()):
            if not domain or "/" in domain or ":" in domain or " " in domain:
                self.add(
                    ("allowed_domains", i),
                    f"allowed domain {domain!r} is not a host name",
                    "example.org",
                )
        for key in spec.settings:
            if not _SETTING_RE.match(str(key)):
                self.add(
                    ("settings", key),
                    f"setting {key!r} is not a Scrapy setting name",
                    "UPPER_CASE name",
                    key=True,
                )
                continue
            close = _setting_typo(str(key))
            if close is not None:
                self.add(
                    ("settings", key),
                    f"unknown Scrapy setting '{key}' (did you mean '{close}'?)",
                    f"'{close}'",
                    key=True,
                )
        if spec.ship.endpoint is not None and not _http_url(spec.ship.endpoint):
            self.add(
                ("ship", "endpoint"),
                f"ship endpoint {spec.ship.endpoint!r} is not an http(s) URL",
                "http://host/v1/items",
            )
        if spec.ship.fallback_path is not None and not spec.ship.fallback_path.startswith("/"):
            self.add(
                ("ship", "fallback_path"), "fallback path does not start with '/'", "/v1/items"
            )

        kinds = spec.page_kinds()
        paths = self.kind_paths()
        for name in kinds:
            if spec.pages and not KIND_NAME_RE.match(name):
                self.add(
                    paths[name],
                    f"page kind name {name!r}",
                    "lowercase letters, digits, '_'",
                    key=True,
                )
        if spec.start is not None and spec.start not in kinds:
            self.add(
                ("start",),
                f"start kind {spec.start!r} is not a page kind",
                f"one of: {', '.join(kinds)}",
            )
        edges = {name: {r.to for r in kind.follow} for name, kind in kinds.items()}
        for name, kind in kinds.items():
            self.page(name, kind, paths[name], kinds, edges)
        reached = _reach(spec.start_kind(), edges)
        for name in kinds:
            if (spec.start is None or spec.start in kinds) and name not in reached:
                self.add(
                    paths[name],
                    f"page kind '{name}' is never reached",
                    f"`start: {name}` or a follow rule `to: {name}`",
                    key=True,
                )
        emitters = [n for n, k in kinds.items() if k.emits]
        if not emitters:
            self.add(
                (),
                "no page kind has an `id`, so the job emits no items",
                "`id:` on the kind whose records are items",
            )
        # the dedupe key: names every emitting kind knows
        key_path: Path_ = ("key", "template") if isinstance(self.raw(("key",)), dict) else ("key",)
        known_everywhere: set[str] | None = None
        for n in emitters:
            names = self.known_names(n, kinds, edges)
            known_everywhere = names if known_everywhere is None else known_everywhere & names
        self.template(
            key_path, spec.key.template, known_everywhere or BUILTIN_NAMES, "key template"
        )
        return self.problems

    def known_names(
        self, name: str, kinds: dict[str, PageKind], edges: dict[str, set[str]]
    ) -> set[str]:
        """Fields of this kind and of every kind that leads to it (their values are carried)."""
        names = set(BUILTIN_NAMES)
        for other, kind in kinds.items():
            if other == name or name in _reach(other, edges):
                names.update(kind.fields)
        return names

    def page(
        self,
        name: str,
        kind: PageKind,
        path: Path_,
        kinds: dict[str, PageKind],
        edges: dict[str, set[str]],
    ) -> None:
        json_page = kind.format.value == "json"
        raw = self.raw(path) or {}
        if kind.each is not None:
            if json_page:
                self.jsonpath((*path, "each"), kind.each)
            else:
                self.selector((*path, "each"), kind.each, kind="any")
        if "id" in raw:
            self.field((*path, "id"), raw["id"], json_page=json_page)
        for fname, fraw in (raw.get("fields") or {}).items():
            if fname in RESERVED_FIELDS:
                self.add(
                    (*path, "fields", fname),
                    f"field name '{fname}' is reserved",
                    "another name",
                    key=True,
                )
            self.field((*path, "fields", fname), fraw, json_page=json_page)
        # follow rules
        if path == ("list",):
            if isinstance(raw.get("follow"), str):
                self.selector(("list", "follow"), raw["follow"], kind="any")
        else:
            follow_raw = raw.get("follow")
            for i, rule in enumerate(kind.follow):
                rpath: Path_ = (
                    (*path, "follow", i) if isinstance(follow_raw, list) else (*path, "follow")
                )
                if rule.css is not None:
                    self.selector((*rpath, "css"), rule.css, kind="css")
                if rule.xpath is not None:
                    self.selector((*rpath, "xpath"), rule.xpath, kind="xpath")
                if rule.pattern is not None:
                    self.regex((*rpath, "pattern"), rule.pattern)
                if rule.to not in kinds:
                    self.add(
                        (*rpath, "to"),
                        f"`to: {rule.to}` names no page kind",
                        f"one of: {', '.join(kinds)}",
                    )
        # pagination
        pg = kind.pagination
        if pg is not None:
            ppath: Path_ = (*path, "next") if path == ("list",) else (*path, "pagination")
            raw_pg = self.raw(ppath)
            next_path = ppath if isinstance(raw_pg, str) else (*ppath, "next")
            if pg.next is not None:
                if json_page:
                    self.jsonpath(next_path, pg.next)
                else:
                    self.selector(next_path, pg.next, kind="any")
            else:
                if pg.start < 0:
                    self.add((*ppath, "start"), f"pagination starts at {pg.start}", "0 or more")
                if pg.step < 1:
                    self.add((*ppath, "step"), f"pagination step {pg.step}", "1 or more")
                if pg.stop.json_path is not None:
                    if not json_page:
                        self.add(
                            (*ppath, "stop", "json"),
                            "a JSON stop flag on an HTML page",
                            "`format: json`",
                        )
                    else:
                        self.jsonpath((*ppath, "stop", "json"), pg.stop.json_path)
                if not pg.stop.empty and pg.stop.json_path is None and pg.max_pages is None:
                    self.add(
                        ppath,
                        "this pagination never stops",
                        "`max_pages`, `stop: {empty: true}` or `stop: {json: ...}`",
                    )
                if pg.stop.empty and kind.each is None and not json_page:
                    self.add(
                        ppath,
                        "`stop: empty` needs `each` (what counts as a record)",
                        "`each:` on this page kind",
                    )
        # sub-tabs
        known = self.known_names(name, kinds, edges)
        for tname, tab in kind.subtabs.items():
            tpath: Path_ = (*path, "subtabs", tname)
            if tname in kind.fields or tname in RESERVED_FIELDS:
                self.add(
                    tpath,
                    f"sub-tab '{tname}' has the name of a field",
                    "a name of its own",
                    key=True,
                )
            self.template((*tpath, "url"), tab.url, known, "URL template")
            if tab.body is not None:
                if tab.body.form is not None:
                    for k, v in tab.body.form.items():
                        self.template((*tpath, "body", "form", k), v, known, "body template")
                else:
                    for p, v in _strings(tab.body.json_body, (*tpath, "body", "json")):
                        self.template(p, v, known, "body template")
            tab_json = tab.format.value == "json"
            if tab.each is not None:
                if tab_json:
                    self.jsonpath((*tpath, "each"), tab.each)
                else:
                    self.selector((*tpath, "each"), tab.each, kind="any")
            raw_tab = self.raw(tpath) or {}
            for fname, fraw in (raw_tab.get("fields") or {}).items():
                self.field((*tpath, "fields", fname), fraw, json_page=tab_json)


_OWN_PREFIXES = ("FRAMEWORK_", "PLAYWRIGHT_")


def _setting_typo(name: str) -> str | None:
    """A Scrapy setting this name is a near miss of. Names with no close match may be
    a plugin's and are accepted, as Scrapy itself accepts them."""
    if name.startswith(_OWN_PREFIXES):
        return None
    from scrapy.settings import default_settings  # only when a spec has settings

    known = [k for k in vars(default_settings) if _SETTING_RE.match(k)]
    if name in known:
        return None
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
    return close[0] if close else None


def _strings(value: Any, path: Path_) -> Iterable[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i))


def _reach(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def check(spec: JobSpec, doc: Document) -> list[SpecProblem]:
    """Every semantic problem of the spec, sorted by position."""
    problems = _Checker(spec, doc).run()
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.what))


def validate(spec: JobSpec, doc: Document) -> JobSpec:
    """Return the spec, or raise :class:`SpecError` with every problem found."""
    problems = check(spec, doc)
    if problems:
        raise SpecError(problems)
    return spec
