"""Reading one number out of a text: separators, signs, currencies, magnitudes, ranges
and was/now texts, by the rules of the contract (:mod:`framework.extract.convert`).
Numbers and prices both read their digits here; the plain texts never come here (the
fast path of ``to_number``)."""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from itertools import pairwise

from framework.extract.converters.context import ConversionError, ConvertContext, short

__all__ = [
    "Found",
    "chosen",
    "magnitude_factor",
    "numbers_in",
    "parse_number",
    "plain_money",
    "scaled_by",
]

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
# Magnitudes only beside a currency or in a price: "£1.5m", "$5mn", "$2b" (a plain
# "5 m" is five metres, "1.5 mm" a length, "5m2" an area)
_MONEY_MAGNITUDES = {"m": 1_000_000, "mm": 1_000_000, "mn": 1_000_000, "b": 1_000_000_000}
# one expression for both (one match per number): `word` any number's, `money` those
_MAGNITUDE = re.compile(
    r"\s?(?:(?P<word>"
    + "|".join(sorted(map(re.escape, _MAGNITUDES), key=len, reverse=True))
    + r"|(?i:thousand|million|billion|trillion)s?)\.?(?![^\W\d_])"
    + r"|(?P<money>mm|mn|m|b)\.?(?!\w))"
)
_MAGNITUDE_WORDS = "|".join(
    sorted(map(re.escape, {*_MAGNITUDES, *_MONEY_MAGNITUDES}), key=len, reverse=True)
)
# One number as written: an optional leading dot (".5"), digits joined by marks (each
# checked afterwards), spaces or apostrophes only before a group of exactly three
# digits, an exponent not glued to a word ("1e3", "1e3K", not "1e3a": see _GLUED_EXP).
_TOKEN = re.compile(
    r"(?P<dot>\.)?(?P<body>\d+(?:(?:[.,_]|['\u00a0\u202f\u2009 ](?=\d{3}(?!\d)))\d+)*)"
    r"(?P<exp>[eE][-+\u2212]?\d+(?!\d)"
    rf"(?:(?![^\W\d_])|(?=(?:{_MAGNITUDE_WORDS}|(?i:thousand|million|billion|trillion)s?)"
    r"\.?(?!\w)))"
    r")?"
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
        raise ConversionError(f"not a number: {short(text)} (digits joined by '_')")
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
            raise ConversionError(f"not a number: {short(text)} (marks that group nothing)")
        return "".join(parts) + "." + frac
    mark = "." if dots else ","
    parts = body.split(mark)
    if len(parts) > 2:
        if spaced or not _grouped(parts[0], parts[1:], mark == ","):
            raise ConversionError(f"not a number: {short(text)} (version-like marks)")
        return "".join(parts)
    head, tail = parts
    if mark == "," and len(tail) == 3 and not spaced and head[0] != "0":
        if len(head) > 3:
            raise ConversionError(f"not a number: {short(text)} (a ',' that groups nothing)")
        return head + tail  # 1,234: thousands
    return head + "." + tail


# The common money texts ("Rp 1.234.567,50", "$1,234.50", "1.234,50 EUR"): one number
# with a currency before or after it and nothing else, so that no rule but the
# separators' can apply (no sign, version word, exponent, magnitude, range, percent or
# parenthesis). Codes are a fixed list, none a magnitude or version word; a code or a
# letter symbol stands apart from the digits by one space, as "Rp1" or "USD5" could be
# read otherwise. Every other text takes the whole path; both give the same value.
_CODES = (
    "USD|EUR|GBP|JPY|CNY|IDR|INR|CHF|CAD|AUD|NZD|SEK|NOK|DKK|PLN|CZK|HUF|RUB|BRL|MXN|ZAR|"
    "SGD|HKD|KRW|TRY|THB|MYR|PHP|VND|AED|SAR|ILS|Rp|Rs"
)
_SIGNS = "$\u20ac\u00a3\u00a5\u20b9\u20a9\u20bd\u20ba\u0e3f"
_PLAIN_MONEY = re.compile(
    rf"(?:[{_SIGNS}] ?|(?:{_CODES}) )?"
    # thousands grouped by one mark, then decimals after the other: read as they stand
    r"(?:(?P<dots>[1-9]\d{0,2}(?:\.\d{3})+),(?P<dots_frac>\d+)"
    r"|(?P<commas>[1-9]\d{0,2}(?:,\d{3})+)\.(?P<commas_frac>\d+)"
    r"|(?P<body>\d+(?:[.,]\d+)*))"  # any other marks: by the separator rules
    rf"(?: ?[{_SIGNS}]| (?:{_CODES}))?"
)


def plain_money(text: str) -> int | float | None:
    """The number of a text that :data:`_PLAIN_MONEY` matches whole (raising as the
    whole path raises on marks that group nothing), else None: read it whole."""
    m = _PLAIN_MONEY.fullmatch(text)
    if m is None:
        return None
    whole = m.group("dots")
    if whole is not None:  # what _digits makes of "1.234.567,50", without its steps
        return float(whole.replace(".", "") + "." + m.group("dots_frac"))
    whole = m.group("commas")
    if whole is not None:
        return float(whole.replace(",", "") + "." + m.group("commas_frac"))
    digits = _digits(m.group("body"), text)
    return float(digits) if "." in digits else int(digits)


_DECIMAL = re.compile(r"\d+(?:\.\d+)?")
# what makes a dotted number a version: "v1.2", "v 1.2", "ver1.2", "Version: 1.2" (a
# word of its own: see _version; spelled out in cases, which searches faster than
# IGNORECASE)
_VERSION = re.compile(
    r"(?:[vV](?:[eE][rR](?:[sS](?:[iI][oO][nN])?)?)?|[rR][eE][vV](?:[iI][sS][iI][oO][nN])?)"
    r"[.:]?\s?$"
)


def _version(text: str, start: int) -> bool:
    """Whether the number at ``start`` follows a version word (``v``, ``ver``,
    ``version``, ``rev``) that is a word of its own (``Av 1.5`` is no version)."""
    found = _VERSION.search(text, max(0, start - 12), start)
    return found is not None and (found.start() == 0 or not _joins(text[found.start() - 1]))


# "1e3a": an exponent glued to a word, read neither as 1 nor as 1000
_GLUED_EXP = re.compile(r"[eE][-+\u2212]?\d")


class Found:
    """One number of a text, read: its value before any sign, where it stands, and
    what stands with it (a sign, a currency, a magnitude, a percent sign)."""

    __slots__ = (
        "end",
        "exp_at",
        "magnitude",
        "money",
        "negative",
        "num_end",
        "percent",
        "start",
        "value",
    )

    def __init__(self, m: re.Match[str], text: str, magnitude: bool, money: bool) -> None:
        start = m.start()
        body = m.group("body")
        lead = m.group("dot") is not None
        if lead and start > 0 and _joins(text[start - 1]):
            lead, start = False, start + 1  # "No.5" is five, not 0.5
        if lead and not body.isdigit():
            raise ConversionError(f"not a number: {short(text)} (a dot before marks)")
        if "." in body and start > 0 and _version(text, start):
            raise ConversionError(f"not a number: {short(text)} (a version)")
        digits = "0." + body if lead else _digits(body, text)
        exp = m.group("exp")
        end = self.num_end = m.end()
        if exp is None:
            self.exp_at = -1
            if end < len(text) and text[end] in "eE" and _GLUED_EXP.match(text, end):
                raise ConversionError(f"not a number: {short(text)} (an exponent glued to a word)")
        else:
            self.exp_at = m.start("exp")
            if not lead and _DECIMAL.fullmatch(body) is None:
                raise ConversionError(f"not a number: {short(text)} (an exponent after separators)")
        try:
            if exp is not None:
                number: int | float = float(digits + "e" + exp[1:].replace("\u2212", "-"))
            elif "." in digits:
                number = float(digits)
            else:
                number = int(digits)
        except ValueError as exc:
            raise ConversionError(f"not a number: {short(text)}") from exc
        head = text[max(0, start - 12) : start]
        self.magnitude = ""
        mag = _MAGNITUDE.match(text, end)
        # "£1.5m" is 1.5 million, "5 m" five metres: only beside a currency or in a price
        if (
            mag is not None
            and mag.group("word") is None
            and not money
            and _CURRENCY_BEFORE.search(head) is None
            and _CURRENCY_AFTER.match(text, mag.end()) is None
        ):
            mag = None
        if mag is not None:
            self.magnitude = mag.group("word") or mag.group("money")
            if magnitude:
                number = scaled_by(number, magnitude_factor(self.magnitude))
                end = mag.end()
        self.start, self.end, self.value = start, end, number
        self.percent = text[end : end + 2].lstrip()[:1] == "%"
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


def magnitude_factor(word: str) -> int:
    return (
        _MAGNITUDES.get(word)
        or _MONEY_MAGNITUDES.get(word)
        or _MAGNITUDES[word.lower().rstrip("s")]
    )


def _joins(c: str) -> bool:
    """A character a hyphen after it joins a word to (``A-12``), so that it is no sign."""
    return c.isalnum() or c == "_"


def scaled_by(number: int | float, factor: int) -> int | float:
    """``number`` times ``factor``, exact for the decimals people write (1.2K is 1200,
    not 1199.9999999999998)."""
    if isinstance(number, int):
        return number * factor
    scaled = Decimal(repr(number)) * factor
    return int(scaled) if scaled == scaled.to_integral_value() else float(scaled)


def numbers_in(text: str, magnitude: bool, *, money: bool = False) -> list[Found]:
    """Every number of ``text``; ``money``: the text is an amount (a price), whose
    ``m`` after a number is a million with a currency or without."""
    found = [Found(m, text, magnitude, money) for m in _TOKEN.finditer(text)]
    for a, b in pairwise(found):
        if b.negative and _is_range(text, a, b):
            b.negative = False  # "10 - 20": the dash joins a range
    return found


def _is_range(text: str, a: Found, b: Found) -> bool:
    between = text[a.end : b.start]
    between = _CURRENCY_ANY.sub("", between) if between.strip() else between
    return _RANGE_JOIN.fullmatch(between) is not None


def _ambiguous(text: str, found: list[Found], *, price: bool) -> str | None:
    """Why a text with several numbers cannot give one without a ``pick:``, or None."""
    for a, b in pairwise(found):
        if _is_range(text, a, b):
            return "a range"
    if sum(1 for f in found if f.money) > 1:
        return "several amounts"
    if not price and _WAS_NOW.search(text) is not None:
        return "a was/now text"
    return None


def _picked(found: list[Found], pick: str) -> Found:
    if pick == "first":
        return found[0]
    if pick == "last":
        return found[-1]
    if pick == "min":
        return min(found, key=lambda f: f.signed)
    return max(found, key=lambda f: f.signed)


def chosen(
    text: str, found: list[Found], among: list[Found], ctx: ConvertContext, *, price: bool
) -> Found:
    """The number of ``among`` (``found``, or a price's amounts with a currency) that
    ``text`` gives: the field's ``pick``, else the only one there is; raises when
    several leave the choice open or it has a magnitude the field does not read."""
    if ctx.pick is not None:
        one = _picked(among, ctx.pick)
    else:
        why = _ambiguous(text, found, price=price) if len(found) > 1 else None
        if why is None and price and len(among) > 1:
            why = "several numbers, none with a currency"
        if why is not None:
            raise ConversionError(
                f"{short(text)} is {why}: `pick:` (first, last, min, max) chooses"
            )
        one = among[0]
    if one.magnitude and not ctx.magnitude:
        raise ConversionError(
            f"{short(text)} has a magnitude ({one.magnitude!r}): `magnitude: true` reads it"
        )
    return one


def parse_number(text: str, ctx: ConvertContext) -> int | float:
    found = numbers_in(text, ctx.magnitude)
    if not found:
        raise ConversionError(f"no number in {text!r}")
    return chosen(text, found, found, ctx, price=False).signed
