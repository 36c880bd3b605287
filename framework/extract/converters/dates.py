"""The ``date`` and ``datetime`` types: ISO, a field's ``format``, numeric dates in one
order (:mod:`framework.extract.converters.languages`), English month names, then
dateparser in the field's languages (absolute dates only)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

from framework.extract.converters.context import ConversionError, ConvertContext

__all__ = ["to_date", "to_datetime"]

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


def _formatted(text: str, value: str, fmt: str, what: str) -> datetime:
    """``text`` read by the field's ``format``, strictly: nothing else is tried."""
    found = _strptime_any(text, (fmt,))
    if found is None:
        raise ConversionError(f"not a {what}: {value!r}; expected {fmt!r}")
    return found


def to_date(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date: {value!r}")
    text = " ".join(value.split())
    if ctx.date_format is not None:
        return _formatted(text, value, ctx.date_format, "date").date().isoformat()
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


_DATETIME_FORMATS = tuple(d + t for d in _DATE_FORMATS for t in _TIME_SUFFIXES)


def to_datetime(value: Any, ctx: ConvertContext) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat()
    if not isinstance(value, str):
        raise ConversionError(f"not a date-time: {value!r}")
    text = " ".join(value.split())
    if ctx.date_format is not None:
        return _formatted(text, value, ctx.date_format, "date-time").isoformat()
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        pass
    found = _text_date(text, ctx, time=True)
    if found is None:
        raise ConversionError(f"not a date-time: {value!r}; expected ISO 8601")
    return found.isoformat()
