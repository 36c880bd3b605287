"""The ``duration`` type: seconds of an ISO 8601 duration, a text of units from the
largest down, or an ``h:mm:ss`` clock."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from framework.extract.converters.context import (
    ConversionError,
    ConvertContext,
    from_decimal,
    short,
)

__all__ = ["to_duration"]

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
        raise ConversionError(f"not a duration: {short(value)} (negative)")
    if text[0] in "Pp" and (iso := _ISO_DURATION.fullmatch(text)) is not None:
        return _iso_seconds(iso, value)
    if (clock := _CLOCK.fullmatch(text)) is not None:
        h, m, s = clock.groups()
        return from_decimal(int(h) * 3600 + int(m) * 60 + Decimal(s))
    if re.fullmatch(r"\d+:\d\d", text):
        raise ConversionError(f"{short(value)} is h:mm or m:ss: write h:mm:ss or units")
    total, at, last = Decimal(0), 0, math.inf
    while at < len(text):
        part = _UNIT_PART.match(text, at)
        unit = _UNIT_SECONDS.get(part.group(2).lower()) if part is not None else None
        if part is None or unit is None or unit >= last or (at == 0 and part.start(1) > 0):
            raise ConversionError(f"not a duration: {short(value)}; expected {_DURATION_FORMS}")
        total, at, last = total + Decimal(part.group(1)) * unit, part.end(), unit
    return from_decimal(total)


def _iso_seconds(iso: re.Match[str], value: str) -> int | float:
    given = [(unit, n) for unit, n in iso.groupdict().items() if n is not None]
    if not given or value.strip()[-1:] in "Tt":
        raise ConversionError(f"not a duration: {value!r} (no number of any unit)")
    if any(unit in "YM" for unit, _ in given):
        raise ConversionError(
            f"{short(value)} counts years or months, which have no fixed number of seconds"
        )
    if any("." in n or "," in n for _, n in given[:-1]):  # ISO: only the last has one
        raise ConversionError(f"not a duration: {short(value)} (a fraction before the end)")
    return from_decimal(sum(Decimal(n.replace(",", ".")) * _SECONDS[unit] for unit, n in given))
