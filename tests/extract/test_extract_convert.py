"""Every conversion rule of docs/spec-reference.md ("Types"), one table per type, and
properties: `number` and `date` never invent a sign, a digit or a day the text lacks."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from parsel import Selector

from framework.extract.convert import (
    CONVERTERS,
    ConversionError,
    ConvertContext,
    to_date,
    to_number,
)
from framework.extract.fields import FieldExtractor, Scope
from framework.spec.models import FieldSpec, JobSpec, ValueType


def ctx(fmt: str | None = None, languages: tuple[str, ...] = (), base: str = "") -> ConvertContext:
    return ConvertContext(date_format=fmt, absolute=True, base_url=base, languages=languages)


# (type, raw value, expected) -- one row per rule of the reference, in its order
CASES: list[tuple[str, Any, Any]] = [
    # string: scalars become text, JSON objects/arrays stay, XPath counts are whole
    ("string", "abc", "abc"),
    ("string", 12, "12"),
    ("string", 3.0, "3"),
    ("string", True, "true"),
    ("string", {"a": 1}, {"a": 1}),
    # numbers: the first number; symbols, letters, % and spaces ignored
    ("number", "EUR 12.50 incl. VAT", 12.5),
    ("number", "15%", 15),
    ("number", "1,234.50", 1234.5),  # both marks: the last one is the decimal mark
    ("number", "1.234,50", 1234.5),
    ("number", "1.234.567", 1234567),  # a mark that occurs twice groups thousands
    ("number", "1,234", 1234),  # a single `,` + three digits groups thousands
    ("number", "0,5", 0.5),  # any other single `,` is a decimal mark
    ("number", "1.234", 1.234),  # a single `.` is always a decimal mark
    ("number", "1 234", 1234),
    ("number", "1'234", 1234),
    ("number", "1\u00a0234", 1234),
    ("number", "-5", -5),
    ("number", "\u22125", -5),  # Unicode minus
    ("number", "A-12", 12),  # a hyphen joining a word is no sign
    ("number", "(1,234)", -1234),  # accounting parentheses around the whole value
    ("number", "($1,234.00)", -1234.0),
    ("number", "$ (1,234.00)", -1234.0),
    ("number", "(EUR 12)", -12),
    ("number", "(15 available)", 15),  # parentheses around words: no sign
    ("number", "In stock (15 available)", 15),
    ("number", "Total 5 (approx)", 5),
    ("number", 7.5, 7.5),  # JSON numbers as they are
    ("integer", "In stock (15 available)", 15),  # issue 12: was -15
    ("integer", "(1,234)", -1234),
    ("integer", "12.0", 12),
    ("integer", "1,234,567 items", 1234567),
    # boolean
    ("boolean", "Yes", True),
    ("boolean", "off", False),
    ("boolean", "Y", True),
    ("boolean", "0", False),
    ("boolean", 1, True),
    # date: ISO, a date-time's date, the fixed forms, ordinals
    ("date", "2024-01-12", "2024-01-12"),
    ("date", "2024-01-12T10:30:00", "2024-01-12"),
    ("date", "12.01.2024", "2024-01-12"),
    ("date", "12/01/2024", "2024-01-12"),  # day first
    ("date", "2024/01/12", "2024-01-12"),
    ("date", "January 12, 2024", "2024-01-12"),
    ("date", "Jan 12, 2024", "2024-01-12"),
    ("date", "12 January 2024", "2024-01-12"),
    ("date", "3rd March 2024", "2024-03-03"),
    # datetime
    ("datetime", "2024-01-12T10:30:00Z", "2024-01-12T10:30:00+00:00"),
    ("datetime", "2024-01-12 10:30", "2024-01-12T10:30:00"),
    ("datetime", "12.01.2024 10:30:15", "2024-01-12T10:30:15"),
    ("datetime", "12.01.2024", "2024-01-12T00:00:00"),  # a date alone: midnight
    ("datetime", 0, "1970-01-01T00:00:00+00:00"),  # Unix seconds, UTC
    # url
    ("url", "  /a/b  ", "http://x.test/a/b"),
    # price: amount and currency, by price-parser
    ("price", "$1,234.50", {"amount": 1234.5, "currency": "$"}),
    ("price", "12,50 \u20ac", {"amount": 12.5, "currency": "\u20ac"}),
    ("price", "Rp 150.000", {"amount": 150000, "currency": "Rp"}),
    ("price", "EUR 9", {"amount": 9, "currency": "EUR"}),
    ("price", 19.99, {"amount": 19.99, "currency": None}),
]


@pytest.mark.parametrize(("type_", "raw", "expected"), CASES)
def test_conversion_rule(type_: str, raw: Any, expected: Any) -> None:
    got = CONVERTERS[type_](raw, ctx(base="http://x.test/page"))
    assert got == expected
    assert type(got) is type(expected)


ERRORS: list[tuple[str, Any]] = [
    ("number", "none"),
    ("number", True),
    ("integer", "12.5"),  # an integer must be whole
    ("boolean", "maybe"),
    ("date", "31.02.2024"),
    ("date", "Januari 2024"),
    ("date", "12 Januari 2024"),  # another language without `languages:`
    ("datetime", "soon"),
    ("price", "call us"),
    ("price", True),
    # numbers JSON cannot store: an overflow to infinity, a JSON page's NaN
    ("number", "9" * 400 + ".5"),
    ("number", float("inf")),
    ("number", float("nan")),
    ("price", "9" * 400 + ".5 EUR"),
    ("price", float("inf")),
]


@pytest.mark.parametrize(("type_", "raw"), ERRORS)
def test_conversion_refuses(type_: str, raw: Any) -> None:
    with pytest.raises(ConversionError):
        CONVERTERS[type_](raw, ctx())


def test_the_fields_format_wins_before_the_fixed_forms() -> None:
    assert to_date("01/02/2024", ctx("%m/%d/%Y")) == "2024-01-02"
    assert to_date("01/02/2024", ctx()) == "2024-02-01"


LANGUAGE_CASES = [
    (("id",), "date", "12 Januari 2024", "2024-01-12"),
    (("id",), "date", "Senin, 12 Februari 2024", "2024-02-12"),
    (("id",), "datetime", "3 Agustus 2023 10:30", "2023-08-03T10:30:00"),
    (("de",), "date", "5. März 2024", "2024-03-05"),
    (("id", "en"), "date", "12 January 2024", "2024-01-12"),
    (("id",), "date", "2024-01-12", "2024-01-12"),  # the fast paths stay first
]


@pytest.mark.parametrize(("languages", "type_", "raw", "expected"), LANGUAGE_CASES)
def test_dates_in_the_specs_languages(
    languages: tuple[str, ...], type_: str, raw: str, expected: str
) -> None:
    assert CONVERTERS[type_](raw, ctx(languages=languages)) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "kemarin",  # "yesterday": a day from the clock, not the text
        "Januari 2024",  # no day: dateparser would take today's
        "31 Februari 2024",
        "1700000000",  # a timestamp is not a date in words
    ],
)
def test_dateparser_never_invents_a_day(raw: str) -> None:
    with pytest.raises(ConversionError):
        to_date(raw, ctx(languages=("id",)))


def test_languages_restrict_dateparser() -> None:
    # Indonesian month names are not German ones
    with pytest.raises(ConversionError):
        to_date("12 Januari 2024", ctx(languages=("ja",)))


# ------------------------------------------------------------ through the spec


def _extract(fields: dict[str, Any], html: str, languages: tuple[str, ...] = ()) -> Any:
    specs = {name: FieldSpec.model_validate(raw) for name, raw in fields.items()}
    ext = FieldExtractor(specs, languages=languages)
    return ext.extract(Scope(url="http://x.test/", selector=Selector(text=html)))


def test_a_count_is_an_integer() -> None:
    assert FieldSpec.model_validate({"count": "li"}).type is ValueType.INTEGER
    assert FieldSpec.model_validate({"count": "li", "type": "string"}).type is ValueType.STRING
    got = _extract({"n": {"count": "li"}, "zero": {"count": "p.none"}}, "<ul><li>a<li>b</ul>")
    assert got.values == {"n": 2, "zero": 0}


def test_the_jobs_languages_reach_every_date_field_and_a_fields_own_win() -> None:
    html = "<p class=a>12 Januari 2024</p><p class=b>5. März 2024</p>"
    fields = {"a": {"css": ".a::text", "type": "date"}}
    fields["b"] = {"css": ".b::text", "type": "date", "languages": ["de"]}
    assert _extract(fields, html, ("id",)).values == {"a": "2024-01-12", "b": "2024-03-05"}
    got = _extract(fields, html)  # no job languages: the Indonesian one cannot be read
    assert got.values["a"] is None
    assert [f for f, _ in got.errors] == ["a"]


def test_unknown_languages_are_refused_by_the_spec() -> None:
    with pytest.raises(ValueError, match="unknown language"):
        FieldSpec.model_validate({"css": "p", "type": "date", "languages": ["xx"]})
    with pytest.raises(ValueError, match="unknown language"):
        JobSpec.model_validate(
            {"name": "j", "source_type": "s", "start_urls": ["http://x.test/"], "languages": "zz"}
        )


def test_a_price_is_bounded_by_its_amount() -> None:
    fields = {"p": {"css": "p::text", "type": "price", "min": 0, "max": 100}}
    assert _extract(fields, "<p>EUR 99</p>").values == {"p": {"amount": 99, "currency": "EUR"}}
    got = _extract(fields, "<p>EUR 891</p>")
    assert got.values == {"p": {"amount": 891, "currency": "EUR"}}
    assert got.violations == [("p", "max", {"amount": 891, "currency": "EUR"})]


# ------------------------------------------------------------ properties

_DIGITS = re.compile(r"\d")
_noise = st.text(alphabet="abc XYZ$\u20ac%:()-,.'", max_size=8)
_number_text = st.builds(
    lambda pre, num, post: pre + num + post,
    _noise,
    st.from_regex(r"[-\u2212(]?\d{1,3}([.,' ]\d{3}){0,3}([.,]\d{1,4})?\)?", fullmatch=True),
    _noise,
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_number_text, st.text(max_size=24)))
def test_number_never_invents_a_sign_or_a_digit(text: str) -> None:
    try:
        got = to_number(text, ctx())
    except ConversionError:
        return
    if got < 0:
        assert "-" in text or "\u2212" in text or ("(" in text and ")" in text)
    # by value: an Arabic-Indic two is read as 2, which is no invention
    digits_in_text = {str(unicodedata.decimal(d)) for d in _DIGITS.findall(text)}
    # Python's shortest repr prints only digits that were read (a "0" may be its own:
    # "12.0"); the generated numbers stay short enough for a float to hold them exactly
    assert set(_DIGITS.findall(repr(abs(got)))) - {"0"} <= digits_in_text


_MONTHS = {
    "en": ["January", "February", "March", "April", "May", "June", "July"],
    "id": ["Januari", "Februari", "Maret", "April", "Mei", "Juni", "Juli"],
}
_date_text = st.builds(
    lambda day, month, year, sep, noise: f"{noise}{day}{sep}{month} {year}",
    st.integers(0, 40),
    st.sampled_from(_MONTHS["en"] + _MONTHS["id"]),
    st.integers(1900, 2100),
    st.sampled_from([" ", ". ", "  "]),
    st.sampled_from(["", "Senin, ", "on ", "kemarin "]),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_date_text, st.text(max_size=24)))
def test_date_never_invents_a_day(text: str) -> None:
    try:
        got = to_date(text, ctx(languages=("id", "en")))
    except ConversionError:
        return
    year, month, day = (int(p) for p in got.split("-"))
    numbers = {int(n) for n in re.findall(r"\d+", text)}
    assert day in numbers
    assert year in numbers
    names = [m[month - 1] for m in _MONTHS.values() if month <= len(m)]
    assert month in numbers or any(n.lower() in text.lower() for n in names)
