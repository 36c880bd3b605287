"""What every converter shares: its error, its context, and the helpers of its messages
and results. Imports nothing of the other converters but the date orders of languages
(a field's context says in which order its numeric dates are read)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from framework.errors import PageLevelError
from framework.extract.converters.languages import date_order_of

__all__ = ["PICKS", "ConversionError", "ConvertContext", "finite", "from_decimal", "short"]

PICKS = ("first", "last", "min", "max")


class ConversionError(PageLevelError, ValueError):
    """A value that cannot become the field's type."""


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


def short(value: Any) -> str:
    shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
    return repr(shown)


def finite(number: int | float, value: Any) -> int | float:
    """``number``, unless a float that is not finite: a 400-digit decimal or a JSON
    ``1e999999`` overflows to infinity, a JSON page may say ``NaN``, and JSON cannot
    store either (framework/extract/patterns.py, ``NotStorable``)."""
    if isinstance(number, float) and not math.isfinite(number):
        raise ConversionError(f"not a finite number: {short(value)}")
    return number


def from_decimal(value: Decimal | int | float) -> int | float:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value
