"""A field's checks: its sources compile and fit the page (``json:`` on JSON pages,
selectors on HTML ones), its options and rules fit its type, its default converts,
and a nested group's rows (``each`` + ``fields``) are fields too.

Which option a type takes is the value type's own declaration
(:data:`framework.spec.values.CAPABILITIES`); what a rule's values must convert to is
:mod:`framework.spec.checks.rules`. The field is read as written (the raw YAML), so a
problem is located at the key that has it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from framework.extract.convert import CONVERTERS, ConversionError, ConvertContext
from framework.spec.checks.expressions import expression, jsonpath, regex, risk, selector
from framework.spec.checks.report import Path_, Report
from framework.spec.checks.rules import rule_problems
from framework.spec.values import SOURCE_KEYS, TYPE_OPTIONS, takes, types_taking

__all__ = ["field", "records", "row_fields", "rows"]


def _bad_date_format(fmt: str) -> str | None:
    """What strptime refuses in ``fmt`` (a bad directive, a stray %), or None."""
    try:
        time.strptime("", fmt)
    except ValueError as exc:
        text = str(exc)
        return text if "directive" in text or "stray %" in text else None
    return None


def field(r: Report, path: Path_, raw: Any, *, json_page: bool) -> None:
    """Every check of one field, written as ``raw`` (a bare selector, or a mapping)."""
    if isinstance(raw, str):
        if json_page:
            r.add(
                path,
                "a bare string is a CSS selector, but this page is `format: json`",
                "`json: <JSON path>`",
            )
        else:
            selector(r, path, raw, kind="css")
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
                r.add((*path, key), f"empty list of `{key}` fallbacks", "at least one")
        else:
            items = [((*path, key), value)]
        for p, v in items:
            source(r, p, key, v, json_page=json_page)
    _type_options(r, path, raw, type_)
    if "format" in raw and "format" in takes(type_):
        if "%" not in str(raw["format"]):
            r.add(
                (*path, "format"),
                f"date format {raw['format']!r} has no % directive",
                "e.g. %d.%m.%Y",
            )
        elif (bad := _bad_date_format(str(raw["format"]))) is not None:
            # a bad directive never matches: the field would fall back to the
            # built-in forms without a word, or fail on every page
            r.add((*path, "format"), f"date format {raw['format']!r}: {bad}", "e.g. %d.%m.%Y")
    if "pattern" in raw:
        regex(r, (*path, "pattern"), raw["pattern"])
    lo_len, hi_len = raw.get("min_length"), raw.get("max_length")
    if isinstance(lo_len, int) and isinstance(hi_len, int) and lo_len > hi_len:
        r.add(
            (*path, "max_length"),
            f"max_length {hi_len} is below min_length {lo_len}",
            "min_length <= max_length",
        )
    if "enum" in raw and not (isinstance(raw["enum"], list) and raw["enum"]):
        r.add((*path, "enum"), "`enum` is not a list of values", "at least one value")
    lo, hi = raw.get("min"), raw.get("max")
    if isinstance(lo, int | float) and isinstance(hi, int | float) and lo > hi:
        r.add((*path, "max"), f"max {hi} is below min {lo}", "min <= max")
    for i, rep in enumerate(raw.get("replace") or ()):
        if isinstance(rep, dict):
            pattern = rep.get("pattern")
            try:
                re.compile(pattern if isinstance(pattern, str) else "")
            except re.error as exc:
                r.add(
                    (*path, "replace", i, "pattern"),
                    f"invalid regex {pattern!r}: {exc}",
                    "a valid regex",
                )
            else:
                if isinstance(pattern, str):
                    risk(r, (*path, "replace", i, "pattern"), pattern)
    languages = r.spec.languages if r.spec is not None else ()
    for sub, what, expected in rule_problems(raw, type_, languages):
        r.add((*path, *sub), what, expected)  # rules that can never pass (checks/rules.py)
    default = raw.get("default")
    if default is not None and type_ in CONVERTERS and type_ not in ("string", "url"):
        try:
            CONVERTERS[type_](
                default, ConvertContext(date_format=raw.get("format"), absolute=False)
            )
        except (ConversionError, TypeError, ValueError) as exc:
            r.add((*path, "default"), f"default {default!r} is not a {type_}: {exc}", f"a {type_}")
    each, fields = raw.get("each"), raw.get("fields")
    if each is not None and fields is None:
        r.add(
            (*path, "each"),
            "`each` without `fields`",
            "`fields:` for the rows of a nested group",
        )
    if "pairs" in raw:
        for key in ("many", "each", "fields"):
            if raw.get(key):
                r.add(
                    (*path, key),
                    f"`{key}` with `pairs` (the pairs are one mapping)",
                    "`pairs` alone, or a nested group (`each` + `fields`)",
                )
        if "pairs" not in takes(type_):
            r.add(
                (*path, "type"),
                f"`pairs` with type {type_}",
                "type string (the value is a mapping of texts)",
            )
    if fields is not None and each is not None:
        rows_json = rows(r, (*path, "each"), each, each, json_page=json_page)
        if isinstance(fields, dict):
            row_fields(r, (*path, "fields"), fields, json_page=rows_json, of="a nested group")


def row_fields(r: Report, path: Path_, fields: dict[str, Any], *, json_page: bool, of: str) -> None:
    """The fields of the rows of a nested group or a sub-tab: fields, never helpers (a
    helper is a value of the page kind's templates)."""
    for name, sub in fields.items():
        field(r, (*path, name), sub, json_page=json_page)
        if isinstance(sub, dict) and sub.get("helper"):
            r.add(
                (*path, name, "helper"),
                f"`helper` on a field of {of}",
                "`helper: true` on a page kind's own fields",
            )


def _type_options(r: Report, path: Path_, raw: dict[str, Any], type_: str) -> None:
    """The options and rules that only some types take (``format``, ``min``,
    ``magnitude`` ...: framework/spec/values.py, CAPABILITIES), on a field of another."""
    for key in sorted(TYPE_OPTIONS - takes(type_) - {"pairs"}):  # pairs: its own message
        # an empty `languages` says nothing: the job's apply
        if key not in raw or (key == "languages" and not raw[key]):
            continue
        also = " (`frozen: true` for other values)" if key == "max_change" else ""
        r.add(
            (*path, key),
            f"`{key}` on a field of type {type_}",
            f"type {_either(types_taking(key))}{also}",
        )


def _either(names: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"


def rows(r: Report, path: Path_, raw: Any, each: Any, *, json_page: bool) -> bool:
    """The ``each`` of a page kind, sub-tab or nested group, written as ``raw`` (read
    by the models as ``each``); whether its rows are JSON values (read by ``json:``)."""
    if isinstance(raw, dict):
        records(r, path, raw, json_page=json_page)
        return True  # records that are data in the page are JSON values
    if each is not None:
        expression(r, path, each, json_page=json_page)
    return json_page


def records(r: Report, path: Path_, raw: Any, *, json_page: bool) -> None:
    """An ``each`` mapping: records that are data in the page (models.Records)."""
    if not isinstance(raw, dict):
        return  # not a mapping: the models say so
    if json_page:
        r.add(
            path,
            "records from embedded data on a `format: json` page",
            "a JSON path (`each: $.rows[*]`), or `format: html`",
        )
        return
    if isinstance(raw.get("embedded"), dict):
        embedded(r, (*path, "embedded"), raw["embedded"])
    for key in ("jsonld", "microdata"):
        value = raw.get(key)
        if key in raw and (not isinstance(value, str) or not value.strip()):
            r.add(
                (*path, key),
                f"`{key}` is not a type name",
                "a type such as Quote or https://schema.org/Quote, or * for every object",
            )


def embedded(r: Report, path: Path_, value: dict[str, Any]) -> None:
    """``embedded: {script, var, re, path}`` (a field source or a records' source)."""
    known = {"re", "script", "var", "path"}
    for extra in sorted(set(value) - known):
        r.add(
            (*path, extra),
            f"unknown key '{extra}' in `embedded`",
            "script, var, re, path",
            key=True,
        )
    if not any(k in value for k in ("re", "script", "var")):
        r.add(
            path,
            "`embedded` says nowhere where the JSON is",
            "`script: <selector>`, `var: <name>` or `re: <regex>` (and `path`)",
        )
    if "re" in value and "var" in value:
        r.add((*path, "var"), "`embedded` with both `var` and `re`", "one of them")
    if "re" in value:
        regex(r, (*path, "re"), value["re"])
    if "script" in value:
        selector(r, (*path, "script"), value["script"], kind="any")
    if "var" in value:
        var = value["var"]
        if not isinstance(var, str) or not re.fullmatch(r"[A-Za-z_$][\w$]*(\.[\w$]+)*", var):
            r.add(
                (*path, "var"),
                f"`var` {var!r} is not a JavaScript name",
                "a name such as data or window.__STATE__",
            )
    if "path" in value:
        jsonpath(r, (*path, "path"), value["path"])


def pairs(r: Report, path: Path_, value: Any, *, json_page: bool) -> None:
    """``pairs: {each, key, value}``: one mapping from a definition list or table."""
    if not isinstance(value, dict) or "each" not in value:
        r.add(
            path,
            "`pairs` needs a mapping with `each` (one element per pair)",
            "{each: <selector>, key: <selector>, value: <selector>}",
        )
        return
    for extra in sorted(set(value) - {"each", "key", "value"}):
        r.add((*path, extra), f"unknown key '{extra}' in `pairs`", "each, key, value", key=True)
    each = value["each"]
    as_json = isinstance(each, str) and each.lstrip().startswith("$")
    if json_page and not as_json:
        r.add(
            (*path, "each"),
            "`pairs` on JSON records takes JSON paths",
            "`each: $.<the list of pairs>` with `key` and `value` paths",
        )
        return
    for key in ("each", "key", "value"):
        if key not in value:
            continue
        expression(r, (*path, key), value[key], json_page=as_json)


def source(r: Report, path: Path_, key: str, value: Any, *, json_page: bool) -> None:
    if key in ("css", "xpath", "count"):
        if json_page:
            r.add(path, f"a `{key}` selector on a `format: json` page", "`json: <JSON path>`")
            return
        selector(r, path, value, kind={"count": "any"}.get(key, key))
    elif key in ("re", "url"):
        regex(r, path, value)
    elif key == "json":
        if not json_page:
            r.add(
                path,
                "a `json` path on an HTML page",
                "css/xpath, or `embedded: {re, path}` for JSON inside the page",
            )
            return
        jsonpath(r, path, value)
    elif key == "embedded":
        if not isinstance(value, dict):
            r.add(
                path,
                "`embedded` needs a mapping: where the JSON is (`script`, `var` or `re`) "
                "and `path`",
                "{var: data, path: $...}",
            )
            return
        embedded(r, path, value)
    elif key == "pairs":
        pairs(r, path, value, json_page=json_page)
