"""Dedupe keys: the same datum always gets the same key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.spec import (
    KeySpec,
    MissingValue,
    TemplateError,
    make_dedupe_key,
    normalise_source_id,
)


def test_default_key_is_source_type_colon_id() -> None:
    assert make_dedupe_key(KeySpec(), "sipp-demo", "12/2024", {}) == "sipp-demo:12/2024"


@pytest.mark.parametrize("raw", ["A 12", "  A 12", "A   12 ", "A\n\t12", "A\u00a012"])
def test_whitespace_variants_give_one_key(raw: str) -> None:
    assert make_dedupe_key(KeySpec(), "demo", raw, {}) == "demo:A 12"


def test_case_is_kept_unless_the_spec_says_ids_are_case_insensitive() -> None:
    assert make_dedupe_key(KeySpec(), "demo", "AbC", {}) == "demo:AbC"
    lower = KeySpec(lowercase=True)
    assert make_dedupe_key(lower, "demo", "AbC", {}) == "demo:abc"
    assert make_dedupe_key(lower, "demo", "abc", {}) == make_dedupe_key(lower, "demo", "ABC", {})


def test_unicode_forms_are_unified() -> None:
    composed, decomposed = "Caf\u00e9", "Cafe\u0301"
    assert make_dedupe_key(KeySpec(), "d", composed, {}) == make_dedupe_key(
        KeySpec(), "d", decomposed, {}
    )


def test_template_over_fields_gets_the_canonical_prefix() -> None:
    key = KeySpec(template="{court|slug}/{title|hash}")
    record = {"court": " Hof  Wien ", "title": "A  title"}
    got = make_dedupe_key(key, "demo", "ignored", record)
    assert got.startswith("demo:hof-wien/")
    # field whitespace is normalised before hashing, so odd spacing keeps the key
    again = make_dedupe_key(key, "demo", "x", {"court": "Hof Wien", "title": "A title"})
    assert got == again


def test_template_that_writes_the_prefix_itself_is_not_doubled() -> None:
    key = KeySpec(template="{source_type}:{court}-{id}")
    assert make_dedupe_key(key, "demo", "7", {"court": "x"}) == "demo:x-7"


def test_missing_field_and_empty_id_are_errors() -> None:
    with pytest.raises(MissingValue):
        make_dedupe_key(KeySpec(template="{court}"), "demo", "1", {})
    with pytest.raises(TemplateError, match="empty id"):
        make_dedupe_key(KeySpec(), "demo", "   ", {})


def test_normalise_source_id() -> None:
    assert normalise_source_id(12.0) == "12"
    assert normalise_source_id(12) == "12"
    assert normalise_source_id(" a \n b ") == "a b"


_ids = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() != "")


@given(_ids, st.sampled_from([" ", "  ", "\t", "\n", "\u00a0"]))
def test_padding_and_spacing_never_change_the_key(raw: str, space: str) -> None:
    base = make_dedupe_key(KeySpec(), "demo", raw, {})
    padded = space + raw.replace(" ", space + space) + space
    assert make_dedupe_key(KeySpec(), "demo", padded, {}) == base
    assert base.startswith("demo:")
    assert make_dedupe_key(KeySpec(), "demo", base.removeprefix("demo:"), {}) == base
