"""Field extraction and value conversion (framework.extract.fields / .convert)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parsel import Selector

from framework.extract.convert import (
    ConversionError,
    ConvertContext,
    to_boolean,
    to_date,
    to_datetime,
    to_integer,
    to_number,
)
from framework.extract.fields import FieldExtractor, JsonPath, Scope
from framework.spec.models import FieldSpec

PAGE = """<html><head><title>Case</title></head><body>
<h1>
   Case   A-12
</h1>
<p class="lead">Filed <b>12.03.2024</b> at <i>court</i></p>
<span class="amount" data-field="amount">EUR 1.234,50</span>
<span class="status">  OPEN </span>
<a class="pdf" href="../docs/a-12.pdf">pdf</a>
<ul class="tags"><li> one </li><li></li><li>two</li></ul>
<table class="parties">
  <tr><td class="role">plaintiff</td><td class="name">Ann  Lee</td><td class="n">3</td></tr>
  <tr><td class="role">defendant</td><td class="name">Bob</td><td class="n">x</td></tr>
</table>
<script>window.__DATA__ = {"case": {"judge": "Kim", "ids": [4, 5]}};</script>
</body></html>"""
URL = "http://127.0.0.1:8800/cases/12/detail"


def fields(spec: dict[str, Any]) -> FieldExtractor:
    return FieldExtractor({k: FieldSpec.model_validate(v) for k, v in spec.items()})


def page_scope() -> Scope:
    return Scope(URL, Selector(text=PAGE), page_text=PAGE)


def run(spec: dict[str, Any], scope: Scope | None = None) -> Any:
    return fields(spec).extract(scope or page_scope())


def test_css_text_is_normalised() -> None:
    got = run({"title": "h1::text"})
    assert got.values == {"title": "Case A-12"}
    assert got.missing == got.fallbacks == got.errors == []


def test_element_match_gives_its_text_content() -> None:
    assert run({"lead": "p.lead"}).values["lead"] == "Filed 12.03.2024 at court"


def test_attribute_and_xpath() -> None:
    got = run({"href": "a.pdf::attr(href)", "x": {"xpath": "//span[@class='status']/text()"}})
    assert got.values == {"href": "../docs/a-12.pdf", "x": "OPEN"}


@pytest.mark.parametrize("query", ["h1::text", "span.amount::text", "a::attr(href)", "li::text"])
def test_agrees_with_parsel_on_the_first_non_empty_value(query: str) -> None:
    sel = Selector(text=PAGE)
    expected = next(" ".join(v.split()) for v in sel.css(query).getall() if v.strip())
    assert run({"v": query}).values["v"] == expected


def test_fallbacks_are_reported_with_their_index() -> None:
    got = run({"amount": {"css": [".gone::text", "[data-field=amount]::text"], "type": "number"}})
    assert got.values == {"amount": 1234.5}
    assert got.fallbacks == [("amount", 1, "css: [data-field=amount]::text")]


def test_source_kinds_in_written_order() -> None:
    got = run({"v": {"xpath": "//nothing/text()", "css": "h1::text"}})
    assert got.values["v"] == "Case A-12"
    assert got.fallbacks == [("v", 1, "css: h1::text")]


def test_regex_over_text_and_url() -> None:
    got = run(
        {
            "number": {"re": r"Case\s+(\w-\d+)"},
            "named": {"re": r"Filed (?P<value>[\d.]+)", "type": "date"},
            "whole": {"re": r"\d{2}\.\d{2}\.\d{4}"},
            "case_id": {"url": r"/cases/(\d+)/", "type": "integer"},
        }
    )
    assert got.values == {
        "number": "A-12",
        "named": "2024-03-12",
        "whole": "12.03.2024",
        "case_id": 12,
    }


def test_embedded_json_is_parsed_once_per_page() -> None:
    spec = {"judge": {"embedded": {"re": r"__DATA__ = (\{.*?\});", "path": "$.case.judge"}}}
    ext = fields(spec)
    scope = page_scope()
    assert ext.extract(scope).values == {"judge": "Kim"}
    source = ext._fields[0].sources[0]
    doc = source._doc
    assert ext.extract(Scope(URL, scope.selector, page_text=scope.page_text)).values == {
        "judge": "Kim"
    }
    assert source._doc is doc  # same page text: not parsed again


def test_count_and_const() -> None:
    got = run(
        {"parties": {"count": "table.parties tr", "type": "integer"}, "src": {"const": "web"}}
    )
    assert got.values == {"parties": 2, "src": "web"}


def test_many_drops_empty_matches() -> None:
    assert run({"tags": {"css": "ul.tags li::text", "many": True}}).values == {
        "tags": ["one", "two"]
    }


def test_normalisation_options() -> None:
    got = run(
        {
            "raw": {"css": "h1::text", "strip": False, "collapse": False},
            "collapsed": {"css": "h1::text", "strip": False},
            "low": {"css": ".status::text", "lowercase": True},
            "rep": {"css": "h1::text", "replace": [{"pattern": r"^Case ", "to": ""}]},
        }
    )
    assert got.values["raw"] == "\n   Case   A-12\n"
    assert got.values["collapsed"] == " Case A-12 "
    assert got.values["low"] == "open"
    assert got.values["rep"] == "A-12"


def test_url_type_resolves_against_the_page() -> None:
    got = run(
        {
            "pdf": {"css": "a.pdf::attr(href)", "type": "url"},
            "rel": {"css": "a.pdf::attr(href)", "type": "url", "absolute": False},
        }
    )
    assert got.values == {
        "pdf": "http://127.0.0.1:8800/cases/docs/a-12.pdf",
        "rel": "../docs/a-12.pdf",
    }


def test_missing_required_default_and_optional() -> None:
    got = run(
        {
            "need": {"css": ".gone::text", "required": True},
            "opt": {"css": ".gone::text"},
            "dflt": {"css": ".gone::text", "default": "n/a"},
        }
    )
    # every record has every field: absent ones are explicit nulls, never invented
    assert got.values == {"need": None, "opt": None, "dflt": "n/a"}
    assert got.missing == ["need"]
    assert not got.complete


def test_conversion_errors_make_required_fields_missing_and_limits_are_rules() -> None:
    got = run(
        {
            "a": {"css": ".status::text", "type": "integer", "required": True},
            "b": {"css": ".amount::text", "type": "number", "max": 1000},
            "c": {"css": ".amount::text", "type": "number", "min": 0, "max": 2000},
        }
    )
    # a value outside min/max is kept and named as a broken rule (the record is invalid)
    assert got.values == {"a": None, "b": 1234.5, "c": 1234.5}
    assert got.missing == ["a"]
    assert [f for f, _ in got.errors] == ["a"]
    assert got.violations == [("b", "max", 1234.5)]


def test_nested_group_of_rows() -> None:
    got = run(
        {
            "parties": {
                "each": "table.parties tr",
                "fields": {
                    "role": "td.role::text",
                    "name": "td.name::text",
                    "n": {"css": "td.n::text", "type": "integer", "required": True},
                },
            }
        }
    )
    assert got.values["parties"] == [
        {"role": "plaintiff", "name": "Ann Lee", "n": 3},
        {"role": "defendant", "name": "Bob", "n": None},
    ]
    assert got.missing == ["parties[1].n"]
    assert got.errors[0][0] == "parties[1].n"


def test_empty_group_is_missing_when_required() -> None:
    got = run({"rows": {"each": "table.none tr", "fields": {"a": "td::text"}, "required": True}})
    assert got.values == {"rows": []}
    assert got.missing == ["rows"]


def test_json_scope_and_nested_json_rows() -> None:
    doc = json.loads(
        '{"id": 7, "title": " T ", "tags": ["a", "b"], "price": "1,234", "ok": "yes",'
        ' "rows": [{"d": "2024-01-02", "n": 1}, {"d": "03.02.2024", "n": 2}], "meta": {"x": null}}'
    )
    got = run(
        {
            "id": {"json": "$.id", "type": "string"},
            "title": {"json": "$.title"},
            "tags": {"json": "$.tags", "many": True},
            "price": {"json": "$.price", "type": "integer"},
            "ok": {"json": "$.ok", "type": "boolean"},
            "rows": {
                "each": "$.rows[*]",
                "fields": {"d": {"json": "$.d", "type": "date"}, "n": {"json": "n"}},
            },
            "x": {"json": "$.meta.x", "default": "none"},
            "filtered": {"json": "$.rows[?(@.n > 1)].d"},
        },
        Scope(URL, None, doc),
    )
    assert got.values == {
        "id": "7",
        "title": "T",
        "tags": ["a", "b"],
        "price": 1234,
        "ok": True,
        "rows": [{"d": "2024-01-02", "n": "1"}, {"d": "2024-02-03", "n": "2"}],  # untyped: text
        "x": "none",
        "filtered": "03.02.2024",
    }


def test_json_objects_are_kept_for_string_fields() -> None:
    got = run({"meta": {"json": "$.meta"}}, Scope(URL, None, {"meta": {"a": [1]}}))
    assert got.values == {"meta": {"a": [1]}}


@pytest.mark.parametrize(
    ("path", "doc", "expected"),
    [
        ("$.a.b", {"a": {"b": 1}}, [1]),
        ("a.b", {"a": {"b": 1}}, [1]),
        ("$.rows[*].x", {"rows": [{"x": 1}, {"y": 2}, {"x": 3}]}, [1, 3]),
        ("$.rows[-1]", {"rows": [1, 2, 3]}, [3]),
        ("$['odd key']", {"odd key": 5}, [5]),
        ("$.*", {"a": 1, "b": 2}, [1, 2]),
        ("$.missing.x", {"a": 1}, []),
        ("$..x", {"a": {"x": 1}, "b": [{"x": 2}]}, [1, 2]),
    ],
)
def test_json_path_fast_walk_matches_jsonpath_ng(path: str, doc: Any, expected: list[Any]) -> None:
    from jsonpath_ng.ext import parse

    assert sorted(JsonPath(path).find(doc)) == expected
    assert sorted(m.value for m in parse(path).find(doc)) == expected


def test_a_single_id_field() -> None:
    spec = FieldSpec.model_validate({"css": ["#id::text", "h1::text"], "required": True})
    got = FieldExtractor({"id": spec}).extract(page_scope())
    assert got.values == {"id": "Case A-12"}
    assert [(f, i) for f, i, _ in got.fallbacks] == [("id", 1)]
    bad = FieldSpec.model_validate({"css": ".status::text", "type": "integer"})
    got = FieldExtractor({"id": bad}).extract(page_scope())
    assert got.values == {"id": None}
    assert [f for f, _ in got.errors] == ["id"]
    none = FieldSpec.model_validate({"css": "#nope::text"})
    got = FieldExtractor({"id": none}).extract(page_scope())
    assert (got.values, got.missing, got.errors) == ({"id": None}, [], [])


def test_extractor_is_reusable_across_records() -> None:
    ext = fields({"name": "td.name::text", "role": "td.role::text"})
    rows = Selector(text=PAGE).css("table.parties tr")
    got = [ext.extract(Scope(URL, row)).values for row in rows]
    assert got == [{"name": "Ann Lee", "role": "plaintiff"}, {"name": "Bob", "role": "defendant"}]


# ---------------------------------------------------------------- conversion

CTX = ConvertContext(date_format=None, absolute=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1234", 1234),
        ("1,234", 1234),
        ("1,234.50", 1234.5),
        ("€ 1.234,50", 1234.5),
        ("1.234.567", 1234567),
        ("1 234,5", 1234.5),
        ("1\u00a0234", 1234),
        ("CHF 1'234.50", 1234.5),
        ("-12", -12),
        ("\u221212.5", -12.5),
        ("(1,234)", -1234),
        ("12%", 12),
        ("3.5", 3.5),
        ("0,5", 0.5),
        ("Page 3 of 10", 3),
        ("approx. 42 items", 42),
        ("Case A-12", 12),
    ],
)
def test_number_rules(text: str, expected: float) -> None:
    assert to_number(text, CTX) == expected


def test_number_refuses_text_without_digits_and_bools() -> None:
    with pytest.raises(ConversionError):
        to_number("n/a", CTX)
    with pytest.raises(ConversionError):
        to_number(True, CTX)


def test_integer_must_be_whole() -> None:
    assert to_integer("12.0", CTX) == 12
    assert to_integer(7.0, CTX) == 7
    with pytest.raises(ConversionError, match="whole"):
        to_integer("12.5", CTX)


@pytest.mark.parametrize("text", ["yes", "TRUE", "1", "on", "Y"])
def test_boolean_true(text: str) -> None:
    assert to_boolean(text, CTX) is True


@pytest.mark.parametrize("text", ["no", "False", "0", "off", "n"])
def test_boolean_false(text: str) -> None:
    assert to_boolean(text, CTX) is False


def test_boolean_refuses_other_words() -> None:
    with pytest.raises(ConversionError):
        to_boolean("maybe", CTX)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-12", "2024-03-12"),
        ("2024-03-12T10:00:00", "2024-03-12"),
        ("12.03.2024", "2024-03-12"),
        ("12/03/2024", "2024-03-12"),
        ("2024/03/12", "2024-03-12"),
        ("March 12, 2024", "2024-03-12"),
        ("Mar 3rd, 2024", "2024-03-03"),
        ("12 March 2024", "2024-03-12"),
    ],
)
def test_date_forms(text: str, expected: str) -> None:
    assert to_date(text, CTX) == expected


def test_date_with_explicit_format_and_refusal() -> None:
    assert (
        to_date("03-12-2024", ConvertContext(date_format="%m-%d-%Y", absolute=True)) == "2024-03-12"
    )
    with pytest.raises(ConversionError, match="not a date"):
        to_date("soon", CTX)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-03-12T10:11:12Z", "2024-03-12T10:11:12+00:00"),
        ("2024-03-12 10:11", "2024-03-12T10:11:00"),
        ("12.03.2024 10:11", "2024-03-12T10:11:00"),
        ("12.03.2024", "2024-03-12T00:00:00"),
        (0, "1970-01-01T00:00:00+00:00"),
    ],
)
def test_datetime_forms(value: Any, expected: str) -> None:
    assert to_datetime(value, CTX) == expected


def test_xpath_functions_give_plain_values() -> None:
    got = run(
        {
            "rows": {"xpath": "count(//table[@class='parties']/tr)"},
            "n": {"xpath": "count(//table[@class='parties']/tr)", "type": "integer"},
            "has": {"xpath": "boolean(//a[@class='pdf'])", "type": "boolean"},
            "sel": {"xpath": "//a[re:test(@href, '\\.pdf$')]/@href"},
        }
    )
    assert got.values == {"rows": "2", "n": 2, "has": True, "sel": "../docs/a-12.pdf"}


@given(st.text(max_size=30))
def test_converters_fail_only_with_conversion_errors(text: str) -> None:
    for convert in (to_number, to_integer, to_boolean, to_date, to_datetime):
        with contextlib.suppress(ConversionError):
            convert(text, CTX)


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_formatted_integers_round_trip(n: int) -> None:
    assert to_integer(f"{n:,}", CTX) == n
    assert to_integer(f"{n:,}".replace(",", ".") + ",00", CTX) == n  # 1.234.567,00
    assert to_number(f"{n:,}.50", CTX) == n + (0.5 if n >= 0 else -0.5)
    assert to_integer(f"{n:_}".replace("_", " "), CTX) == n


def test_regex_on_a_json_record_reads_its_json_text() -> None:
    got = run({"year": {"re": r'"filed": "(\d{4})'}}, Scope(URL, None, {"filed": "2024-01-02"}))
    assert got.values == {"year": "2024"}


# ------------------------------------------------------------ bounded extraction

EXSLT_CASES = [
    "//li[re:test(., '^t')]/text()",
    "//li[re:test(., 'ONE', 'i')]/text()",
    "//td[re:test(@class, '^(role|name)$')]/text()",
    "re:test(//h1, 'Case\\s+A-\\d+')",
    "re:match(//h1, '([A-Z])-(\\d+)')",
    "re:match(string(//p), '\\d+', 'g')",
    "re:match(//h1, 'nomatch')",
    "re:replace(//span[@class='amount'], '[.,]', 'g', '_')",
    "re:replace(//span[@class='amount'], '[.,]', '', '_')",
    "re:replace(//p, '(\\d+)\\.(\\d+)', 'g', '\\2/\\1')",
    "count(//*[re:test(name(), '^t[dr]$')])",
]


def _comparable(result: Any) -> Any:
    if isinstance(result, list):
        return [r if isinstance(r, str) else (r.tag, r.text) for r in result]
    return result


@pytest.mark.parametrize("expr", EXSLT_CASES)
def test_exslt_regexp_functions_behave_as_lxml_own(expr: str) -> None:
    from lxml import etree

    from framework.extract.fields import compile_xpath
    from framework.extract.patterns import EXSLT_REGEXP_NS

    root = Selector(text=PAGE).root
    theirs = etree.XPath(expr, namespaces={"re": EXSLT_REGEXP_NS}, smart_strings=False)
    assert _comparable(compile_xpath(expr)(root)) == _comparable(theirs(root))


def _budgeted(limits: Any) -> Any:
    from framework.extract.patterns import page_budget

    return page_budget(limits)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "spec",
    [
        {"re": "(a|aa)+$"},
        {"xpath": "//p[re:test(., '(a|aa)+$')]/text()"},
        {"css": "p::text", "replace": [{"pattern": "(a|aa)+$", "to": "x"}]},
        {"embedded": {"re": "(a|aa)+$", "path": "$"}},
    ],
)
def test_a_backtracking_pattern_stops_at_the_page_time_budget(spec: dict[str, Any]) -> None:
    from framework.extract.patterns import LimitExceeded, Limits

    trap = "<html><body><p>" + "a" * 60 + "!</p></body></html>"
    scope = Scope(URL, Selector(text=trap), page_text=trap)
    with _budgeted(Limits(timeout=0.3)), pytest.raises(LimitExceeded) as err:
        fields({"trap": spec}).extract(scope)
    assert "FRAMEWORK_EXTRACT_TIMEOUT" in str(err.value)


@pytest.mark.timeout(60)
def test_a_recursive_json_path_stops_at_the_match_cap() -> None:
    from framework.extract.patterns import LimitExceeded, Limits

    depth = 300  # 600 bytes: C(300, 3) = 4.4 million matches for the path below
    doc = json.loads("[" * depth + "]" * depth)
    path = JsonPath("$..*..*..*")
    with _budgeted(Limits(max_matches=10_000)), pytest.raises(LimitExceeded) as err:
        path.find(doc)
    assert "FRAMEWORK_MAX_MATCHES" in str(err.value)
    assert len(JsonPath("$..*").find(doc)) == depth - 1  # a sane path is not affected


def test_selector_caps_on_matches_and_characters() -> None:
    from framework.extract.patterns import LimitExceeded, Limits

    scope = page_scope()
    with _budgeted(Limits(max_matches=2)), pytest.raises(LimitExceeded, match="MATCHES"):
        fields({"x": {"css": "td::text", "many": True}}).extract(scope)
    with _budgeted(Limits(max_chars=5)), pytest.raises(LimitExceeded, match="MATCH_CHARS"):
        fields({"x": {"css": "h1::text"}}).extract(scope)
    with _budgeted(Limits(max_chars=6)):  # within the caps ("one" + "two"): as ever
        assert fields({"x": {"css": "li::text", "many": True}}).extract(scope).values == {
            "x": ["one", "two"]
        }


@pytest.mark.timeout(60)
def test_json_path_regexes_run_bounded_and_risky_ones_are_refused() -> None:
    from framework.extract.patterns import LimitExceeded, Limits

    doc = {"items": [{"name": "a" * 60 + "!"}, {"name": "bob"}]}
    assert JsonPath('$.items[?(@.name =~ "^b")].name').find(doc) == ["bob"]
    for slow in ('$.items[?(@.name =~ "(a|aa)+$")].name', "$.items[*].name.`sub(/(a|aa)+$/, x)`"):
        path = JsonPath(slow)
        with _budgeted(Limits(timeout=0.3)), pytest.raises(LimitExceeded, match="TIMEOUT"):
            path.find(doc)
    for risky in ('$.items[?(@.name =~ "(a+)+$")]', "$.items[*].name.`sub(/(a*)*b/, x)`"):
        with pytest.raises(ValueError, match="backtrack"):
            JsonPath(risky)
