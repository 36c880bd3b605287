"""Rules and value options that could never hold for the field they are on.

A rule compares the field's *converted* value (framework/extract/fields.py): an
``enum: ['4', 'five']`` on an integer field can never pass (its values are 4, never
``'4'``), nor ``expected: 'abc'`` on a number, nor ``enum: [10]`` on a price (a price is
``{amount, currency}``). Every such record would be held as invalid, and the spec
looked fine. This module converts each ``enum`` value and ``expected`` by the field's
type, as the crawl converts what it extracts, and says which can never match. It also
owns that a date field whose languages write numeric dates in different orders
declares one. Which type takes which option (``magnitude``, ``pick``, ``free``,
``date_order`` ...) is the value type's declaration (framework/spec/values.py), checked
by :mod:`framework.spec.checks.fields`.

It reads no files and knows no YAML positions: it says what is wrong, at a path below
the field, and :mod:`framework.spec.validate` puts it at ``file:line:col``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from framework.extract.convert import (
    CONVERTERS,
    ConversionError,
    ConvertContext,
    Normaliser,
    date_order_of,
    language_date_order,
)
from framework.spec.values import takes

__all__ = ["Problem", "rule_problems"]

Problem = tuple[tuple[str | int, ...], str, str]  # (path below the field, what, expected)


def rule_problems(raw: dict[str, Any], type_: str, job_languages: tuple[str, ...]) -> list[Problem]:
    """Every problem of the rules and value options of one field, written as ``raw``."""
    out = _date_order(raw, type_, job_languages)
    if type_ not in CONVERTERS:
        return out
    ctx = _context(raw, type_, job_languages)
    many = bool(raw.get("many"))
    enum = raw.get("enum")
    if isinstance(enum, list):
        for i, value in enumerate(enum):
            why = _never(value, type_, ctx, raw)
            if why is not None:
                out.append((("enum", i), f"enum value {value!r} {why[0]}", why[1]))
    if raw.get("expected") is not None:
        expected = raw["expected"]
        if many and not isinstance(expected, list):
            out.append(
                (
                    ("expected",),
                    f"expected {expected!r} on a `many` field, whose value is a list",
                    "a list of values",
                )
            )
        else:
            for sub, value in _each(expected, many):
                why = _never(value, type_, ctx, raw)
                if why is not None:
                    out.append((("expected", *sub), f"expected {value!r} {why[0]}", why[1]))
    return out


def _each(expected: Any, many: bool) -> Iterator[tuple[tuple[int, ...], Any]]:
    if many:
        for i, value in enumerate(expected):
            yield (i,), value
    else:
        yield (), expected


def _context(raw: dict[str, Any], type_: str, job_languages: tuple[str, ...]) -> ConvertContext:
    languages = raw.get("languages") or job_languages
    languages = (languages,) if isinstance(languages, str) else tuple(languages)
    order = raw.get("date_order")
    free = raw.get("free")
    return ConvertContext(
        date_format=raw.get("format") if isinstance(raw.get("format"), str) else None,
        absolute=False,
        languages=languages,
        date_order=date_order_of(order if isinstance(order, str) else None, languages)
        if "date_order" in takes(type_)
        else None,
        magnitude=raw.get("magnitude") is True,
        pick=raw.get("pick") if isinstance(raw.get("pick"), str) else None,
        free=free if isinstance(free, int | float) and not isinstance(free, bool) else None,
    )


def _never(
    value: Any, type_: str, ctx: ConvertContext, raw: dict[str, Any]
) -> tuple[str, str] | None:
    """(why, what to write instead) when the field can never have ``value``, else None."""
    if type_ == "price" and isinstance(value, dict):
        amount, currency = value.get("amount"), value.get("currency")
        if (
            set(value) <= {"amount", "currency"}
            and isinstance(amount, int | float)
            and not isinstance(amount, bool)
            and (currency is None or isinstance(currency, str))
        ):
            return None
        return "is not a price", "{amount: <number>, currency: <text or null>}"
    try:
        converted = CONVERTERS[type_](value, ctx)
    except (ConversionError, TypeError, ValueError) as exc:
        return f"is not {_a(type_)}: {exc}", _a(type_)
    if type_ == "string" and isinstance(converted, str):
        norm = Normaliser(
            strip=raw.get("strip", True) is not False,
            collapse=raw.get("collapse", True) is not False,
            lowercase=raw.get("lowercase") is True,
        )
        if norm(converted) != converted:
            return (
                "is never the field's text (its text is normalised: whitespace, case)",
                repr(norm(converted)),
            )
    relative = isinstance(converted, str) and not urlsplit(converted).scheme
    if type_ == "url" and raw.get("absolute", True) is not False and relative:
        return (
            "is relative, and the field's URLs are resolved against the page",
            "an absolute URL (or `absolute: false`)",
        )
    if converted != value:
        if type_ == "price":
            return (
                "is never a price's value (a price is {amount, currency}; "
                "`min`/`max` bound the amount)",
                repr(converted),
            )
        return f"is never the value of {_a(type_)} field (it reads as {converted!r})", repr(
            converted
        )
    return None


def _a(type_: str) -> str:
    return f"an {type_}" if type_ == "integer" else f"a {type_}"


def _date_order(raw: dict[str, Any], type_: str, job_languages: tuple[str, ...]) -> list[Problem]:
    """A date field whose languages write numeric dates in different orders (``en``
    month first, ``id`` day first) and no ``date_order`` would read ``03/04/2024`` one
    way or the other: it must say which."""
    if "date_order" not in takes(type_) or raw.get("date_order") or raw.get("format"):
        return []
    own = raw.get("languages")
    languages = own or job_languages
    languages = (languages,) if isinstance(languages, str) else tuple(languages or ())
    orders = {code: language_date_order(code) for code in languages if isinstance(code, str)}
    if len(set(orders.values()) - {None}) < 2:
        return []
    said = ", ".join(f"{code} {order}" for code, order in orders.items() if order)
    return [
        (
            ("languages",) if own else ("type",),
            f"the languages write numeric dates in different orders ({said}): "
            "03/04/2024 would be read one way or the other",
            "`date_order: DMY`, `MDY` or `YMD` on the field",
        )
    ]
