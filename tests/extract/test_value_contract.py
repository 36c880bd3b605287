"""The value contract of docs/spec-reference.md ("Types"): every row of
tests/extract/value_table.py, and the docs' own example table, is the stored value or a
visible failure when a field of that type reads the text; formatted numbers read back
to themselves (en, de, fr); a source whose value fails gives way to the next one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.crawl.changes import ChangeLimits
from framework.extract.fields import Extraction, FieldExtractor, Scope
from framework.spec.models import FieldSpec, ValueType
from tests.extract.value_table import ROWS, Fail, Row

BASE = "http://x.test/t/page"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "spec-reference.md"


def read(type_: str, raw: Any, options: dict[str, Any] | None = None) -> Extraction:
    """``raw`` read by a field of ``type_``, the way the crawl reads a JSON value."""
    spec = FieldSpec.model_validate({"json": "$.v", "type": type_, **(options or {})})
    ext = FieldExtractor({"v": spec}, json=True)
    return ext.extract(Scope(url=BASE, selector=None, json={"v": raw}))


def check(row: Row) -> None:
    got = read(row.type, row.raw, row.options)
    if isinstance(row.expected, Fail):
        assert got.values["v"] is None, f"{row.raw!r} was stored as {got.values['v']!r}"
        [(_, message)] = got.errors
        assert row.expected.says in message, message
    else:
        assert got.errors == [], got.errors
        assert got.values["v"] == row.expected
        assert type(got.values["v"]) is type(row.expected)
        if isinstance(row.expected, dict) and "amount" in row.expected:  # a price
            assert type(got.values["v"]["amount"]) is type(row.expected["amount"]), got.values


def test_the_table_covers_every_type_and_enough_strings() -> None:
    strings = [r for r in ROWS if isinstance(r.raw, str)]
    assert len(strings) >= 150
    assert {r.type for r in ROWS} == {
        "string",
        "integer",
        "number",
        "boolean",
        "date",
        "datetime",
        "url",
        "price",
        "duration",
    }
    assert {r.type for r in ROWS} == {t.value for t in ValueType}  # a new type needs rows
    # every type has rows that fail: the contract refuses, not only reads
    assert {r.type for r in ROWS if isinstance(r.expected, Fail)} >= {
        "number",
        "integer",
        "price",
        "date",
        "datetime",
        "url",
        "boolean",
        "duration",
    }


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.type}:{r.raw!r}:{r.options}" for r in ROWS])
def test_value_contract(row: Row) -> None:
    check(row)


# ------------------------------------------------------------ the docs' table


def _docs_rows() -> list[Row]:
    text = DOCS.read_text(encoding="utf-8")
    types = text[text.index("### Types") : text.index("## Sub-tabs")]
    rows = []
    for line in types.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("type", "---") or not cells[2].startswith("`"):
            continue
        type_, options, raw, stored = cells
        opts = yaml.safe_load("{" + options.strip("`") + "}") if options else {}
        expected: Any = stored.strip("`")
        if stored.startswith("fails"):  # fails: `words of its message`
            expected = Fail(stored.removeprefix("fails").strip(" :").strip("`"))
        elif type_ not in ("date", "datetime", "url", "string"):  # YAML reads 2024-03-04
            expected = yaml.safe_load(expected)
        rows.append(Row(type_, raw.strip("`"), expected, opts))
    return rows


DOCS_ROWS = _docs_rows()


def test_the_docs_have_an_example_table() -> None:
    assert len(DOCS_ROWS) >= 30
    # each failure says what its message says, which the rows below check
    failing = [r for r in DOCS_ROWS if isinstance(r.expected, Fail)]
    assert len(failing) >= 10
    assert all(r.expected.says for r in failing), [r for r in failing if not r.expected.says]


@pytest.mark.parametrize("row", DOCS_ROWS, ids=[f"{r.type}:{r.raw}" for r in DOCS_ROWS])
def test_the_docs_examples_hold(row: Row) -> None:
    check(row)


# ------------------------------------------------------------ formatted numbers


def _format(number: float, style: str, decimals: int) -> str:
    text = f"{number:,.{decimals}f}"  # en: 1,234,567.89
    if style == "de":
        return text.replace(",", "_").replace(".", ",").replace("_", ".")
    if style == "fr":
        return text.replace(",", "\u202f").replace(".", ",")
    return text


@settings(max_examples=300)
@given(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from(["en", "de", "fr"]),
    st.sampled_from([1, 2]),
    st.sampled_from(["", "$", "EUR ", "Rp "]),
)
def test_a_formatted_decimal_reads_back_as_itself(
    cents: int, style: str, decimals: int, currency: str
) -> None:
    number = round(cents / 100, decimals)
    text = currency + _format(abs(number), style, decimals)
    if number < 0:
        text = "-" + text
    got = read("number", text)
    assert got.errors == [], (text, got.errors)
    assert got.values["v"] == pytest.approx(number, abs=10 ** -(decimals + 2)), text


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["en", "de", "fr"]))
def test_a_formatted_whole_number_reads_back_as_itself(number: int, style: str) -> None:
    text = _format(number, style, 0)
    if style == "de" and text.count(".") == 1:
        # one dot is a decimal mark by the contract ("1.234" is 1.234): the documented
        # exception, which a German site's whole numbers need `replace` for
        assert read("number", text).values["v"] == pytest.approx(number / 1000)
        return
    got = read("integer", text)
    assert (got.values["v"], got.errors) == (number, []), text


# ------------------------------------------------------------ fallbacks on failure

HTML = '<p class="amount">N/A</p><p data-field="amount">123</p>'


def _extract(field: dict[str, Any], html: str) -> Extraction:
    from parsel import Selector

    ext = FieldExtractor({"amount": FieldSpec.model_validate(field)})
    return ext.extract(Scope(url=BASE, selector=Selector(text=html)))


def test_a_value_that_fails_its_type_gives_way_to_the_next_source() -> None:
    got = _extract({"css": [".amount::text", "[data-field=amount]::text"], "type": "number"}, HTML)
    assert got.values == {"amount": 123}
    assert got.errors == []
    assert got.fallbacks == [("amount", 1, "css: [data-field=amount]::text")]  # drift


def test_a_value_that_breaks_a_rule_gives_way_to_the_next_source() -> None:
    html = '<p class="amount">-5</p><p data-field="amount">123</p>'
    got = _extract(
        {"css": [".amount::text", "[data-field=amount]::text"], "type": "number", "min": 0},
        html,
    )
    assert (got.values, got.violations) == ({"amount": 123}, [])
    assert got.fallbacks == [("amount", 1, "css: [data-field=amount]::text")]


def test_when_no_source_is_right_the_first_failure_stands() -> None:
    both_fail = '<p class="amount">N/A</p><p data-field="amount">n/a</p>'
    got = _extract(
        {"css": [".amount::text", "[data-field=amount]::text"], "type": "number"}, both_fail
    )
    assert got.values == {"amount": None}
    assert [f for f, _ in got.errors] == ["amount"]
    assert "'N/A'" in got.errors[0][1]
    broken = '<p class="amount">-5</p><p data-field="amount">-7</p>'
    got = _extract(
        {"css": [".amount::text", "[data-field=amount]::text"], "type": "number", "min": 0},
        broken,
    )
    assert got.values == {"amount": -5}  # kept, the record is invalid
    assert got.violations == [("amount", "min", -5)]
    assert got.fallbacks == []


def test_a_many_field_gives_way_as_a_whole() -> None:
    html = '<i class="a">1</i><i class="a">x</i><b>2</b><b>3</b>'
    got = _extract({"css": ["i.a::text", "b::text"], "type": "integer", "many": True}, html)
    assert got.values == {"amount": [2, 3]}
    assert got.fallbacks == [("amount", 1, "css: b::text")]


# ------------------------------------------------------------ currency and max_change


def test_a_change_of_currency_is_beyond_max_change() -> None:
    limits = ChangeLimits(
        {"price": FieldSpec.model_validate({"css": "p", "type": "price", "max_change": "50%"})}
    )
    old = {"price": {"amount": 10, "currency": "$"}}
    assert limits.breaches(old, {"price": {"amount": 10.5, "currency": "$"}}) == []
    [breach] = limits.breaches(old, {"price": {"amount": 10, "currency": "\u20ac"}})
    assert breach["rule"] == "currency"
    assert breach["reason"] == "the currency changed from '$' to '\u20ac'"
    [breach] = limits.breaches(old, {"price": {"amount": 30, "currency": "$"}})
    assert breach["rule"] == "max_change"


# ------------------------------------------------------------ the hot path


def test_plain_numbers_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common texts never reach the rules (no speed cost on plain pages)."""
    from framework.extract import convert

    def boom(*_: Any) -> Any:
        raise AssertionError("the slow path ran")

    monkeypatch.setattr(convert, "_parse_number", boom)
    ctx = convert.ConvertContext(date_format=None, absolute=True)
    for text in ("12", "-3", "12.50", "0.5", "123456789012", "1,234", "Rp 1.234,50", "$5"):
        convert.to_number(text, ctx)
    for text in ("-$5.00", "1.2K", "10-20"):
        with pytest.raises(AssertionError, match="slow path"):
            convert.to_number(text, ctx)


def test_messages_name_the_text_and_the_way_out() -> None:
    [(_, message)] = read("number", "$63K").errors
    assert re.search(r"'\$63K'.*magnitude: true", message)
    [(_, message)] = read("price", "Was $20, now $15").errors
    assert "pick:" in message
