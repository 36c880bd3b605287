"""The ``price`` type: the amount that stands with the currency, read by Zyte's
``price-parser``, with the sign, range, was/now, magnitude and ``pick`` rules of numbers
(:mod:`framework.extract.converters.numbers`); an amount with an exponent (``$1e3``),
which price-parser does not read, is read as ``number`` reads it."""

from __future__ import annotations

import re
from typing import Any

from framework.extract.converters.context import (
    ConversionError,
    ConvertContext,
    finite,
    from_decimal,
    short,
)
from framework.extract.converters.numbers import chosen, magnitude_factor, numbers_in, scaled_by

__all__ = ["to_price"]

_FREE = re.compile(r"\b(?:free|gratis|kostenlos|gratuit|gratuito)\b", re.IGNORECASE)
_HAS_LETTER = re.compile(r"[^\W\d_]")


def to_price(value: Any, ctx: ConvertContext) -> dict[str, Any]:
    if isinstance(value, bool):
        raise ConversionError(f"not a price: {value!r}")
    if isinstance(value, int | float):
        return {"amount": finite(value, value), "currency": None}
    if not isinstance(value, str):
        raise ConversionError(f"not a price: {value!r}")
    tokens = numbers_in(value, ctx.magnitude, money=True)
    found = [f for f in tokens if not f.percent]
    if _FREE.search(value) is not None and ctx.pick is None:
        if found:
            raise ConversionError(f"{short(value)} says 'free' and an amount: `pick:` chooses")
        if ctx.free is None:
            raise ConversionError(f"{short(value)} has no amount ('free': `free: 0` reads it)")
        return {"amount": ctx.free, "currency": None}
    if not found:
        percent = " (a percentage is no price)" if "%" in value else ""
        raise ConversionError(f"no price in {short(value)}{percent}")
    money = [f for f in found if f.money] or found
    one = chosen(value, found, money, ctx, price=True)
    from price_parser import Price  # light, but only jobs with prices need it

    # the amount as price-parser reads it, from the text around the chosen number only
    # (the whole text when it has one: then this is exactly price-parser's reading)
    at = tokens.index(one)
    lo = tokens[at - 1].end if at > 0 else 0
    hi = tokens[at + 1].start if at + 1 < len(tokens) else len(value)
    segment = value if len(tokens) == 1 else value[lo:hi]
    if one.exp_at >= 0:
        # price-parser reads no exponent ("$1e3" would be 1): the amount as `number`
        # reads it (magnitude included), the currency from the text without the exponent
        segment = value[lo : one.exp_at] + value[one.end : hi]
    elif one.magnitude:  # "63K": the digits for price-parser, then the magnitude's factor
        segment = value[lo : one.num_end] + value[one.end : hi]
    price = Price.fromstring(segment)
    if price.amount is None:
        raise ConversionError(f"no price in {short(value)}")
    if one.exp_at >= 0:
        amount = one.value
    else:
        amount = from_decimal(price.amount)
        if one.magnitude:
            amount = scaled_by(amount, magnitude_factor(one.magnitude))
    currency = price.currency
    if currency is not None and _HAS_LETTER.search(currency) is not None:
        # price-parser takes letters out of words for a code ("FREE" gives "FR")
        bounded = rf"(?<![^\W\d_]){re.escape(currency)}(?![^\W\d_])"
        if re.search(bounded, segment) is None:
            raise ConversionError(f"{short(value)}: {currency!r} is part of a word, no currency")
    if one.negative:
        amount = -amount
    return {"amount": finite(amount, value), "currency": currency}
