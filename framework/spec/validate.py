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
import math
import re
import time
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import parse_qsl, urljoin, urlsplit

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
from framework.extract.patterns import backtracking_risk
from framework.spec.checks.rules import rule_problems
from framework.spec.checks.settings import over_ceiling
from framework.spec.load import Document, Path_
from framework.spec.models import KIND_NAME_RE, SOURCE_KEYS, BlockRule, JobSpec, PageKind
from framework.spec.render import render_problems
from framework.spec.template import (
    ENV_REF,
    SPEC_ENV_PREFIX,
    Template,
    TemplateError,
    env_names,
    env_problems,
    env_refused,
)
from framework.workspace.jsonl import is_secret_key, is_secret_param

__all__ = [
    "BUILTIN_NAMES",
    "RESERVED_FIELDS",
    "SPEC_SETTINGS",
    "check",
    "check_raw",
    "is_start_url",
    "spec_settings",
    "validate",
]

# Names every template may use besides the record's fields.
BUILTIN_NAMES = frozenset({"id", "source_id", "source_type", "url"})
# Keys every item carries; a field of that name would be overwritten.
RESERVED_FIELDS = frozenset({"dedupe_key", "source_type", "source_id"})
_SETTING_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

# What a spec's `settings:` may set, with the type (and lower bound) of its value.
# A spec is data that people share and copy: it may tune how politely and how fast the
# job fetches, never load code (EXTENSIONS, ITEM_PIPELINES, SCHEDULER, any class
# path), open a port (TELNETCONSOLE_*), or write files (LOG_FILE, FEEDS, HTTPCACHE_*).
# Those belong to the trusted side: `-s NAME=VALUE` or the project's settings module.
# No value here is ever imported: every one is a number, a flag or text sent as is.
SPEC_SETTINGS: dict[str, tuple[str, float | None]] = {
    # politeness
    "DOWNLOAD_DELAY": ("number", 0),
    "RANDOMIZE_DOWNLOAD_DELAY": ("bool", None),
    "AUTOTHROTTLE_ENABLED": ("bool", None),
    "AUTOTHROTTLE_START_DELAY": ("number", 0),
    "AUTOTHROTTLE_MAX_DELAY": ("number", 0),
    "AUTOTHROTTLE_TARGET_CONCURRENCY": ("number", 0.01),
    "AUTOTHROTTLE_DEBUG": ("bool", None),
    "ROBOTSTXT_OBEY": ("bool", None),
    # concurrency
    "CONCURRENT_REQUESTS": ("int", 1),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("int", 1),
    "CONCURRENT_ITEMS": ("int", 1),
    # timeouts and download limits (a spec may not lift the size cap: 0 means none)
    "DOWNLOAD_TIMEOUT": ("number", 0.001),
    "DNS_TIMEOUT": ("number", 0.001),
    "DOWNLOAD_MAXSIZE": ("int", 1),
    "DOWNLOAD_WARNSIZE": ("int", 0),
    # what is sent
    "USER_AGENT": ("text", None),
    "DEFAULT_REQUEST_HEADERS": ("headers", None),
    "COOKIES_ENABLED": ("bool", None),
    "REDIRECT_ENABLED": ("bool", None),
    "REDIRECT_MAX_TIMES": ("int", 0),
    # the playwright plugin's numbers (its launch options name a binary: not here)
    "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": ("number", 0),
    "PLAYWRIGHT_MAX_CONTEXTS": ("int", 1),
    "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": ("int", 1),
}
# The framework's own settings, typed by their defaults; FRAMEWORK_FRESH is a decision
# of one run (`--fresh`), never of a spec that every run reads.
_NOT_IN_SPECS = frozenset({"FRAMEWORK_FRESH"})
_AT_LEAST_ONE = {
    "FRAMEWORK_MAX_ATTEMPTS": 1,
    "FRAMEWORK_ERROR_RATE_WINDOW": 1,
    # extraction limits (framework.extract.patterns): zero would refuse every page
    "FRAMEWORK_MAX_MATCHES": 1,
    "FRAMEWORK_MAX_MATCH_CHARS": 1,
    "FRAMEWORK_MAX_ITEM_BYTES": 1,
}
# numbers that must be above zero: a zero time budget would refuse every page
_ABOVE_ZERO = frozenset({"FRAMEWORK_EXTRACT_TIMEOUT"})
_TRUSTED_HINT = (
    "put it in the project's Scrapy settings module or pass `-s {name}=...` on the "
    "command line (both are code you trust)"
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def spec_settings() -> dict[str, tuple[str, float | None]]:
    """Every setting a spec may set: :data:`SPEC_SETTINGS` and the framework's own."""
    from framework.settings import FRAMEWORK_SETTINGS  # read now: later additions count

    out = dict(SPEC_SETTINGS)
    for name, default in FRAMEWORK_SETTINGS.items():
        if name in _NOT_IN_SPECS:
            continue
        if isinstance(default, bool):
            out[name] = ("bool", None)
        elif isinstance(default, int):
            out[name] = ("int", _AT_LEAST_ONE.get(name, 0))
        elif isinstance(default, str):
            out[name] = ("text", None)
        elif name in _ABOVE_ZERO:
            out[name] = ("positive", 0)
        else:  # float, or None for "no limit": a number
            out[name] = ("number", 0)
    return out


def _type_problem(kind: str, low: float | None, value: Any) -> str | None:
    """What ``value`` should have been, or None when it fits."""
    if kind == "bool":
        return None if isinstance(value, bool) else "true or false"
    # .inf and .nan are YAML floats: a timeout or delay of infinity waits for ever (or
    # fails every request in the HTTP client), and NaN compares false with any bound
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if kind == "positive":
        ok = not isinstance(value, bool) and finite and value > 0
        return None if ok else "a number > 0"
    if kind in ("int", "number"):
        ok = not isinstance(value, bool) and (
            isinstance(value, int) or (kind == "number" and isinstance(value, float) and finite)
        )
        bound = "" if low is None else f" >= {low:g}"
        what = ("an integer" if kind == "int" else "a number") + bound
        if not ok or (low is not None and value < low):
            return what
        return None
    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            return "a text"
        # USER_AGENT goes into a header: a line break would start another one
        return "a text on one line" if any(c in value for c in "\r\n\x00") else None
    if kind == "headers":
        if isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return None
        return "a mapping of header names to texts"
    return None


def _without_env(text: str) -> str:
    """``text`` with each ``{env:NAME}`` replaced by a neutral word (for URL checks)."""
    return ENV_REF.sub("env", text)


def _literal(text: str) -> str:
    """What is left of a value once its references and placeholders are taken out."""
    return re.sub(r"\{[^{}]*\}", "", text)


_NO_NESTING = "one repeat per run of text, e.g. (a+)+ -> a+, (\\w+\\s?)+ -> [\\w\\s]+"
_PROBE = etree.fromstring("<html><body><p class='a'>x</p></body></html>")
_SHALLOW = "fewer nested groups or steps (a few dozen at most)"


def _bad_date_format(fmt: str) -> str | None:
    """What strptime refuses in ``fmt`` (a bad directive, a stray %), or None."""
    try:
        time.strptime("", fmt)
    except ValueError as exc:
        text = str(exc)
        return text if "directive" in text or "stray %" in text else None
    return None


def _session_cookie(name: str) -> bool:
    """A cookie name that carries a credential: a secret-looking key, or a session's
    under the names servers give it (``JSESSIONID``, ``PHPSESSID``,
    ``ASP.NET_SessionId``, ``connect.sid``, ``laravel_session``, ``sid``)."""
    norm = name.strip().lower().replace("-", "_")
    return is_secret_key(name) or "sess" in norm or norm.endswith("sid")


def _host_name(domain: str) -> bool:
    """A host name or IPv4 address, as ``allowed_domains`` takes one (a leading or
    trailing dot is dropped): labels of letters, digits, ``-`` and ``_``; no ``*``."""
    labels = domain.strip(".").split(".")
    return all(label and all(c.isalnum() or c in "-_" for c in label) for label in labels)


def _short(expr: str) -> str:
    """``expr`` as a message quotes it: a selector of 500 steps is not shown whole."""
    return repr(expr) if len(expr) <= 60 else repr(expr[:60]) + f"... ({len(expr)} characters)"


def _http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. "http://[oops/": not a URL, a spec problem, not a crash
        return False


def is_start_url(url: str) -> bool:
    """Whether ``url`` may be a start URL: absolute http(s), ``{env:NAME}`` references
    taken as words (what ``start_urls`` is checked with, and ``framework new``)."""
    return _http_url(_without_env(url))


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
        except RecursionError:  # a spec is data anyone may write: 500 nested steps
            label = "XPath" if use_xpath else "CSS selector"
            self.add(path, f"{label} {_short(expr)} is nested too deeply to read", _SHALLOW)

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
            empty = pattern.fullmatch("") is not None
        except re.error as exc:
            self.add(path, f"invalid regex {expr!r}: {exc}", "a valid Python regular expression")
            return None
        except RecursionError:  # Python's regex parser recurses per group: 500 nested
            self.add(path, f"regex {_short(expr)} is nested too deeply to read", _SHALLOW)
            return None
        if empty:
            self.add(path, f"regex {expr!r} matches the empty string", "a regex that needs text")
        try:
            self.risk(path, expr)
        except RecursionError:
            self.add(path, f"regex {_short(expr)} is nested too deeply to read", _SHALLOW)
        return pattern

    def risk(self, path: Path_, expr: str) -> None:
        """A pattern known to backtrack catastrophically (framework.extract.patterns)."""
        why = backtracking_risk(expr)
        if why is not None:
            self.add(path, f"regex {expr!r} {why}: it can backtrack catastrophically", _NO_NESTING)

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
        counts_only = [k for k in SOURCE_KEYS if k in raw] == ["count"]
        type_ = raw.get("type", "integer" if counts_only else "string")
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
            elif (bad := _bad_date_format(str(raw["format"]))) is not None:
                # a bad directive never matches: the field would fall back to the
                # built-in forms without a word, or fail on every page
                self.add(
                    (*path, "format"), f"date format {raw['format']!r}: {bad}", "e.g. %d.%m.%Y"
                )
        for key in ("min", "max"):
            if key in raw and type_ not in ("integer", "number", "price"):
                self.add(
                    (*path, key),
                    f"`{key}` on a field of type {type_}",
                    "type integer, number or price",
                )
        if "pattern" in raw:
            self.regex((*path, "pattern"), raw["pattern"])
        for key in ("min_length", "max_length"):
            if key in raw and type_ not in ("string", "url"):
                self.add((*path, key), f"`{key}` on a field of type {type_}", "type string or url")
        lo_len, hi_len = raw.get("min_length"), raw.get("max_length")
        if isinstance(lo_len, int) and isinstance(hi_len, int) and lo_len > hi_len:
            self.add(
                (*path, "max_length"),
                f"max_length {hi_len} is below min_length {lo_len}",
                "min_length <= max_length",
            )
        if "max_change" in raw and type_ not in ("integer", "number", "price"):
            self.add(
                (*path, "max_change"),
                f"`max_change` on a field of type {type_}",
                "type integer, number or price (`frozen: true` for other values)",
            )
        if "enum" in raw and not (isinstance(raw["enum"], list) and raw["enum"]):
            self.add((*path, "enum"), "`enum` is not a list of values", "at least one value")
        if raw.get("languages") and type_ not in ("date", "datetime"):
            self.add(
                (*path, "languages"),
                f"`languages` on a field of type {type_}",
                "type date or datetime",
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
                else:
                    if isinstance(pattern, str):
                        self.risk((*path, "replace", i, "pattern"), pattern)
        languages = self.spec.languages if self.spec is not None else ()
        for sub, what, expected in rule_problems(raw, type_, languages):
            self.add((*path, *sub), what, expected)  # rules that can never pass (checks/rules.py)
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
        if "pairs" in raw:
            for key in ("many", "each", "fields"):
                if raw.get(key):
                    self.add(
                        (*path, key),
                        f"`{key}` with `pairs` (the pairs are one mapping)",
                        "`pairs` alone, or a nested group (`each` + `fields`)",
                    )
            if type_ != "string":
                self.add(
                    (*path, "type"),
                    f"`pairs` with type {type_}",
                    "type string (the value is a mapping of texts)",
                )
        if fields is not None and each is not None:
            rows_json = json_page
            if isinstance(each, dict):
                self.records((*path, "each"), each, json_page=json_page)
                rows_json = True
            elif json_page:
                self.jsonpath((*path, "each"), each)
            else:
                self.selector((*path, "each"), each, kind="any")
            if isinstance(fields, dict):
                for name, sub in fields.items():
                    self.field((*path, "fields", name), sub, json_page=rows_json)
                    if isinstance(sub, dict) and sub.get("helper"):
                        self.add(
                            (*path, "fields", name, "helper"),
                            "`helper` on a field of a nested group",
                            "`helper: true` on a page kind's own fields",
                        )

    def records(self, path: Path_, raw: Any, *, json_page: bool) -> None:
        """An ``each`` mapping: records that are data in the page (models.Records)."""
        if not isinstance(raw, dict):
            return  # not a mapping: the models say so
        if json_page:
            self.add(
                path,
                "records from embedded data on a `format: json` page",
                "a JSON path (`each: $.rows[*]`), or `format: html`",
            )
            return
        if isinstance(raw.get("embedded"), dict):
            self.embedded((*path, "embedded"), raw["embedded"])
        for key in ("jsonld", "microdata"):
            value = raw.get(key)
            if key in raw and (not isinstance(value, str) or not value.strip()):
                self.add(
                    (*path, key),
                    f"`{key}` is not a type name",
                    "a type such as Quote or https://schema.org/Quote, or * for every object",
                )

    def embedded(self, path: Path_, value: dict[str, Any]) -> None:
        """``embedded: {script, var, re, path}`` (a field source or a records' source)."""
        known = {"re", "script", "var", "path"}
        for extra in sorted(set(value) - known):
            self.add(
                (*path, extra),
                f"unknown key '{extra}' in `embedded`",
                "script, var, re, path",
                key=True,
            )
        if not any(k in value for k in ("re", "script", "var")):
            self.add(
                path,
                "`embedded` says nowhere where the JSON is",
                "`script: <selector>`, `var: <name>` or `re: <regex>` (and `path`)",
            )
        if "re" in value and "var" in value:
            self.add((*path, "var"), "`embedded` with both `var` and `re`", "one of them")
        if "re" in value:
            self.regex((*path, "re"), value["re"])
        if "script" in value:
            self.selector((*path, "script"), value["script"], kind="any")
        if "var" in value:
            var = value["var"]
            if not isinstance(var, str) or not re.fullmatch(r"[A-Za-z_$][\w$]*(\.[\w$]+)*", var):
                self.add(
                    (*path, "var"),
                    f"`var` {var!r} is not a JavaScript name",
                    "a name such as data or window.__STATE__",
                )
        if "path" in value:
            self.jsonpath((*path, "path"), value["path"])

    def pairs(self, path: Path_, value: Any, *, json_page: bool) -> None:
        """``pairs: {each, key, value}``: one mapping from a definition list or table."""
        if not isinstance(value, dict) or "each" not in value:
            self.add(
                path,
                "`pairs` needs a mapping with `each` (one element per pair)",
                "{each: <selector>, key: <selector>, value: <selector>}",
            )
            return
        for extra in sorted(set(value) - {"each", "key", "value"}):
            self.add(
                (*path, extra), f"unknown key '{extra}' in `pairs`", "each, key, value", key=True
            )
        each = value["each"]
        as_json = isinstance(each, str) and each.lstrip().startswith("$")
        if json_page and not as_json:
            self.add(
                (*path, "each"),
                "`pairs` on JSON records takes JSON paths",
                "`each: $.<the list of pairs>` with `key` and `value` paths",
            )
            return
        for key in ("each", "key", "value"):
            if key not in value:
                continue
            if as_json:
                self.jsonpath((*path, key), value[key])
            else:
                self.selector((*path, key), value[key], kind="any")

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
            if not isinstance(value, dict):
                self.add(
                    path,
                    "`embedded` needs a mapping: where the JSON is (`script`, `var` or `re`) "
                    "and `path`",
                    "{var: data, path: $...}",
                )
                return
            self.embedded(path, value)
        elif key == "pairs":
            self.pairs(path, value, json_page=json_page)

    # ------------------------------------------------------------ settings

    def settings(self, values: dict[str, Any]) -> None:
        """The spec's ``settings:`` (also read from the raw data, :func:`check_raw`): known
        spec settings of the right type only, none that loads code."""
        allowed = spec_settings()
        for key, value in values.items():
            path: Path_ = ("settings", key)
            hint = _TRUSTED_HINT.format(name=key)
            if key not in allowed:
                upper = str(key).upper()
                close = (
                    [upper]
                    if upper in allowed
                    else difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.85)
                )
                if close:
                    what = f"unknown spec setting '{key}' (did you mean '{close[0]}'?)"
                elif _is_scrapy_setting(str(key)):
                    what = (
                        f"setting '{key}' is not allowed in a spec (a spec is data: settings "
                        "that load code, open ports or write files are not)"
                    )
                else:
                    what = f"unknown spec setting '{key}'"
                self.add(
                    path,
                    what,
                    f"'{close[0]}'"
                    if close
                    else f"a spec setting (docs/spec-reference.md); {hint}",
                    key=True,
                )
                continue
            kind, low = allowed[key]
            expected = _type_problem(kind, low, value)
            if expected is not None:
                self.add(path, f"wrong value for setting '{key}': {value!r}", expected)
                continue
            over = over_ceiling(key, value)  # the floors are above, the ceilings there
            if over is not None:
                self.add(path, *over)
                continue
            if kind == "headers":
                self.headers(path, value, resolved=False)
            elif isinstance(value, str) and "{env:" in value:
                self.add(
                    path,
                    f"an {{env:...}} reference in setting '{key}' (settings are not resolved)",
                    "{env:NAME} only in start_urls, sub-tab url/body or `headers:`",
                )

    # ------------------------------------------------------------ credentials

    def credentials(self) -> None:
        """Credentials enter a spec only as {env:NAME}: no literal userinfo, no literal
        secret query/form parameter or auth header, references only where resolved."""
        for i, url in enumerate(self.spec.start_urls):
            self.url_secrets(("start_urls", i), url, "start URL")
        self.headers(("headers",), dict(self.spec.headers), resolved=True)
        key_path: Path_ = ("key", "template") if isinstance(self.raw(("key",)), dict) else ("key",)
        if "{env:" in self.spec.key.template:
            self.add(
                key_path,
                "an {env:...} reference in the key template (a dedupe key is stored as is)",
                "record fields only",
            )
        self.cookies(("cookies",), dict(self.spec.cookies))
        self.login()
        paths = self.kind_paths()
        for name, kind in self.spec.page_kinds().items():
            self.headers((*paths[name], "headers"), dict(kind.headers), resolved=True)
            self.cookies((*paths[name], "cookies"), dict(kind.cookies))
            for tname, tab in kind.subtabs.items():
                tpath: Path_ = (*paths[name], "subtabs", tname)
                self.url_secrets((*tpath, "url"), tab.url, "sub-tab URL")
                if tab.body is not None and tab.body.form is not None:
                    for k, v in tab.body.form.items():
                        self.literal_secret((*tpath, "body", "form", k), str(k), v, "form field")
                elif tab.body is not None:
                    for p, v in _strings(tab.body.json_body, (*tpath, "body", "json")):
                        if isinstance(p[-1], str):
                            self.literal_secret(p, p[-1], v, "JSON body field")

    def cookies(self, path: Path_, cookies: dict[str, str]) -> None:
        for name, value in cookies.items():
            cpath: Path_ = (*path, name)
            if not _HEADER_NAME.match(str(name)):
                self.add(cpath, f"cookie name {name!r}", "a cookie name such as consent", key=True)
                continue
            text = _literal(value)
            if any(c in text for c in ';,"\\\r\n') or text != text.strip():
                self.add(
                    cpath,
                    f"cookie {name!r} has a character a cookie value cannot carry",
                    "no ';', ',', quote, backslash, line break or surrounding space",
                )
            self.env_refs(cpath, value)
            if _session_cookie(str(name)) and not env_names(value):
                self.add(
                    cpath,
                    f"a literal credential in cookie '{name}' (it would be stored and shared)",
                    '{env:NAME} (`session: "{env:SITE_SESSION}"`)',
                )

    def login(self) -> None:
        """``login:``: where it goes, what it fills, how it judges (crawl/session.py)."""
        login = self.spec.login
        if login is None:
            return
        path: Path_ = ("login",)
        url = urljoin(self.spec.start_urls[0], _without_env(login.url))
        self.url_secrets((*path, "url"), login.url, "login URL")
        if not _http_url(url):
            self.add((*path, "url"), f"login URL {login.url!r} is not http(s)", "/login")
        else:
            host = (urlsplit(url).hostname or "").lower()
            allowed = self.spec.allowed_domains
            hosts = (
                list(allowed)
                if allowed is not None
                else [urlsplit(_without_env(u)).hostname or "" for u in self.spec.start_urls]
            )
            if hosts and not any(host == h or host.endswith("." + h) for h in hosts):
                self.add(
                    (*path, "url"),
                    f"login URL host {host!r} is not one the job may request",
                    f"a host of start_urls or allowed_domains ({', '.join(hosts)})",
                )
        if login.form is not None:
            self.selector((*path, "form"), login.form, kind="css")
        for name, value in login.fields.items():
            fpath: Path_ = (*path, "fields", name)
            self.env_refs(fpath, value)
            self.literal_secret(fpath, str(name), value, "login field")
        for p, v in _strings(login.json_body, (*path, "json")):
            self.env_refs(p, v)
            if isinstance(p[-1], str):
                self.literal_secret(p, p[-1], v, "login JSON field")
        if login.success.css is not None:
            self.selector((*path, "success", "css"), login.success.css, kind="css")
        if login.expired.css is not None:
            self.selector((*path, "expired", "css"), login.expired.css, kind="css")
        if login.expired.url is not None:
            self.regex((*path, "expired", "url"), login.expired.url)
        if login.token is not None:
            tpath: Path_ = (*path, "token")
            self.jsonpath((*tpath, "json"), login.token.json_path)
            if not _HEADER_NAME.match(login.token.header):
                self.add((*tpath, "header"), f"header name {login.token.header!r}", "Authorization")
            if "{token}" not in login.token.value or "\n" in login.token.value:
                self.add((*tpath, "value"), "a token header without {token}", '"Bearer {token}"')
        if self.spec.settings.get("COOKIES_ENABLED") is False and login.token is None:
            self.add(
                ("settings", "COOKIES_ENABLED"),
                "COOKIES_ENABLED: false with a `login:` (the session is a cookie)",
                "cookies enabled (leave the setting out)",
            )

    def literal_secret(self, path: Path_, name: str, value: str, what: str) -> None:
        if is_secret_param(name) and _literal(value).strip():
            self.add(
                path,
                f"a literal credential in {what} '{name}' (it would be stored and shared)",
                "{env:NAME}, an environment variable the crawl reads when it sends",
            )

    def env_refs(self, path: Path_, text: str) -> None:
        """The ``{env:NAME}`` references of ``text``: well formed, and to a variable a
        spec may read (:data:`SPEC_ENV_PREFIX`)."""
        for problem in env_problems(text):
            self.add(path, problem, "{env:NAME}")
        for name in env_names(text):
            why = env_refused(name)
            if why is not None:
                self.add(path, why, f"{{env:{SPEC_ENV_PREFIX}{name}}}, exported under that name")

    def url_secrets(self, path: Path_, url: str, what: str) -> None:
        self.env_refs(path, url)
        try:
            parts = urlsplit(url)
        except ValueError:
            return  # reported as a URL problem elsewhere
        if "@" in parts.netloc:
            self.add(
                path,
                f"{what} carries credentials (user:password@)",
                'no credentials in URLs; `headers: {Authorization: "Basic {env:NAME}"}`',
            )
        elif "{env:" in parts.scheme + parts.netloc:
            self.add(
                path,
                f"an {{env:...}} reference in the scheme or host of a {what}",
                "{env:NAME} in the path or query only",
            )
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            self.literal_secret(path, name, value, f"the {what}'s query parameter")

    def headers(self, path: Path_, headers: dict[str, str], *, resolved: bool) -> None:
        for name, value in headers.items():
            hpath: Path_ = (*path, name)
            if not _HEADER_NAME.match(str(name)):
                self.add(
                    hpath, f"header name {name!r}", "a header name such as X-Api-Key", key=True
                )
                continue
            if "\r" in value or "\n" in value:
                self.add(hpath, f"header {name!r} has a line break", "one line of text")
            self.env_refs(hpath, value)
            if "{env:" in value and not resolved:
                self.add(
                    hpath,
                    f"an {{env:...}} reference in DEFAULT_REQUEST_HEADERS '{name}' "
                    "(settings are not resolved)",
                    'the job-level `headers:` mapping (`Authorization: "Bearer {env:NAME}"`)',
                )
            elif is_secret_key(str(name)) and not env_names(value):
                self.add(
                    hpath,
                    f"a literal credential in header '{name}' (it would be stored and shared)",
                    '{env:NAME} in the job-level `headers:` (`Authorization: "Bearer {env:NAME}"`)',
                )

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

    def places(self, urls: Any, domains: Any) -> None:
        """Start URLs are absolute http(s) URLs and allowed domains host names. Read
        from the raw data too (:func:`check_raw`): lists of strings, else nothing."""
        for i, url in enumerate(urls if isinstance(urls, list | tuple) else ()):
            if isinstance(url, str) and not is_start_url(url):
                self.add(
                    ("start_urls", i),
                    f"start URL {url!r} is not an absolute http(s) URL",
                    "http://host/path",
                )
        hosts: list[str] = []
        for i, domain in enumerate(domains if isinstance(domains, list | tuple) else ()):
            if not isinstance(domain, str):
                continue
            if not _host_name(domain):
                wild = domain.lstrip("*.")
                self.add(
                    ("allowed_domains", i),
                    f"allowed domain {domain!r} is not a host name",
                    f"{wild} (its subdomains are allowed with it)"
                    if domain.startswith("*") and _host_name(wild)
                    else "example.org",
                )
            else:
                hosts.append(domain.strip(".").lower())
        if not hosts:  # none given (every host of the start URLs), or none readable
            return
        for i, url in enumerate(urls if isinstance(urls, list | tuple) else ()):
            if not isinstance(url, str) or not is_start_url(url):
                continue
            host = (urlsplit(_without_env(url)).hostname or "").lower()
            if host and not any(host == d or host.endswith("." + d) for d in hosts):
                self.add(
                    ("start_urls", i),
                    f"start URL host {host!r} is not in allowed_domains: the crawl would refuse it",
                    f"one of {', '.join(hosts)} (or a subdomain), or add {host!r} to them",
                )

    def run(self) -> list[SpecProblem]:
        spec = self.spec
        self.places(list(spec.start_urls), list(spec.allowed_domains or ()))
        self.settings(spec.settings)
        self.credentials()
        self.blocked_rules(("blocked",), spec.blocked)
        token_env = spec.ship.token_env
        if token_env is not None and env_refused(token_env) is not None:
            # the spec names the endpoint too: any other variable could be sent there
            self.add(
                ("ship", "token_env"),
                f"ship token_env {token_env!r}: a spec names only variables {SPEC_ENV_PREFIX}* "
                "(with `--token-env` or FRAMEWORK_SHIP_TOKEN_ENV, the operator names any)",
                f"{SPEC_ENV_PREFIX}{token_env}",
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
        edges = {
            name: {r.to for r in kind.follow} | {f.to for f in kind.forms}
            for name, kind in kinds.items()
        }
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
        self.helpers(kinds, paths)
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

    def blocked_rules(self, path: Path_, rules: tuple[BlockRule, ...]) -> None:
        """A soft-ban rule's selectors, URL regex and statuses (crawl/blocking.py)."""
        many = isinstance(self.raw(path), list)
        for i, rule in enumerate(rules):
            rpath: Path_ = (*path, i) if many else path
            if rule.css is not None:
                self.selector((*rpath, "css"), rule.css, kind="css")
            if rule.xpath is not None:
                self.selector((*rpath, "xpath"), rule.xpath, kind="xpath")
            if rule.url is not None:
                self.regex((*rpath, "url"), rule.url)
            for code in rule.status:
                if not 100 <= code <= 599:
                    self.add((*rpath, "status"), f"status {code}", "an HTTP status, 100 to 599")

    def never_runs(
        self, name: str, kind: PageKind, path: Path_, kinds: dict[str, PageKind]
    ) -> None:
        """Parts of a page kind that validate as shapes but are never sent or applied."""
        if kind.id is None:
            for tname in kind.subtabs:
                self.add(
                    (*path, "subtabs", tname),
                    f"sub-tab '{tname}' is never sent: sub-tabs are requested once per "
                    f"record with an id, and page kind '{name}' has no `id`",
                    f"`id:` on '{name}' (its records become items), or the sub-tab on the "
                    "kind that has one",
                    key=True,
                )
        if kind.format.value == "json" and kind.follow:
            fpath: Path_ = (*path, "follow")
            if isinstance(self.raw(fpath), list):
                fpath = (*fpath, 0)
            self.add(
                fpath,
                f"follow rules of page kind '{name}' are never applied: links are read from "
                "HTML pages, and it is `format: json`",
                "`pagination: {next: <JSON path>}` for next pages, or `format: html`",
            )
        pg = kind.pagination
        if pg is not None and pg.max_pages == 1:
            ppath: Path_ = (*path, "next") if path == ("list",) else (*path, "pagination")
            self.add(
                (*ppath, "max_pages"),
                "pagination with `max_pages: 1` never fetches a next page",
                "`max_pages` of 2 or more, or no pagination",
            )
        short = self.spec.list_
        if path == ("list",) and short is not None and short.follow and "detail" not in kinds:
            self.add(
                ("list", "follow"),
                "`follow` leads to the detail page, but the spec has no `detail:`",
                "a `detail:` section (its `id` and fields)",
            )

    def helpers(self, kinds: dict[str, PageKind], paths: dict[str, Path_]) -> None:
        """A field name is a helper in every kind or in none: a carried helper is left
        out of the items of every kind it reaches, which would drop a real field."""
        helper_in = {n for k in kinds.values() for n, f in k.fields.items() if f.helper}
        for name, kind in kinds.items():
            for fname, f in kind.fields.items():
                if fname in helper_in and not f.helper:
                    self.add(
                        (*paths[name], "fields", fname),
                        f"field '{fname}' is a helper in another page kind but not here",
                        "`helper: true` here too, or another name for one of them",
                        key=True,
                    )

    def known_names(
        self, name: str, kinds: dict[str, PageKind], edges: dict[str, set[str]]
    ) -> set[str]:
        """Fields of this kind and of every kind that leads to it (their values are carried)."""
        names = set(BUILTIN_NAMES)
        for other, kind in kinds.items():
            if other == name or name in _reach(other, edges):
                names.update(kind.fields)
                for form in kind.forms:  # values a form carries to the pages it leads to
                    for fld in form.fields.values():
                        names.update(n for n in (fld.carry, fld.carry_label) if n)
        return names

    def forms(
        self,
        name: str,
        kind: PageKind,
        path: Path_,
        kinds: dict[str, PageKind],
        edges: dict[str, set[str]],
    ) -> None:
        """A page kind's ``forms:`` (crawl/forms.py): the form's selector, the kind of its
        response, the field templates, and credentials only in a POST body."""
        many = isinstance(self.raw((*path, "forms")), list)
        known = self.known_names(name, kinds, edges)
        for i, form in enumerate(kind.forms):
            fpath: Path_ = (*path, "forms", i) if many else (*path, "forms")
            if kind.format.value != "html":
                self.add(
                    fpath,
                    f"a form on a `format: {kind.format.value}` page is never submitted",
                    "`forms:` on an HTML page kind",
                    key=True,
                )
            if form.css is not None:
                self.selector((*fpath, "css"), form.css, kind="css")
            if form.xpath is not None:
                self.selector((*fpath, "xpath"), form.xpath, kind="xpath")
            if form.to not in kinds:
                self.add(
                    (*fpath, "to"),
                    f"`to: {form.to}` names no page kind",
                    f"one of: {', '.join(kinds)}",
                )
            for fname, fld in form.fields.items():
                vpath: Path_ = (*fpath, "fields", fname)
                texts = [fld.value] if fld.value is not None else list(fld.values or ())
                raw = self.raw(vpath)
                for j, text in enumerate(texts):
                    tpath: Path_ = vpath
                    if isinstance(raw, list):
                        tpath = (*vpath, j)
                    elif isinstance(raw, dict):
                        tpath = (
                            (*vpath, "value") if fld.value is not None else (*vpath, "values", j)
                        )
                    self.template(tpath, text, known, "form field template")
                    self.env_refs(tpath, text)
                    if env_names(text) and form.method != "POST":
                        self.add(
                            tpath,
                            f"an {{env:...}} reference in form field '{fname}' of a form "
                            "whose method the page decides (a GET would put it in a URL)",
                            "`method: POST` on this form",
                        )
                    self.literal_secret(tpath, str(fname), text, "form field")

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
        fields_json = json_page
        if isinstance(raw.get("each"), dict):
            self.records((*path, "each"), raw["each"], json_page=json_page)
            fields_json = True  # the records are JSON values: `json:` paths read them
        elif kind.each is not None:
            if json_page:
                self.jsonpath((*path, "each"), kind.each)
            else:
                self.selector((*path, "each"), kind.each, kind="any")
        if "id" in raw:
            self.field((*path, "id"), raw["id"], json_page=fields_json)
            if isinstance(raw["id"], dict) and raw["id"].get("helper"):
                self.add(
                    (*path, "id", "helper"),
                    "`helper` on the id (it is the item's source_id)",
                    "`helper: true` on other fields",
                )
        for fname, fraw in (raw.get("fields") or {}).items():
            if fname in RESERVED_FIELDS:
                self.add(
                    (*path, "fields", fname),
                    f"field name '{fname}' is reserved",
                    "another name",
                    key=True,
                )
            self.field((*path, "fields", fname), fraw, json_page=fields_json)
        known = {*kind.fields, "id"} if kind.id is not None else set(kind.fields)
        for i, group in enumerate(kind.required_any):
            for fname in group:
                if fname not in known:
                    self.add(
                        (*path, "required_any", i)
                        if len(kind.required_any) > 1
                        else (*path, "required_any"),
                        f"required_any names unknown field '{fname}'",
                        f"one of: {', '.join(sorted(known))}",
                    )
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
                self.deny(rpath, rule.deny)
                if kind.format.value == "sitemap" and rule.pattern is None:
                    self.add(
                        (*rpath, "css" if rule.css is not None else "xpath"),
                        "a sitemap's follow rules match its URLs, not its markup",
                        "`pattern:` (a regex over the URL)",
                        key=True,
                    )
                if rule.to not in kinds:
                    self.add(
                        (*rpath, "to"),
                        f"`to: {rule.to}` names no page kind{_subtab_hint(rule.to, kinds)}",
                        f"one of: {', '.join(kinds)}",
                    )
        self.sitemap_kind(path, kind, raw)
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
        self.blocked_rules((*path, "blocked"), kind.blocked)
        self.never_runs(name, kind, path, kinds)
        self.forms(name, kind, path, kinds, edges)
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
            raw_tab = self.raw(tpath) or {}
            if isinstance(raw_tab.get("each"), dict):
                self.records((*tpath, "each"), raw_tab["each"], json_page=tab_json)
                tab_json = True
            elif tab.each is not None:
                if tab_json:
                    self.jsonpath((*tpath, "each"), tab.each)
                else:
                    self.selector((*tpath, "each"), tab.each, kind="any")
            for fname, fraw in (raw_tab.get("fields") or {}).items():
                self.field((*tpath, "fields", fname), fraw, json_page=tab_json)
                if isinstance(fraw, dict) and fraw.get("helper"):
                    self.add(
                        (*tpath, "fields", fname, "helper"),
                        "`helper` on a field of a sub-tab",
                        "`helper: true` on a page kind's own fields",
                    )

    def deny(self, rpath: Path_, deny: Iterable[str]) -> None:
        raw = self.raw((*rpath, "deny"))
        for i, expr in enumerate(deny):
            self.regex((*rpath, "deny", i) if isinstance(raw, list) else (*rpath, "deny"), expr)

    def sitemap_kind(self, path: Path_, kind: PageKind, raw: dict[str, Any]) -> None:
        """A ``format: sitemap`` kind only discovers: its rules map URLs to kinds."""
        if kind.format.value != "sitemap":
            if kind.sitemap is not None:
                self.add(
                    (*path, "sitemap"),
                    "`sitemap:` on a page that is not a sitemap",
                    "`format: sitemap` on this page kind",
                    key=True,
                )
            return
        for key in ("each", "id", "fields", "pagination", "subtabs", "required_any"):
            if key in raw:
                self.add(
                    (*path, key),
                    f"`{key}` on a sitemap page kind (a sitemap holds URLs, not records)",
                    "`follow` rules (pattern -> to) and `sitemap` options only",
                    key=True,
                )
        # without a `render` of its own a sitemap is fetched over HTTP (spec/render.py)
        if kind.render is not None and kind.render.value != "http":
            self.add((*path, "render"), "a sitemap is not rendered", "`render: http`")
        if not kind.follow:
            self.add(
                path,
                "a sitemap page kind without follow rules discovers no page",
                "`follow: [{pattern: <regex>, to: <kind>}]`",
                key=True,
            )
        if kind.sitemap is not None:
            raw_follow = self.raw((*path, "sitemap", "follow"))
            for i, expr in enumerate(kind.sitemap.follow):
                self.regex(
                    (*path, "sitemap", "follow", i)
                    if isinstance(raw_follow, list)
                    else (*path, "sitemap", "follow"),
                    expr,
                )


def _subtab_hint(to: str, kinds: dict[str, PageKind]) -> str:
    """Why a `to:` naming a sub-tab cannot work: a sub-tab is requested per record."""
    for name, kind in kinds.items():
        for tab in kind.subtabs:
            if to in (tab, f"{name}.{tab}"):
                return (
                    f" (it is a sub-tab of '{name}': sub-tabs are requested once per record "
                    "from their `url:` template, never followed from links)"
                )
    return ""


def _is_scrapy_setting(name: str) -> bool:
    from scrapy.settings import default_settings  # only when a spec sets one we refuse

    return name in vars(default_settings) or name.startswith(("FRAMEWORK_", "PLAYWRIGHT_"))


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


def check_raw(doc: Document) -> list[SpecProblem]:
    """What can be checked of a spec whose shape the models refused.

    Without a model there is no meaning to check across keys, but the start URLs (and
    credentials in them), allowed domains, job-level headers and settings are where they
    are, and each expression is where the models would have put it (page kinds under
    ``pages:``, ``list:`` and ``detail:``; their ``each``, fields, follow rules,
    pagination and sub-tabs), so a bad selector is reported in the same run as the
    structural errors, not after they are fixed. Only the raw data is read: a value of
    the wrong shape is the models' problem, said once, not again here."""
    checker = _Checker(cast(JobSpec, None), doc)  # the raw checks never read the model
    data = doc.data if isinstance(doc.data, dict) else {}
    urls = data.get("start_urls")
    checker.places(urls, data.get("allowed_domains"))
    for i, url in enumerate(urls if isinstance(urls, list) else ()):
        if isinstance(url, str):
            checker.url_secrets(("start_urls", i), url, "start URL")  # a literal credential
    headers = data.get("headers")
    if isinstance(headers, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        checker.headers(("headers",), headers, resolved=True)
    settings = data.get("settings")
    if isinstance(settings, dict):  # names that are not text: the models say so
        checker.settings({k: v for k, v in settings.items() if isinstance(k, str)})
    kinds: list[tuple[Path_, Any]] = [((k,), data.get(k)) for k in ("list", "detail")]
    pages = data.get("pages")
    if isinstance(pages, dict):
        kinds += [(("pages", name), raw) for name, raw in pages.items()]
    for path, raw in kinds:
        if isinstance(raw, dict):
            _raw_page(checker, path, raw)
    return checker.problems


def _raw_page(checker: _Checker, path: Path_, raw: dict[str, Any]) -> None:
    json_page = raw.get("format") == "json"
    # records that are data in the page are JSON values: `json:` paths read them
    fields_json = json_page or isinstance(raw.get("each"), dict)
    if isinstance(raw.get("each"), dict):
        checker.records((*path, "each"), raw["each"], json_page=json_page)

    def expression(p: Path_, expr: Any) -> None:
        if not isinstance(expr, str):
            return  # not text: the models say so
        if json_page:
            checker.jsonpath(p, expr)
        else:
            checker.selector(p, expr, kind="any")

    expression((*path, "each"), raw.get("each"))
    if "id" in raw:
        checker.field((*path, "id"), raw["id"], json_page=fields_json)
    fields = raw.get("fields")
    if isinstance(fields, dict):
        for name, fraw in fields.items():
            checker.field((*path, "fields", name), fraw, json_page=fields_json)
    follow = raw.get("follow")
    rules = list(enumerate(follow)) if isinstance(follow, list) else [(None, follow)]
    for i, rule in rules:
        rpath: Path_ = (*path, "follow") if i is None else (*path, "follow", i)
        if isinstance(rule, str):
            checker.selector(rpath, rule, kind="any")
        elif isinstance(rule, dict):
            for key, kind in (("css", "css"), ("xpath", "xpath")):
                if isinstance(rule.get(key), str):
                    checker.selector((*rpath, key), rule[key], kind=kind)
            if isinstance(rule.get("pattern"), str):
                checker.regex((*rpath, "pattern"), rule["pattern"])
            deny = rule.get("deny")
            for j, expr in enumerate(deny) if isinstance(deny, list) else [(None, deny)]:
                if isinstance(expr, str):
                    checker.regex((*rpath, "deny") if j is None else (*rpath, "deny", j), expr)
    expression((*path, "next"), raw.get("next"))
    pagination = raw.get("pagination")
    if isinstance(pagination, dict):
        expression((*path, "pagination", "next"), pagination.get("next"))
    forms = raw.get("forms")
    for i, form in list(enumerate(forms)) if isinstance(forms, list) else [(None, forms)]:
        if isinstance(form, dict):
            fpath: Path_ = (*path, "forms") if i is None else (*path, "forms", i)
            for key in ("css", "xpath"):
                if isinstance(form.get(key), str):
                    checker.selector((*fpath, key), form[key], kind=key)
    subtabs = raw.get("subtabs")
    for tname, tab in subtabs.items() if isinstance(subtabs, dict) else ():
        if not isinstance(tab, dict):
            continue
        tpath: Path_ = (*path, "subtabs", tname)
        each = tab.get("each")
        tab_json = tab.get("format") == "json" or isinstance(each, dict)
        if isinstance(each, str):
            if tab_json:
                checker.jsonpath((*tpath, "each"), each)
            else:
                checker.selector((*tpath, "each"), each, kind="any")
        tab_fields = tab.get("fields")
        if isinstance(tab_fields, dict):
            for fname, fraw in tab_fields.items():
                checker.field((*tpath, "fields", fname), fraw, json_page=tab_json)


def check(spec: JobSpec, doc: Document) -> list[SpecProblem]:
    """Every semantic problem of the spec, sorted by position."""
    problems = _Checker(spec, doc).run()
    problems += render_problems(spec, doc)  # `render`/`browser`, and can a renderer run here
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.what))


def validate(spec: JobSpec, doc: Document) -> JobSpec:
    """Return the spec, or raise :class:`SpecError` with every problem found."""
    problems = check(spec, doc)
    if problems:
        raise SpecError(problems)
    return spec
