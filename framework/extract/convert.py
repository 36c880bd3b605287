"""Value normalisation and type conversion for extracted fields.

Owns the rules that turn a raw extracted value (a string from HTML, or a JSON value)
into the typed value of a field. Pure functions, no I/O, no pydantic: this runs for
every field of every record. A converter returns the converted value or raises
:class:`ConversionError` with a message meant for a human.

Rules (documented in docs/spec-reference.md):

* string: scalars become ``str``; JSON objects/arrays are kept as they are.
* integer / number: the first numeric token of the text; currency symbols, letters,
  ``%`` and spaces are dropped. Separators: when both ``.`` and ``,`` occur, the last
  one is the decimal mark; a mark that occurs more than once is a thousands separator;
  a single ``,`` followed by exactly three digits is a thousands separator, any other
  single ``,`` a decimal mark; a single ``.`` is always a decimal mark; ``'``, spaces,
  NBSP and thin spaces group thousands. A leading ``-`` or Unicode minus (not one
  joining a word, as in ``A-12``) makes it negative, and so do parentheses that enclose
  the whole value (``(1,234)``, ``($1,234.00)``; a currency symbol or a three-letter code
  may sit with the number), never parentheses around words (``In stock (15 available)``
  is 15). An integer must be integral (``12.0`` -> 12). A ``count`` source gives a
  whole number: a field whose only sources are ``count`` is an integer unless it says
  otherwise.
* boolean: yes/no, true/false, 1/0, on/off, y/n (any case).
* date: ISO ``YYYY-MM-DD`` out. In: ISO (a datetime's date part too), the field's
  ``format`` (strptime), then ``DD.MM.YYYY``, ``DD/MM/YYYY``, ``YYYY/MM/DD``,
  ``Month D, YYYY``, ``D Month YYYY`` (English month names, full or short); then, only
  when the field or job names ``languages:``, ``dateparser`` restricted to those
  languages, absolute dates only (no "yesterday"), day, month and year all required.
* datetime: ISO 8601 out. In: ISO (``Z`` allowed), ``format``, the date forms above
  with ``HH:MM[:SS]``, a date alone (midnight), or a JSON number (Unix seconds, UTC).
* url: whitespace stripped; resolved against the page URL when ``absolute``.
* price: ``{"amount": <number>, "currency": <str | None>}`` read by Zyte's
  ``price-parser`` (its own separator rules; the currency as written: ``$``, ``EUR``,
  ``Rp``); a JSON number is an amount without a currency. ``min``/``max`` bound the amount.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urljoin

__all__ = [
    "CONVERTERS",
    "ConversionError",
    "Normaliser",
    "known_language",
    "to_boolean",
    "to_date",
    "to_datetime",
    "to_integer",
    "to_number",
    "to_price",
    "to_string",
]


class ConversionError(ValueError):
    """A value that cannot become the field's type."""


class Normaliser:
    """String normalisation of one field, built once: whitespace, case, replacements."""

    __slots__ = ("_collapse", "_lower", "_replace", "_strip", "identity")

    _WS = re.compile(r"\s+")

    def __init__(
        self,
        *,
        strip: bool,
        collapse: bool,
        lowercase: bool,
        replace: tuple[tuple[Any, str], ...] = (),  # (pattern with .sub(to, s), to)
    ) -> None:
        self._strip = strip
        self._collapse = collapse
        self._lower = lowercase
        self._replace = replace
        self.identity = not (strip or collapse or lowercase or replace)

    def __call__(self, s: str) -> str:
        if self._collapse:
            # str.split() splits on every Unicode space (NBSP too) and drops the ends
            s = " ".join(s.split()) if self._strip else self._WS.sub(" ", s)
        elif self._strip:
            s = s.strip()
        if self._lower:
            s = s.lower()
        for pattern, to in self._replace:
            s = pattern.sub(to, s)
        return s


def to_string(value: Any, ctx: ConvertContext) -> Any:
    if isinstance(value, str | dict | list):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # XPath numbers are floats: count(//tr) is "3", not "3.0"
    return str(value)


# a sign counts only when it does not join two words ("A-12" is not minus twelve)
_NUM_TOKEN = re.compile(
    r"(?:(?<!\w)[-+\u2212])?\s?\d+(?:[.,]\d+|['\u00a0\u202f\u2009 ]\d{3}(?!\d))*"
)
_GROUPING = str.maketrans("", "", "'\u00a0\u202f\u2009 ")
_CODE = re.compile(r"[A-Z]{3}")


def _money_only(text: str) -> bool:
    """Nothing but spaces, currency symbols and at most one three-letter code: what may
    stand beside an accounting amount inside or around its parentheses."""
    rest = "".join(c for c in text if not (c.isspace() or unicodedata.category(c) == "Sc"))
    return not rest or _CODE.fullmatch(rest) is not None


def _accounting_negative(text: str, start: int, end: int) -> bool:
    """Parentheses make a number negative only when they enclose the whole value: the
    accounting ``(1,234)``, not ``In stock (15 available)`` nor ``Total 5 (approx)``."""
    before, after = text[:start], text[end:]
    open_at, close_at = before.rfind("("), after.find(")")
    if open_at < 0 or close_at < 0:
        return False
    return (
        _money_only(before[:open_at])
        and _money_only(before[open_at + 1 :])
        and _money_only(after[:close_at])
        and _money_only(after[close_at + 1 :])
    )


def _parse_number(text: str) -> int | float:
    m = _NUM_TOKEN.search(text)
    if m is None:
        raise ConversionError(f"no number in {text!r}")
    token = m.group(0)
    negative = "(" in text and _accounting_negative(text, m.start(), m.end())
    token = token.translate(_GROUPING)
    if token[0] in "-+\u2212":
        negative = negative or token[0] != "+"
        token = token[1:]
    dots, commas = token.count("."), token.count(",")
    if dots and commas:
        if token.rfind(".") > token.rfind(","):
            token = token.replace(",", "")
        else:
            token = token.replace(".", "").replace(",", ".")
    elif commas:
        head, _, tail = token.rpartition(",")
        token = token.replace(",", "") if commas > 1 or len(tail) == 3 else f"{head}.{tail}"
    elif dots > 1:
        token = token.replace(".", "")
    try:
        number: int | float = int(token) if "." not in token else float(token)
    except ValueError as exc:
        raise ConversionError(f"not a number: {text!r}") from exc
    return -number if negative else number


def to_number(value: Any, ctx: ConvertContext) -> int | float:
    if isinstance(value, bool):
        raise ConversionError(f"not a number: {value!r}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        number = _parse_number(value)
    else:
        raise ConversionError(f"not a number: {value!r}")
    return _finite(number, value)


def _finite(number: int | float, value: Any) -> int | float:
    """``number``, unless a float that is not finite: a 400-digit decimal or a JSON
    ``1e999999`` overflows to infinity, a JSON page may say ``NaN``, and JSON cannot
    store either (framework/extract/patterns.py, ``NotStorable``)."""
    if isinstance(number, float) and not math.isfinite(number):
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise ConversionError(f"not a finite number: {shown!r}")
    return number


def to_integer(value: Any, ctx: ConvertContext) -> int:
    number = to_number(value, ctx)
    if isinstance(number, float):
        if not number.is_integer():
            raise ConversionError(f"not a whole number: {value!r}")
        return int(number)
    return number


_TRUE = frozenset({"yes", "true", "1", "on", "y"})
_FALSE = frozenset({"no", "false", "0", "off", "n"})


def to_boolean(value: Any, ctx: ConvertContext) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConversionError(f"not a yes/no value: {value!r}")


_DATE_FORMATS = (
    "%d.%m.%Y",
    "%d/%m/%Y",
    "%Y/%m/%d",
    "%B %d, %Y",
    "%b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
)
_TIME_SUFFIXES = (" %H:%M", " %H:%M:%S")
_ORDINAL = re.compile(r"(?<=\d)(st|nd|rd|th)\b")


def _strptime_any(text: str, formats: tuple[str, ...]) -> datetime | None:
    for fmt in formats:
        fast = _numeric_format(fmt)
        if fast is not None:
            m = fast.match(text)
            if m is not None and m.end() == len(text):
                try:
                    return datetime(int(m["Y"]), int(m["m"]), int(m["d"]))
                except ValueError:
                    pass  # no such day: strptime below says so its own way
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


# strptime's own patterns for these directives (``_strptime.TimeRE``, which matches with
# IGNORECASE, then refuses a match that leaves text over): what one of them matches is
# the date strptime gives. strptime itself costs ~15 us a call (locale checks, a lock).
_NUMERIC_DIRECTIVES = {
    "d": r"(?P<d>3[0-1]|[1-2]\d|0[1-9]|[1-9]| [1-9])",
    "m": r"(?P<m>1[0-2]|0[1-9]|[1-9])",
    "Y": r"(?P<Y>\d\d\d\d)",
}
_NUMERIC_FORMATS: dict[str, re.Pattern[str] | None] = {}


def _numeric_format(fmt: str) -> re.Pattern[str] | None:
    """A format of exactly ``%d``, ``%m`` and ``%Y`` once each, separated by ``.``, ``/``
    or ``-`` (``%d.%m.%Y``), as strptime's regex; None for any other format (which
    strptime reads alone)."""
    if fmt in _NUMERIC_FORMATS:
        return _NUMERIC_FORMATS[fmt]
    parts: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            d = fmt[i + 1 : i + 2]
            if d not in _NUMERIC_DIRECTIVES or d in seen:
                parts = []
                break
            seen.add(d)
            parts.append(_NUMERIC_DIRECTIVES[d])
            i += 2
        elif c in "./-":
            parts.append(re.escape(c))
            i += 1
        else:
            parts = []
            break
    compiled = (
        re.compile("".join(parts), re.IGNORECASE) if parts and seen == {"d", "m", "Y"} else None
    )
    if len(_NUMERIC_FORMATS) < 256:  # formats come from specs: a few per job
        _NUMERIC_FORMATS[fmt] = compiled
    return compiled


def to_date(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date: {value!r}")
    text = " ".join(value.split())
    if len(text) == 10 and text[4] == "-":  # fromisoformat's only 10-character forms
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            pass
    if ctx.date_format is not None:
        found = _strptime_any(text, (ctx.date_format,))
        if found is not None:
            return found.date().isoformat()
    try:
        return datetime.fromisoformat(text).date().isoformat()
    except ValueError:
        pass
    found = _strptime_any(_ORDINAL.sub("", text), _DATE_FORMATS)
    if found is None and ctx.languages:
        found = _dateparser(ctx.languages, text)
    if found is None:
        expected = f"{ctx.date_format!r} or " if ctx.date_format else ""
        raise ConversionError(f"not a date: {value!r}; expected {expected}YYYY-MM-DD")
    return found.date().isoformat()


# One parser per language set, built on first use: importing dateparser costs a
# quarter of a second and its language data more, so a job that never needs it (ISO
# dates, English dates, no `languages:`) never pays for it.
_DATEPARSERS: dict[tuple[str, ...], Any] = {}
_DATEPARSER_SETTINGS = {
    # absolute dates only: "yesterday" or "2 days ago" would invent a day from the clock
    "PARSERS": ["absolute-time"],
    # "Januari 2024" has no day; dateparser would take today's, which the text never said
    "REQUIRE_PARTS": ["day", "month", "year"],
    "RETURN_AS_TIMEZONE_AWARE": False,
}


def _dateparser(languages: tuple[str, ...], text: str) -> datetime | None:
    parser = _DATEPARSERS.get(languages)
    if parser is None:
        from dateparser.date import DateDataParser

        parser = DateDataParser(languages=list(languages), settings=_DATEPARSER_SETTINGS)
        _DATEPARSERS[languages] = parser
    try:
        found = parser.get_date_data(text).date_obj
    except ValueError as exc:  # an unknown language code (the spec's models refuse it first)
        raise ConversionError(str(exc)) from exc
    return found if isinstance(found, datetime) else None


def known_language(code: str) -> bool:
    """Whether dateparser has this language (``id``, ``pt``, ``en``): the spec checks
    ``languages:`` with it, so a typo fails before any request."""
    from dateparser.data.languages_info import language_order

    return code in language_order


_DATETIME_FORMATS = tuple(d + t for d in ("%Y-%m-%d", *_DATE_FORMATS) for t in _TIME_SUFFIXES)


def to_datetime(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date-time: {value!r}")
    text = " ".join(value.split())
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        pass
    if ctx.date_format is not None:
        found = _strptime_any(text, (ctx.date_format,))
        if found is not None:
            return found.isoformat()
    found = _strptime_any(_ORDINAL.sub("", text), _DATETIME_FORMATS) or _strptime_any(
        _ORDINAL.sub("", text), _DATE_FORMATS
    )
    if found is None and ctx.languages:
        found = _dateparser(ctx.languages, text)
    if found is None:
        raise ConversionError(f"not a date-time: {value!r}; expected ISO 8601")
    return found.isoformat()


def to_url(value: Any, ctx: ConvertContext) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"not a URL: {value!r}")
    text = value.strip()
    if ctx.absolute and ctx.base_url:
        return urljoin(ctx.base_url, text)
    return text


def _amount(value: Decimal | int | float) -> int | float:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def to_price(value: Any, ctx: ConvertContext) -> dict[str, Any]:
    if isinstance(value, bool):
        raise ConversionError(f"not a price: {value!r}")
    if isinstance(value, int | float):
        return {"amount": _finite(value, value), "currency": None}
    if not isinstance(value, str):
        raise ConversionError(f"not a price: {value!r}")
    from price_parser import Price  # light, but only jobs with prices need it

    price = Price.fromstring(value)
    if price.amount is None:
        raise ConversionError(f"no price in {value!r}")
    return {"amount": _finite(_amount(price.amount), value), "currency": price.currency}


class ConvertContext:
    """What a converter may need beyond the value (set per field, base URL per call)."""

    __slots__ = ("absolute", "base_url", "date_format", "languages")

    def __init__(
        self,
        *,
        date_format: str | None,
        absolute: bool,
        base_url: str = "",
        languages: tuple[str, ...] = (),
    ) -> None:
        self.date_format = date_format
        self.absolute = absolute
        self.base_url = base_url
        self.languages = languages  # dateparser's, for dates the fixed forms miss


CONVERTERS: dict[str, Callable[[Any, ConvertContext], Any]] = {
    "string": to_string,
    "integer": to_integer,
    "number": to_number,
    "boolean": to_boolean,
    "date": to_date,
    "datetime": to_datetime,
    "url": to_url,
    "price": to_price,
}
