"""The common money texts' short path (converters/numbers.py plain_money) gives what
the whole number path gives, value, type and error alike, on every text it takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.extract.converters.context import ConversionError, ConvertContext
from framework.extract.converters.numbers import _CODES, _SIGNS, parse_number, plain_money
from tests.extract.value_table import ROWS

CTX = ConvertContext(date_format=None, absolute=False)
CODES = _CODES.split("|")
SIGNS = list(_SIGNS)


def _outcome(read: Callable[[str], Any], text: str) -> tuple[str, object]:
    try:
        value = read(text)
    except ConversionError as exc:
        return ("error", str(exc))
    return (type(value).__name__, value)


def _same(text: str) -> bool:
    """Whether the short path took ``text``; if it did, it agrees with the whole path."""
    short = _outcome(plain_money, text)
    if short == ("NoneType", None):
        return False
    assert short == _outcome(lambda t: parse_number(t, CTX), text), text
    return True


digits = st.text("0123456789", min_size=1, max_size=5)
bodies = st.builds(
    lambda head, rest: head + "".join(m + d for m, d in rest),
    digits,
    st.lists(st.tuples(st.sampled_from(".,"), digits), max_size=4),
)
before = st.sampled_from(["", *SIGNS, *(s + " " for s in SIGNS), *(c + " " for c in CODES)])
after = st.sampled_from(["", *SIGNS, *(" " + s for s in SIGNS), *(" " + c for c in CODES)])


@settings(max_examples=3000, deadline=None)
@given(before, bodies, after)
def test_the_short_path_agrees_with_the_whole_one(pre: str, body: str, post: str) -> None:
    _same(pre + body + post)


@settings(max_examples=2000, deadline=None)
@given(st.text("0123456789.,$€ -+()%kKmMeEvUSDRp_'", max_size=14))
def test_texts_near_the_short_path_agree_too(text: str) -> None:
    _same(text)


def test_the_usual_amounts_take_the_short_path() -> None:
    for text in ("Rp 1.234.567,50", "$1,234.50", "1.234,50 EUR", "€ 12,5", "USD 12", "12 $"):
        assert _same(text), text


def test_every_number_row_of_the_value_table_agrees() -> None:
    texts = [r.raw for r in ROWS if r.type == "number" and not r.options and isinstance(r.raw, str)]
    taken = [t for t in texts if _same(t)]
    assert {"1,234.50", "1.234,50", "1.234.567", "12,34,567", "1.2.3"} <= set(taken), taken
