"""The value types (framework/spec/values.py): each declared once, with the options and
rules it takes, and converted by framework/extract/convert.py; `validate` reads what a
type takes from that declaration, `duration` included."""

# ruff: noqa: E501  (YAML fixtures and full problem lines read best unwrapped)

from __future__ import annotations

from pathlib import Path

import pytest

from framework.extract.convert import CONVERTERS
from framework.spec.values import (
    CAPABILITIES,
    SOURCE_KEYS,
    TYPE_OPTIONS,
    FieldSpec,
    ValueType,
    takes,
    types_taking,
)
from tests.spec.test_spec_validate import problems


def test_every_type_has_a_converter_and_a_capability_set() -> None:
    assert set(CONVERTERS) == {t.value for t in ValueType}
    assert set(CAPABILITIES) == set(ValueType)
    # every option some type refuses is a key of a field
    assert {f.alias or name for name, f in FieldSpec.model_fields.items()} | set(
        SOURCE_KEYS
    ) >= TYPE_OPTIONS


def test_what_a_type_takes() -> None:
    assert takes("duration") == {"min", "max", "max_change"}
    assert "magnitude" in takes("price")
    assert "free" not in takes("number")
    assert takes("no such type") == frozenset()
    assert types_taking("format") == ("date", "datetime")
    assert types_taking("min") == ("integer", "number", "price", "duration")


def test_a_duration_field_is_valid_with_its_rules(tmp_path: Path) -> None:
    body = """
    detail:
      id: "#id::text"
      fields:
        runtime: {css: ".runtime::text", type: duration, min: 60, max: 36000, default: "90 min", max_change: "10%"}
        length: {css: ".length::text", type: duration, enum: [3600, 5400], expected: 5400}
    """
    assert problems(tmp_path, body) == []


def test_options_a_duration_does_not_take(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        detail:
          id: "#id::text"
          fields:
            a: {css: p, type: duration, magnitude: true}
            b: {css: p, type: duration, format: "%H:%M"}
            c: {css: p, type: duration, min_length: 2}
            d: {css: p, type: duration, default: soon}
            e: {css: p, type: duration, enum: ["1h"]}
        """,
    )
    assert got == [
        "8:44: `magnitude` on a field of type duration; expected type integer, number or price",
        "9:41: `format` on a field of type duration; expected type date or datetime",
        "10:45: `min_length` on a field of type duration; expected type string or url",
        "11:42: default 'soon' is not a duration: not a duration: 'soon'; expected ISO 8601 (PT2H30M), 2h 30m, 90 min or h:mm:ss; expected a duration",
        "12:40: enum value '1h' is never the value of a duration field (it reads as 3600); expected 3600",
    ]


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("min: 1", "type integer, number, price or duration"),
        (
            "max_change: 5",
            "type integer, number, price or duration (`frozen: true` for other values)",
        ),
        ("languages: [en]", "type date or datetime"),
        ("free: 0", "type price"),
    ],
)
def test_an_option_on_a_type_that_does_not_take_it_names_the_types_that_do(
    tmp_path: Path, option: str, expected: str
) -> None:
    body = f"""
    detail:
      id: "#id::text"
      fields:
        a: {{css: p, type: boolean, {option}}}
    """
    [got] = problems(tmp_path, body)
    assert got.endswith(f"; expected {expected}"), got
