"""Where a page keeps data in its scripts (framework/extract/hints.py): the names
`framework preview` suggests when a kind's `each` finds nothing."""

from __future__ import annotations

from parsel import Selector

from framework.extract.hints import HINTS_MAX, ScriptData, script_data

PAGE = (
    """<html><head>
<script>var config = {"a": 1}; let items = [1, 2]; if (x == {}) {}; f = () => {};</script>
<script>window.__STATE__ = {"cases": []}; app.data.rows = [{"id": 1}];</script>
<script id="__NEXT_DATA__" type="application/json">{"props": {}}</script>
<script type="application/ld+json">
  {"@graph": [{"@type": "Product"}, {"@type": ["Offer", "Thing"]}]}
</script>
<script type="application/ld+json">not json</script>
<script type="text/template">var ignored = {}</script>
</head><body><h1>A page with its text</h1><p>"""
    + "words " * 60
    + """</p></body></html>"""
)


def test_assignments_json_scripts_and_jsonld_types_are_named() -> None:
    found = script_data(Selector(text=PAGE))
    assert found.assigned == ["config", "items", "window.__STATE__", "app.data.rows"]
    assert found.json_scripts == ["script#__NEXT_DATA__"]
    assert found.jsonld_types == ["Product", "Offer", "Thing"]
    assert found.scripted is False  # the page shows its text
    assert found.lines() == [
        "scripts assign objects or lists to: config, items, window.__STATE__, app.data.rows "
        "(embedded: {var: NAME})",
        "scripts hold JSON: script#__NEXT_DATA__ (embedded: {script: SELECTOR})",
        "JSON-LD objects of type: Product, Offer, Thing (jsonld: TYPE)",
    ]


def test_a_page_javascript_builds_is_said_unless_it_was_rendered() -> None:
    page = (
        "<html><body><div id='app'></div><script>"
        + "document.getElementById('app').innerHTML = atob('PGgx');" * 20
        + "</script></body></html>"
    )
    found = script_data(Selector(text=page))
    assert found.scripted is True
    assert found.assigned == []  # a string, not an object or list literal
    assert "JavaScript may build it" in found.lines()[0]
    assert not script_data(Selector(text=page), rendered=True)


def test_a_plain_page_has_no_hint_and_names_are_capped() -> None:
    assert not script_data(Selector(text="<html><body><p>hello</p></body></html>"))
    many = "<script>" + "".join(f"var v{i} = {{}};" for i in range(50)) + "</script>"
    assert len(script_data(Selector(text=many)).assigned) == HINTS_MAX
    assert not ScriptData()


def test_hostile_scripts_are_read_in_one_pass() -> None:
    """A megabyte of one identifier, of a dotted chain, of `=`: each read once (a pattern
    tried from every character would take hours on these)."""
    # JSON-LD nested past the JSON parser's recursion limit: no type, no crash
    deep = '<script type="application/ld+json">' + "[" * 100_000 + "</script>"
    assert script_data(Selector(text=deep)).jsonld_types == []
    for body in ("a" * 1_000_000, "a." * 500_000, "a =" * 300_000, "x" * 100 + " = {"):
        found = script_data(Selector(text=f"<script>{body}</script><p>{'t ' * 200}</p>"))
        assert found.assigned == []  # no literal assigned; a name past 64 characters: none
