"""The template language of URL, body and dedupe-key templates."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.errors import FrameworkError
from framework.spec.template import FILTERS, MissingValue, Template, TemplateError, slug


def test_names_and_plain_render() -> None:
    t = Template("/cases/{id}/tab/{tab}")
    assert t.names == {"id", "tab"}
    assert t.render({"id": "A-1", "tab": "rulings"}) == "/cases/A-1/tab/rulings"


def test_filters_and_chains() -> None:
    ctx = {"t": "  Café Müller / Zweig ", "n": "AbC"}
    assert Template("{t|strip}").render(ctx) == "Café Müller / Zweig"
    assert Template("{n|lower}-{n|upper}").render(ctx) == "abc-ABC"
    assert Template("{t|slug}").render(ctx) == "cafe-muller-zweig"
    assert Template("{t|strip|upper|slug}").render(ctx) == "cafe-muller-zweig"
    digest = hashlib.sha1(b"AbC", usedforsecurity=False).hexdigest()[:16]
    assert Template("{n|hash}").render(ctx) == digest
    assert Template("{n|lower|hash}").render(ctx) != digest


def test_slug_keeps_non_latin_letters_and_drops_underscores() -> None:
    assert slug("Дело № 5") == "дело-no-5"
    assert slug("a__b  c") == "a-b-c"
    assert slug("--x--") == "x"


def test_brace_escapes() -> None:
    t = Template("{{literal}} {x} }}")
    assert t.names == {"x"}
    assert t.render({"x": 1}) == "{literal} 1 }"


def test_values_are_rendered_as_text() -> None:
    t = Template("{a}/{b}/{c}/{d}")
    assert t.render({"a": 12.0, "b": 1.5, "c": True, "d": 7}) == "12/1.5/true/7"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("/x/{id", "unclosed '{'"),
        ("/x/}", "single '}'"),
        ("/x/{}", "does not name a field"),
        ("/x/{a b}", "does not name a field"),
        ("/x/{id|shout}", "unknown filter 'shout'"),
        ("/x/{a{b}}", "inside a placeholder"),
    ],
)
def test_syntax_errors(text: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=fragment) as info:
        Template(text)
    assert isinstance(info.value, FrameworkError)


def test_missing_value_is_a_typed_error() -> None:
    t = Template("/cases/{id}/{court}")
    with pytest.raises(MissingValue) as info:
        t.render({"id": "1"})
    assert info.value.name == "court"
    assert isinstance(info.value, TemplateError)
    with pytest.raises(MissingValue):
        t.render({"id": "1", "court": None})


def test_quote_escapes_values_but_not_a_leading_url() -> None:
    assert Template("/cases/{id}?q={q}").render({"id": "a/b c", "q": "x&y=z"}, quote=True) == (
        "/cases/a%2Fb%20c?q=x%26y%3Dz"
    )
    rendered = Template("{base}/tab/{id}").render(
        {"base": "http://h/cases/1?x=1", "id": "é"}, quote=True
    )
    assert rendered == "http://h/cases/1?x=1/tab/%C3%A9"
    assert Template("/{id}").render({"id": "a b"}) == "/a b"  # quote is opt-in


def test_templates_compare_by_text_and_filters_are_listed() -> None:
    assert Template("{a}") == Template("{a}")
    assert len({Template("{a}"), Template("{a}")}) == 1
    assert {"slug", "lower", "upper", "hash", "strip"} <= set(FILTERS)


@given(st.text(alphabet="{}|ab_ slug", max_size=20))
def test_any_text_compiles_or_is_a_template_error(text: str) -> None:
    try:
        t = Template(text)
    except TemplateError:
        return
    rendered = t.render(dict.fromkeys(t.names, "v"))
    assert isinstance(rendered, str)


@given(st.text(max_size=40))
def test_slug_is_stable_and_idempotent(text: str) -> None:
    once = slug(text)
    assert slug(once) == once
    assert " " not in once


def test_env_references_stay_as_written_and_values_cannot_forge_one() -> None:
    tpl = Template("/x/{id}?k={env:API_KEY}")
    assert tpl.names == {"id"}
    assert tpl.env == ("API_KEY",)
    assert tpl.render({"id": 7}, quote=True) == "/x/7?k={env:API_KEY}"
    # a page value that looks like a reference is text, never a reference
    assert Template("{a}").render({"a": "{env:API_KEY}"}) == "{ env:API_KEY}"


@pytest.mark.parametrize("text", ["{env:1A}", "{env:A|lower}", "{env: A}", "{env:}"])
def test_malformed_env_references_are_refused(text: str) -> None:
    with pytest.raises(TemplateError, match="is not an environment reference"):
        Template(text)
