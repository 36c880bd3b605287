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
  exponents (``1e3K``: then a magnitude), one glued to a word (``1e3a``) fails;
  ``1_234`` fails, and so does a dotted number after ``v``, ``ver``, ``version`` or
  ``rev`` (``v 1.2``, ``ver1.2``: a version). A leading ``-`` or Unicode minus (not
  one joining a word, as in ``A-12``), before or after a currency (``-$5``, ``$-5``,
  ``-EUR 5``) makes it negative, and so do parentheses around the whole value
  (``(1,234)``, ``($1,234.00)``). A magnitude (``63K``, ``1.2M``, ``2bn``, ``3
  million``; beside a currency also a lowercase ``m``, ``mm``, ``mn`` or ``b``:
  ``£1.5m``, while ``5 m`` is five metres) fails unless the field says ``magnitude:
  true``. A text with several numbers takes the first, except a range (``10-20``,
  ``$10 to $20``) or a was/now text (two amounts with a currency, or
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
  numbers (a price's ``m``, ``mm``, ``mn`` or ``b`` is a magnitude, currency or not),
  and an amount with an exponent (``$1e3``, which price-parser reads as 1) read as
  ``number`` reads it; refused: a currency that is part of a word, a percentage,
  'free' (an amount only with ``free: 0``), two amounts with a currency. A JSON number
  is an amount without a currency.
* duration: seconds (an int when whole) of an ISO 8601 duration (``PT2H30M``,
  ``P1DT2H``; weeks and days are 7 x 24 and 24 hours; years and months fail), units
  from the largest down (``2h 30m``, ``90 min``, ``1 hour and 15 minutes``) or
  ``h:mm:ss``; a JSON number is seconds. Negative, ``1:30`` (h:mm or m:ss?) and other
  text fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from framework.extract.converters.context import (
    PICKS,
    ConversionError,
    ConvertContext,
    finite,
)

# _strptime_any: the numeric-format fast path, which tests call directly
from framework.extract.converters.dates import _strptime_any as _strptime_any
from framework.extract.converters.dates import to_date, to_datetime
from framework.extract.converters.durations import to_duration
from framework.extract.converters.languages import (
    DATE_ORDERS,
    date_order_of,
    known_language,
    language_date_order,
)

# a global of this module, so that a test can tell whether to_number's slow path ran
from framework.extract.converters.numbers import parse_number as _parse_number
from framework.extract.converters.numbers import plain_money
from framework.extract.converters.prices import to_price
from framework.extract.converters.urls import URL_SCHEMES, to_url

__all__ = [
    "CONVERTERS",
    "DATE_ORDERS",
    "PICKS",
    "URL_SCHEMES",
    "ConversionError",
    "ConvertContext",
    "Normaliser",
    "date_order_of",
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

# The common plain texts ("12", "-3", "12.50") need none of the rules of
# converters/numbers.py: read at once, so the rules cost nothing on the pages that do
# not need them.
_PLAIN_INT = re.compile(r"-?\d{1,18}")
_PLAIN_FLOAT = re.compile(r"-?\d{1,15}\.\d{1,15}")


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
        money = plain_money(value)  # "Rp 1.234,50", "$1,234.50": only the separators' rules
        number = _parse_number(value, ctx) if money is None else money
    else:
        raise ConversionError(f"not a number: {value!r}")
    return finite(number, value)


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
