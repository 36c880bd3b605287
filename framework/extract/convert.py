"""Value normalisation and type conversion for extracted fields.

Owns the rules that turn a raw extracted value (a string from HTML, or a JSON value)
into the typed value of a field. Pure functions, no I/O, no pydantic: this runs for
every field of every record. A converter returns the converted value or raises
:class:`ConversionError` with a message meant for a human. A value is right or it
fails: a text the rules cannot read without guessing fails, it never becomes a
plausible wrong number, date or URL.

The contract (docs/spec-reference.md, "Types", whose example table the tests run):

* string: scalars become ``str``; JSON objects/arrays are kept as they are.
* integer / number: one number of the text; currency symbols, letters, ``%`` and
  spaces around it are dropped. Separators: when both ``.`` and ``,`` occur, the last
  one is the decimal mark; a mark that occurs more than once groups thousands (groups
  of three, or the Indian 2-2-3 with ``,``; anything else, ``0.000.1`` or ``1.2.3``,
  fails); a single ``,`` followed by exactly three digits groups thousands unless the
  number starts with ``0`` or another mark already groups them; any other single ``,``
  a decimal mark; a single ``.`` is always a decimal mark; ``'``, spaces, NBSP and
  thin spaces group thousands. ``.5`` is 0.5; ``1e3`` and ``1.5e-3`` are read as
  exponents; ``1_234`` fails. A leading ``-`` or Unicode minus (not one joining a word,
  as in ``A-12``), before or after a currency (``-$5``, ``$-5``, ``-EUR 5``) makes it
  negative, and so do parentheses around the whole value (``(1,234)``, ``($1,234.00)``).
  A magnitude (``63K``, ``1.2M``, ``2bn``, ``3 million``) fails unless the field says
  ``magnitude: true``. A text with several numbers takes the first, except a range
  (``10-20``, ``$10 to $20``) or a was/now text (two amounts with a currency, or
  ``was``/``now``/``save`` ...), which fails unless ``pick:`` (first, last, min, max)
  chooses. An integer must be integral (``12.0`` -> 12).
* boolean: yes/no, true/false, 1/0, on/off, y/n (any case).
* date: ISO ``YYYY-MM-DD`` out. With ``format``: that format only. Else ISO (a
  datetime's date part too); numeric dates (``12.01.2024``, ``1/2/24``) read in one
  order: the field's ``date_order``, else its languages' (dateparser's locale data),
  else day first; never swapped when a part is impossible (``2024-13-01`` fails);
  two-digit years only when an order or languages are declared. Then ``Month D,
  YYYY``, ``D Month YYYY`` (English names), then dateparser in the declared
  ``languages`` (absolute dates, day, month and year required, a numeric date in the
  text read as above).
* datetime: ISO 8601 out. The same inputs, with ``HH:MM[:SS]``; a JSON number is Unix
  seconds (UTC).
* url: no whitespace inside, parses, scheme http, https, mailto or tel; relative URLs
  resolved against the page (``absolute``). ``javascript:``, ``data:`` and text fail.
* price: ``{"amount": <number>, "currency": <str | None>}``: the amount that stands
  with the currency, read by Zyte's ``price-parser`` (its own separator rules; the
  currency as written), with the sign, range, was/now, magnitude and ``pick`` rules of
  numbers; refused: a currency that is part of a word, a percentage, 'free' (an amount
  only with ``free: 0``), two amounts with a currency. A JSON number is an amount
  without a currency.
* duration: seconds (an int when whole) of an ISO 8601 duration (``PT2H30M``,
  ``P1DT2H``; weeks and days are 7 x 24 and 24 hours; years and months fail), units
  from the largest down (``2h 30m``, ``90 min``, ``1 hour and 15 minutes``) or
  ``h:mm:ss``; a JSON number is seconds. Negative, ``1:30`` (h:mm or m:ss?) and other
  text fail.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from itertools import pairwise
from typing import Any
from urllib.parse import urljoin, urlsplit

__all__ = [
    "CONVERTERS",
    "DATE_ORDERS",
    "PICKS",
    "URL_SCHEMES",
    "ConversionError",
    "Normaliser",
    "known_language",
    "language_date_order",
    "to_boolean",
    "to_date",
    "to_datetime",
    "to_duration",
    "to_integer",
    "to_number",
    "to_price",
    "to_string",
    "to_url",
]

DATE_ORDERS = ("DMY", "MDY", "YMD")
PICKS = ("first", "last", "min", "max")
URL_SCHEMES = frozenset({"http", "https", "mailto", "tel"})


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


# ---------------------------------------------------------------- numbers

# The common plain texts ("12", "-3", "12.50") need none of the rules below: read at
# once, so the rules cost nothing on the pages that do not need them.
_PLAIN_INT = re.compile(r"-?\d{1,18}")
_PLAIN_FLOAT = re.compile(r"-?\d{1,15}\.\d{1,15}")

# One number as written: an optional leading dot (".5"), digits joined by marks (each
# checked afterwards), spaces or apostrophes only before a group of exactly three
# digits, an exponent not glued to a word ("1e3", not "1e3a").
_TOKEN = re.compile(
    r"(?P<dot>\.)?(?P<body>\d+(?:(?:[.,_]|['\u00a0\u202f\u2009 ](?=\d{3}(?!\d)))\d+)*)"
    r"(?P<exp>[eE][-+\u2212]?\d+(?![^\W\d_]))?"
)
_SPACES = str.maketrans("", "", "'\u00a0\u202f\u2009 ")
# currency symbols (Unicode's Sc category, the common ones) and what is written like one
_SYMBOLS = "$\u00a2\u00a3\u00a5\u20a0-\u20bf\ufdfc\ufe69\uff04\uffe0\uffe1\uffe5\uffe6\u0e3f\u09f3"
_CURRENCY = (
    rf"(?:[A-Za-z]{{0,3}}[{_SYMBOLS}]|(?<![A-Za-z])(?:[A-Z]{{3}}|Rp|Rs\.?|kr|z\u0142|K\u010d|lei))"
)
# a sign before the digits, with a currency between or not ("-$5", "$-5", "-EUR 5")
_SIGN_BEFORE = re.compile(rf"([-+\u2212])\s?(?:{_CURRENCY}\s?)?$")
_CURRENCY_ANY = re.compile(_CURRENCY)
_CURRENCY_BEFORE = re.compile(rf"{_CURRENCY}\s?[-+\u2212]?\s?$")
_CURRENCY_AFTER = re.compile(rf"\s?{_CURRENCY}(?![A-Za-z])")
_MAGNITUDES = {
    "k": 1_000,
    "K": 1_000,
    "thousand": 1_000,
    "rb": 1_000,
    "ribu": 1_000,
    "M": 1_000_000,
    "MM": 1_000_000,
    "mln": 1_000_000,
    "mio": 1_000_000,
    "Mio": 1_000_000,
    "million": 1_000_000,
    "jt": 1_000_000,
    "juta": 1_000_000,
    "lakh": 100_000,
    "crore": 10_000_000,
    "B": 1_000_000_000,
    "bn": 1_000_000_000,
    "Bn": 1_000_000_000,
    "BN": 1_000_000_000,
    "Mrd": 1_000_000_000,
    "mrd": 1_000_000_000,
    "billion": 1_000_000_000,
    "miliar": 1_000_000_000,
    "trillion": 1_000_000_000_000,
}
_MAGNITUDE = re.compile(
    r"\s?(?P<word>"
    + "|".join(sorted(map(re.escape, _MAGNITUDES), key=len, reverse=True))
    + r"|(?i:thousand|million|billion|trillion)s?)\.?(?![^\W\d_])"
)
# what joins the two ends of a range: "10-20", "$10 - $20", "10 to 20", "10 bis 20"
_RANGE_JOIN = re.compile(
    r"\s*(?:[-\u2013\u2014~]|to|bis|sampai|hingga|s/d|until|through|au|a)\s*", re.IGNORECASE
)
_WAS_NOW = re.compile(
    r"\b(?:was|now|save|instead|before|regular|reg|orig|original|originally|rrp|msrp|"
    r"sale|off|statt|jetzt|dulu|sekarang|hemat)\b",
    re.IGNORECASE,
)
_FREE = re.compile(r"\b(?:free|gratis|kostenlos|gratuit|gratuito)\b", re.IGNORECASE)
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


def _grouped(head: str, groups: list[str], indian: bool) -> bool:
    """Whether ``head`` then ``groups`` are thousands groups: a head of 1-3 digits that
    does not start with 0, then groups of three (or 2-2-...-3, the Indian way)."""
    if not 1 <= len(head) <= 3 or head[0] == "0":
        return False
    if all(len(g) == 3 for g in groups):
        return True
    return indian and len(groups[-1]) == 3 and all(len(g) == 2 for g in groups[:-1])


def _digits(body: str, text: str) -> str:
    """The digits of a number as Python reads them (``1234.5``), by the separator
    rules; raises when the marks group nothing a person would write."""
    if "_" in body:
        raise ConversionError(f"not a number: {_short(text)} (digits joined by '_')")
    spaced = body != (body := body.translate(_SPACES))
    dots, commas = body.count("."), body.count(",")
    if not dots and not commas:
        return body
    if dots and commas:
        decimal = "." if body.rfind(".") > body.rfind(",") else ","
        group = "," if decimal == "." else "."
        whole, _, frac = body.rpartition(decimal)
        parts = whole.split(group)
        if decimal in whole or spaced or not _grouped(parts[0], parts[1:], group == ","):
            raise ConversionError(f"not a number: {_short(text)} (marks that group nothing)")
        return "".join(parts) + "." + frac
    mark = "." if dots else ","
    parts = body.split(mark)
    if len(parts) > 2:
        if spaced or not _grouped(parts[0], parts[1:], mark == ","):
            raise ConversionError(f"not a number: {_short(text)} (version-like marks)")
        return "".join(parts)
    head, tail = parts
    if mark == "," and len(tail) == 3 and not spaced and head[0] != "0":
        if len(head) > 3:
            raise ConversionError(f"not a number: {_short(text)} (a ',' that groups nothing)")
        return head + tail  # 1,234: thousands
    return head + "." + tail


_DECIMAL = re.compile(r"\d+(?:\.\d+)?")


class _Found:
    """One number of a text, read: its value before any sign, where it stands, and
    what stands with it (a sign, a currency, a magnitude, a percent sign)."""

    __slots__ = (
        "end",
        "magnitude",
        "money",
        "negative",
        "num_end",
        "percent",
        "start",
        "value",
    )

    def __init__(self, m: re.Match[str], text: str, magnitude: bool) -> None:
        start = m.start()
        body = m.group("body")
        lead = m.group("dot") is not None
        if lead and start > 0 and _joins(text[start - 1]):
            lead, start = False, start + 1  # "No.5" is five, not 0.5
        if lead and not body.isdigit():
            raise ConversionError(f"not a number: {_short(text)} (a dot before marks)")
        version = "." in body and start > 0 and text[start - 1] in "vV"
        if version and (start == 1 or not _joins(text[start - 2])):
            raise ConversionError(f"not a number: {_short(text)} (a version)")
        digits = "0." + body if lead else _digits(body, text)
        exp = m.group("exp")
        if exp is not None and not lead and _DECIMAL.fullmatch(body) is None:
            raise ConversionError(f"not a number: {_short(text)} (an exponent after separators)")
        try:
            if exp is not None:
                number: int | float = float(digits + "e" + exp[1:].replace("\u2212", "-"))
            elif "." in digits:
                number = float(digits)
            else:
                number = int(digits)
        except ValueError as exc:
            raise ConversionError(f"not a number: {_short(text)}") from exc
        end = self.num_end = m.end()
        self.magnitude = ""
        mag = _MAGNITUDE.match(text, end)
        if mag is not None:
            self.magnitude = mag.group("word")
            if magnitude:
                number = _scaled(number, _factor(self.magnitude))
                end = mag.end()
        self.start, self.end, self.value = start, end, number
        self.percent = text[end : end + 2].lstrip()[:1] == "%"
        head = text[max(0, start - 12) : start]
        sign = _SIGN_BEFORE.search(head)
        self.negative = False
        if sign is not None:
            char = sign.group(1)
            at = start - len(head) + sign.start(1)
            # a hyphen that joins a word ("A-12", "EUR-5") is no sign
            if at == 0 or not _joins(text[at - 1]):
                self.negative = char != "+"
        if not self.negative and "(" in text:
            self.negative = _accounting_negative(text, start, end)
        self.money = (
            _CURRENCY_BEFORE.search(head) is not None
            or _CURRENCY_AFTER.match(text, end) is not None
        )

    @property
    def signed(self) -> int | float:
        return -self.value if self.negative else self.value


def _factor(word: str) -> int:
    return _MAGNITUDES.get(word) or _MAGNITUDES[word.lower().rstrip("s")]


def _joins(c: str) -> bool:
    """A character a hyphen after it joins a word to (``A-12``), so that it is no sign."""
    return c.isalnum() or c == "_"


def _scaled(number: int | float, factor: int) -> int | float:
    """``number`` times ``factor``, exact for the decimals people write (1.2K is 1200,
    not 1199.9999999999998)."""
    if isinstance(number, int):
        return number * factor
    scaled = Decimal(repr(number)) * factor
    return int(scaled) if scaled == scaled.to_integral_value() else float(scaled)


def _numbers(text: str, magnitude: bool) -> list[_Found]:
    found = [_Found(m, text, magnitude) for m in _TOKEN.finditer(text)]
    for a, b in pairwise(found):
        if b.negative and _is_range(text, a, b):
            b.negative = False  # "10 - 20": the dash joins a range
    return found


def _is_range(text: str, a: _Found, b: _Found) -> bool:
    between = text[a.end : b.start]
    between = _CURRENCY_ANY.sub("", between) if between.strip() else between
    return _RANGE_JOIN.fullmatch(between) is not None


def _ambiguous(text: str, found: list[_Found], *, price: bool) -> str | None:
    """Why a text with several numbers cannot give one without a ``pick:``, or None."""
    for a, b in pairwise(found):
        if _is_range(text, a, b):
            return "a range"
    if sum(1 for f in found if f.money) > 1:
        return "several amounts"
    if not price and _WAS_NOW.search(text) is not None:
        return "a was/now text"
    return None


def _picked(found: list[_Found], pick: str) -> _Found:
    if pick == "first":
        return found[0]
    if pick == "last":
        return found[-1]
    if pick == "min":
        return min(found, key=lambda f: f.signed)
    return max(found, key=lambda f: f.signed)


def _parse_number(text: str, ctx: ConvertContext) -> int | float:
    found = _numbers(text, ctx.magnitude)
    if not found:
        raise ConversionError(f"no number in {text!r}")
    if ctx.pick is not None:
        one = _picked(found, ctx.pick)
    else:
        if len(found) > 1:
            why = _ambiguous(text, found, price=False)
            if why is not None:
                raise ConversionError(
                    f"{_short(text)} is {why}: `pick:` (first, last, min, max) chooses"
                )
        one = found[0]
    if one.magnitude and not ctx.magnitude:
        raise ConversionError(
            f"{_short(text)} has a magnitude ({one.magnitude!r}): `magnitude: true` reads it"
        )
    return one.signed


def _short(value: Any) -> str:
    shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
    return repr(shown)


def to_number(value: Any, ctx: ConvertContext) -> int | float:
    if isinstance(value, bool):
        raise ConversionError(f"not a number: {value!r}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        if _PLAIN_INT.fullmatch(value) is not None:
            return int(value)
        if _PLAIN_FLOAT.fullmatch(value) is not None:
            return float(value)
        number = _parse_number(value, ctx)
    else:
        raise ConversionError(f"not a number: {value!r}")
    return _finite(number, value)


def _finite(number: int | float, value: Any) -> int | float:
    """``number``, unless a float that is not finite: a 400-digit decimal or a JSON
    ``1e999999`` overflows to infinity, a JSON page may say ``NaN``, and JSON cannot
    store either (framework/extract/patterns.py, ``NotStorable``)."""
    if isinstance(number, float) and not math.isfinite(number):
        raise ConversionError(f"not a finite number: {_short(value)}")
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


# ---------------------------------------------------------------- dates

# the forms with English month names; numeric dates are read by _numeric_date
_DATE_FORMATS = (
    "%B %d, %Y",
    "%b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
)
_TIME_SUFFIXES = (" %H:%M", " %H:%M:%S")
_ORDINAL = re.compile(r"(?<=\d)(st|nd|rd|th)\b")
# a numeric date, the same separator twice, then a time or not
_NUMERIC_DATE = re.compile(
    r"(\d{1,4})([./-])(\d{1,2})\2(\d{1,4})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?"
)
_HAS_NUMERIC_DATE = re.compile(r"(?<!\d)\d{1,4}([./-])\d{1,2}\1\d{1,4}(?!\d)")
_HAS_LETTER = re.compile(r"[^\W\d_]")


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


def _numeric_date(text: str, ctx: ConvertContext, *, time: bool) -> datetime | None:
    """A numeric date (with a time when ``time``), read in the field's one order; None
    when the text is not one. Raises when it is one that cannot be read: a part out of
    range is never swapped with another (``2024-13-01`` is no 13 January)."""
    m = _NUMERIC_DATE.fullmatch(text)
    if m is None or (m.group(5) is not None and not time):
        return None
    a, _, b, c = m.group(1, 2, 3, 4)
    order = ctx.date_order or "DMY"
    if len(a) == 4:
        y, mo, d = a, b, c  # a year first is always year-month-day
        order = "YMD"
        if len(d) > 2:
            return None
    elif len(c) == 4 or (ctx.date_order is not None and len(c) == 2 and len(a) <= 2):
        if order == "YMD":
            if len(c) == 4:
                raise ConversionError(f"not a date: {text!r}: the year is last, date_order YMD")
            y, mo, d = a, b, c
        else:
            d, mo, y = (a, b, c) if order == "DMY" else (b, a, c)
    else:
        return None
    year = int(y)
    if len(y) == 2:
        year += 2000 if year < 69 else 1900  # strptime's %y pivot
    hh, mm, ss = (int(g) if g else 0 for g in m.group(5, 6, 7))
    try:
        return datetime(year, int(mo), int(d), hh, mm, ss)
    except ValueError as exc:
        raise ConversionError(f"not a date: {text!r} ({order} order: {exc})") from exc


def _text_date(value: str, ctx: ConvertContext, *, time: bool) -> datetime | None:
    """The non-ISO inputs of a date or date-time, after ISO was tried."""
    text = " ".join(value.split())
    found = _numeric_date(text, ctx, time=time)
    if found is not None:
        return found
    plain = _ORDINAL.sub("", text)
    found = _strptime_any(plain, _DATETIME_FORMATS) if time else None
    if found is None:
        found = _strptime_any(plain, _DATE_FORMATS)
    if found is None and ctx.languages and _HAS_LETTER.search(text) is not None:
        found = _dateparser(ctx.languages, ctx.date_order, text)
        numeric = _HAS_NUMERIC_DATE.search(text)
        if found is not None and numeric is not None:
            # dateparser swaps day and month when one is impossible: the numeric date
            # in the text must read the same in the field's order, or the text fails
            own = _numeric_date(numeric.group(0), ctx, time=False)
            if own is None or own.date() != found.date():
                raise ConversionError(
                    f"not a date: {value!r}: {numeric.group(0)!r} is not a date "
                    f"in {ctx.date_order or 'DMY'} order"
                )
    return found


def to_date(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date: {value!r}")
    text = " ".join(value.split())
    if ctx.date_format is not None:  # strict: the format, nothing else
        found = _strptime_any(text, (ctx.date_format,))
        if found is None:
            raise ConversionError(f"not a date: {value!r}; expected {ctx.date_format!r}")
        return found.date().isoformat()
    if len(text) == 10 and text[4] == "-":  # fromisoformat's only 10-character forms
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text).date().isoformat()
    except ValueError:
        pass
    found = _text_date(text, ctx, time=False)
    if found is None:
        raise ConversionError(f"not a date: {value!r}; expected YYYY-MM-DD")
    return found.date().isoformat()


# One parser per language set and order, built on first use: importing dateparser costs
# a quarter of a second and its language data more, so a job that never needs it (ISO
# dates, English dates, no `languages:`) never pays for it.
_DATEPARSERS: dict[tuple[tuple[str, ...], str | None], Any] = {}
_DATEPARSER_SETTINGS = {
    # absolute dates only: "yesterday" or "2 days ago" would invent a day from the clock
    "PARSERS": ["absolute-time"],
    # "Januari 2024" has no day; dateparser would take today's, which the text never said
    "REQUIRE_PARTS": ["day", "month", "year"],
    "RETURN_AS_TIMEZONE_AWARE": False,
}


def _dateparser(languages: tuple[str, ...], order: str | None, text: str) -> datetime | None:
    parser = _DATEPARSERS.get((languages, order))
    if parser is None:
        from dateparser.date import DateDataParser

        settings = dict(_DATEPARSER_SETTINGS)
        if order is not None:
            settings["DATE_ORDER"] = order
        parser = DateDataParser(languages=list(languages), settings=settings)
        _DATEPARSERS[(languages, order)] = parser
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


_LANGUAGE_ORDERS: dict[str, str | None] = {}


def language_date_order(code: str) -> str | None:
    """The order a language writes numeric dates in (dateparser's locale data: ``en``
    MDY, ``id`` DMY, ``ja`` YMD), None when its data says none."""
    if code not in _LANGUAGE_ORDERS:
        import importlib

        try:
            data = importlib.import_module(f"dateparser.data.date_translation_data.{code}")
            order = data.info.get("date_order")
        except ImportError:
            order = None
        _LANGUAGE_ORDERS[code] = order if order in DATE_ORDERS else None
    return _LANGUAGE_ORDERS[code]


def date_order_of(own: str | None, languages: tuple[str, ...]) -> str | None:
    """A field's order of numeric dates: its own ``date_order``, else the one its
    languages agree on; None when neither says (day first) or the languages disagree
    (``framework validate`` asks for a ``date_order`` then)."""
    if own is not None or not languages:
        return own
    orders = {language_date_order(code) for code in languages} - {None}
    return orders.pop() if len(orders) == 1 else None


_DATETIME_FORMATS = tuple(d + t for d in _DATE_FORMATS for t in _TIME_SUFFIXES)


def to_datetime(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date-time: {value!r}")
    text = " ".join(value.split())
    if ctx.date_format is not None:  # strict: the format, nothing else
        found = _strptime_any(text, (ctx.date_format,))
        if found is None:
            raise ConversionError(f"not a date-time: {value!r}; expected {ctx.date_format!r}")
        return found.isoformat()
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        pass
    found = _text_date(text, ctx, time=True)
    if found is None:
        raise ConversionError(f"not a date-time: {value!r}; expected ISO 8601")
    return found.isoformat()


# ---------------------------------------------------------------- URLs

# an absolute http(s) URL or a root-relative path without spaces: the common case,
# read without the checks below
_PLAIN_URL = re.compile(
    r"(?:https?://[A-Za-z0-9.-]+(?::\d{1,5})?)?/[!#-~]*|https?://[A-Za-z0-9.-]+"
)
_WHITESPACE = re.compile(r"\s")


def to_url(value: Any, ctx: ConvertContext) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"not a URL: {value!r}")
    text = value.strip()
    if _PLAIN_URL.fullmatch(text) is None:
        _check_url(text, value)
    if ctx.absolute and ctx.base_url:
        joined = urljoin(ctx.base_url, text)
        if not joined.startswith(("http://", "https://", "mailto:", "tel:")):
            _check_url(joined, value)
        return joined
    return text


def _check_url(text: str, value: str) -> None:
    """Raise unless ``text`` is a URL: no whitespace or control characters, it parses,
    and its scheme (when it has one) is one of :data:`URL_SCHEMES`."""
    if not text or _WHITESPACE.search(text) is not None or not text.isprintable():
        raise ConversionError(f"not a URL: {_short(value)} (spaces or control characters)")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ConversionError(f"not a URL: {_short(value)} ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme:
        if scheme not in URL_SCHEMES:
            raise ConversionError(
                f"not a URL: {_short(value)} (scheme {scheme!r}; allowed: "
                + ", ".join(sorted(URL_SCHEMES))
                + ")"
            )
        if scheme in ("http", "https") and not parts.hostname:
            raise ConversionError(f"not a URL: {_short(value)} (no host)")
        if scheme in ("mailto", "tel") and not parts.path:
            raise ConversionError(f"not a URL: {_short(value)} (nothing after {scheme}:)")
    elif text.lower().startswith("www."):
        raise ConversionError(f"not a URL: {_short(value)} (a host without a scheme)")


# ---------------------------------------------------------------- prices


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
    tokens = _numbers(value, ctx.magnitude)
    found = [f for f in tokens if not f.percent]
    if _FREE.search(value) is not None and ctx.pick is None:
        if found:
            raise ConversionError(f"{_short(value)} says 'free' and an amount: `pick:` chooses")
        if ctx.free is None:
            raise ConversionError(f"{_short(value)} has no amount ('free': `free: 0` reads it)")
        return {"amount": ctx.free, "currency": None}
    if not found:
        percent = " (a percentage is no price)" if "%" in value else ""
        raise ConversionError(f"no price in {_short(value)}{percent}")
    money = [f for f in found if f.money] or found
    if ctx.pick is not None:
        one = _picked(money, ctx.pick)
    else:
        why = _ambiguous(value, found, price=True) if len(found) > 1 else None
        if why is None and len(money) > 1:
            why = "several numbers, none with a currency"
        if why is not None:
            raise ConversionError(
                f"{_short(value)} is {why}: `pick:` (first, last, min, max) chooses"
            )
        one = money[0]
    if one.magnitude and not ctx.magnitude:
        raise ConversionError(
            f"{_short(value)} has a magnitude ({one.magnitude!r}): `magnitude: true` reads it"
        )
    from price_parser import Price  # light, but only jobs with prices need it

    # the amount as price-parser reads it, from the text around the chosen number only
    # (the whole text when it has one: then this is exactly price-parser's reading)
    at = tokens.index(one)
    lo = tokens[at - 1].end if at > 0 else 0
    hi = tokens[at + 1].start if at + 1 < len(tokens) else len(value)
    segment = value if len(tokens) == 1 else value[lo:hi]
    if one.magnitude:  # "63K": the digits for price-parser, then the magnitude's factor
        segment = value[lo : one.num_end] + value[one.end : hi]
    price = Price.fromstring(segment)
    if price.amount is None:
        raise ConversionError(f"no price in {_short(value)}")
    amount = _amount(price.amount)
    if one.magnitude:
        amount = _scaled(amount, _factor(one.magnitude))
    currency = price.currency
    if currency is not None and _HAS_LETTER.search(currency) is not None:
        # price-parser takes letters out of words for a code ("FREE" gives "FR")
        bounded = rf"(?<![^\W\d_]){re.escape(currency)}(?![^\W\d_])"
        if re.search(bounded, segment) is None:
            raise ConversionError(f"{_short(value)}: {currency!r} is part of a word, no currency")
    if one.negative:
        amount = -amount
    return {"amount": _finite(amount, value), "currency": currency}


# ---------------------------------------------------------------- durations

_ISO_NUMBER = r"\d{1,15}(?:[.,]\d{1,9})?"
_ISO_DURATION = re.compile(
    "P"
    + "".join(rf"(?:(?P<{unit}>{_ISO_NUMBER}){unit})?" for unit in "YMWD")
    + "(?:T"
    + "".join(rf"(?:(?P<{unit.lower()}>{_ISO_NUMBER}){unit})?" for unit in "HMS")
    + ")?",
    re.IGNORECASE,
)
_SECONDS = {"W": 604800, "D": 86400, "h": 3600, "m": 60, "s": 1}  # ISO's groups
# "2h 30m", "90 min", "1 hour and 15 minutes": units from the largest down, each once
_UNIT_SECONDS = {
    **dict.fromkeys(("w", "wk", "wks", "week", "weeks"), 604800),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
}
_UNIT_PART = re.compile(r"(?:,?\s*(?:and\s+)?)(\d{1,15}(?:\.\d{1,9})?)\s*([a-z]+)\.?", re.I)
_CLOCK = re.compile(r"(\d{1,9}):([0-5]\d):([0-5]\d(?:\.\d{1,9})?)")  # h:mm:ss
_DURATION_FORMS = "ISO 8601 (PT2H30M), 2h 30m, 90 min or h:mm:ss"


def to_duration(value: Any, ctx: ConvertContext) -> int | float:
    """Seconds (an int when whole) of an ISO 8601 duration, a text of units or an
    h:mm:ss clock; a JSON number is seconds already. Negative durations, years and
    months (no fixed length) and ``1:30`` (h:mm or m:ss?) fail."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ConversionError(f"not a duration: {value!r} (seconds are finite, >= 0)")
        return int(value) if value == int(value) else value
    if not isinstance(value, str):
        raise ConversionError(f"not a duration: {value!r}")
    text = " ".join(value.split())
    if not text:
        raise ConversionError(f"not a duration: {value!r}; expected {_DURATION_FORMS}")
    if text.startswith(("-", "\u2212")):
        raise ConversionError(f"not a duration: {_short(value)} (negative)")
    if text[0] in "Pp" and (iso := _ISO_DURATION.fullmatch(text)) is not None:
        return _iso_seconds(iso, value)
    if (clock := _CLOCK.fullmatch(text)) is not None:
        h, m, s = clock.groups()
        return _amount(int(h) * 3600 + int(m) * 60 + Decimal(s))
    if re.fullmatch(r"\d+:\d\d", text):
        raise ConversionError(f"{_short(value)} is h:mm or m:ss: write h:mm:ss or units")
    total, at, last = Decimal(0), 0, math.inf
    while at < len(text):
        part = _UNIT_PART.match(text, at)
        unit = _UNIT_SECONDS.get(part.group(2).lower()) if part is not None else None
        if part is None or unit is None or unit >= last or (at == 0 and part.start(1) > 0):
            raise ConversionError(f"not a duration: {_short(value)}; expected {_DURATION_FORMS}")
        total, at, last = total + Decimal(part.group(1)) * unit, part.end(), unit
    return _amount(total)


def _iso_seconds(iso: re.Match[str], value: str) -> int | float:
    given = [(unit, n) for unit, n in iso.groupdict().items() if n is not None]
    if not given or value.strip()[-1:] in "Tt":
        raise ConversionError(f"not a duration: {value!r} (no number of any unit)")
    if any(unit in "YM" for unit, _ in given):
        raise ConversionError(
            f"{_short(value)} counts years or months, which have no fixed number of seconds"
        )
    if any("." in n or "," in n for _, n in given[:-1]):  # ISO: only the last has one
        raise ConversionError(f"not a duration: {_short(value)} (a fraction before the end)")
    return _amount(sum(Decimal(n.replace(",", ".")) * _SECONDS[unit] for unit, n in given))


class ConvertContext:
    """What a converter may need beyond the value (set per field, base URL per call)."""

    __slots__ = (
        "absolute",
        "base_url",
        "date_format",
        "date_order",
        "free",
        "languages",
        "magnitude",
        "pick",
    )

    def __init__(
        self,
        *,
        date_format: str | None,
        absolute: bool,
        base_url: str = "",
        languages: tuple[str, ...] = (),
        date_order: str | None = None,
        magnitude: bool = False,
        pick: str | None = None,
        free: int | float | None = None,
    ) -> None:
        self.date_format = date_format
        self.absolute = absolute
        self.base_url = base_url
        self.languages = languages  # dateparser's, for dates the fixed forms miss
        # the order numeric dates are read in (DMY, MDY, YMD); None: day first, and
        # two-digit years refused (see date_order_of)
        if date_order is None and languages:
            date_order = date_order_of(None, languages)
        self.date_order = date_order
        self.magnitude = magnitude  # "63K" is 63000 (else it fails)
        self.pick = pick  # which number of a range or a was/now text
        self.free = free  # the amount a price that says 'free' has


CONVERTERS: dict[str, Callable[[Any, ConvertContext], Any]] = {
    "string": to_string,
    "integer": to_integer,
    "number": to_number,
    "boolean": to_boolean,
    "date": to_date,
    "datetime": to_datetime,
    "url": to_url,
    "price": to_price,
    "duration": to_duration,
}
