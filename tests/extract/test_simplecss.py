"""Simple selectors looked up in an index give exactly what their XPath gives.

:mod:`framework.extract.simplecss` answers the XPath parsel writes for one compound CSS
selector (a tag, ``#id``, ``.class``, ``[attr]``, ``[attr=value]``, with ``::text``,
``::attr(x)`` or nothing) from one index of the record's elements. Here it is checked
against lxml's own evaluation of the same XPath: on generated trees built to hit the
edges (classes split by tabs, newlines and non-XPath whitespace such as NBSP, repeated
tokens, duplicate ids, empty attributes, comments between text nodes, nested matches,
record roots inside the page), and through whole extractions of every page of the demo
site, with the index and without it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from parsel import Selector

from framework.crawl.page import CompiledJob
from framework.demo.data import generate
from framework.demo.pages import render
from framework.extract import fields as fields_module
from framework.extract.fields import FieldExtractor, Scope, compile_css
from framework.extract.simplecss import TreeIndex, match_of
from framework.spec import load_spec
from framework.spec.models import FieldSpec
from tests.paths import REPO

SIMPLE = [
    "p",
    "span::text",
    "*",
    "div::text",
    ".a",
    ".a::text",
    ".b::text",
    "p.a::text",
    "div.a.b::text",
    "#x::text",
    "#x.a::attr(title)",
    "span#y",
    "[title]::text",
    "[title]::attr(title)",
    "[data-v=one]::text",
    'a[data-v="two words"]::attr(href)',
    ".a[title]::attr(data-v)",
    "[id]::attr(id)",
    "li::text",
    ".c.a::text",
]
NOT_SIMPLE = [
    "div p::text",
    "div > p",
    "p + p",
    ".a:first-child",
    "p:nth-child(2)",
    "[title~=t]",
    "[title^=t]",
    "[lang|=en]",
    "[data-v='it\\'s']",
    "p::text, span::text",
    ":not(.a)",
    "*::text",
]


def test_the_translator_forms_are_recognised_and_nothing_else() -> None:
    for css in SIMPLE:
        assert match_of(compile_css(css).path) is not None, css
    for css in NOT_SIMPLE:
        assert match_of(compile_css(css).path) is None, css
    for xpath in (
        "//p",
        "descendant-or-self::p[1]",
        "descendant-or-self::*[@class = 'a' or @id = 'b']",
        "descendant-or-self::*[@class and contains(@class, 'a')]",
        "descendant-or-self::*[@class and contains(@class, 'a') and contains(concat(' ', "
        "normalize-space(@class), ' '), ' b ')]",  # the two tokens must agree
        "descendant-or-self::p/text()/..",
        "descendant-or-self::p[@title = 'a' and ]",
    ):
        assert match_of(xpath) is None, xpath
    # written by hand in the translator's form, an XPath takes the same path
    assert match_of("descendant-or-self::p[@id = 'x']/@title") is not None


TAGS = ["div", "p", "span", "li", "a"]
TOKENS = ["a", "b", "c", "a-b", "A"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\xa0", "\u2003", "\x0c"]


def _tree(rng: random.Random, depth: int = 0) -> str:
    parts: list[str] = []
    for _ in range(rng.randint(0, 4 if depth < 3 else 0) or 1):
        if rng.random() < 0.35:
            parts.append(rng.choice(["text", " ", "x &amp; y", "\xa0", "\n  t  \n", "&lt;b&gt;"]))
        if rng.random() < 0.1:
            extra = ["<br>", "<script>a<b;</script>", "<![CDATA[c]]>d", "<?pi x?>e"]
            parts.append(rng.choice(extra))
        if rng.random() < 0.15:
            parts.append("<!-- note -->" + rng.choice(["", "after", " "]))
        tag = rng.choice(TAGS)
        attrs = []
        if rng.random() < 0.6:
            sep = rng.choice(SPACES)
            tokens = rng.sample(TOKENS, rng.randint(0, 3)) + (["a"] if rng.random() < 0.1 else [])
            attrs.append(f'class="{rng.choice(["", sep])}{sep.join(tokens)}{sep}"')
        if rng.random() < 0.25:
            attrs.append(f'id="{rng.choice(["x", "y", "x"])}"')
        if rng.random() < 0.3:
            attrs.append(f'title="{rng.choice(["", "t", "t u"])}"')
        if rng.random() < 0.3:
            attrs.append(f'data-v="{rng.choice(["one", "two words", ""])}"')
        if tag == "a" and rng.random() < 0.5:
            attrs.append('href="/h"')
        inner = _tree(rng, depth + 1) if depth < 3 and rng.random() < 0.6 else ""
        text = rng.choice(["", "v", " v w ", "1"])
        tail = rng.choice(["", "tail", " "])
        parts.append(f"<{tag} {' '.join(attrs)}>{text}{inner}</{tag}>{tail}")
    return "".join(parts)


def _same(root: Any, xpath: etree.XPath, index: TreeIndex) -> None:
    match = match_of(xpath.path)
    assert match is not None
    fast = match.nodes(index)
    slow = xpath(root)
    if fast is None:  # nested matches: the XPath answers, and it must be a text() read
        assert match.take == "text()"
        return
    assert fast == slow, (xpath.path, etree.tostring(root))


@pytest.mark.parametrize("seed", range(300))
def test_generated_trees_give_the_xpath_answer(seed: int) -> None:
    rng = random.Random(seed)
    html = f"<html><body>{_tree(rng)}{_tree(rng)}</body></html>"
    page = Selector(text=html).root
    compiled = [compile_css(css) for css in SIMPLE]
    roots = [page, *page.iter(etree.Element)]  # the page and every record root in it
    for root in roots:
        index = TreeIndex(root)
        for xpath in compiled:
            _same(root, xpath, index)


def test_nested_matches_are_left_to_the_xpath() -> None:
    root = Selector(text='<div class="a">1<p class="a">2</p>3</div>').root
    xpath = compile_css(".a::text")
    match = match_of(xpath.path)
    assert match is not None
    assert match.nodes(TreeIndex(root)) is None
    assert xpath(root) == ["1", "2", "3"]  # document order, which a per-element read breaks
    # and a field reading them still gets the XPath's answer
    spec = {n: {"css": ".a::text", "many": True} for n in ("one", "two", "three")}
    got = _extract(spec, Scope(url="http://h/", selector=Selector(root=root)), indexed=True)
    assert got.values["one"] == ["1", "2", "3"]


def _extract(fields: dict[str, Any], scope: Scope, *, indexed: bool) -> Any:
    extractor = FieldExtractor({k: FieldSpec.model_validate(v) for k, v in fields.items()})
    simple = [
        src
        for cf in extractor._fields
        for src in cf.sources
        if getattr(src, "simple", None) is not None
    ]
    for src in simple:
        assert src.indexes is (len(simple) >= fields_module.INDEX_MIN_SELECTORS)
        src.indexes = indexed
    return extractor.extract(scope)


def test_an_extractor_with_few_simple_selectors_does_not_index() -> None:
    html = '<html><body><h1 class="t">T</h1><p id="x">X</p></body></html>'
    scope = Scope(url="http://h/", selector=Selector(text=html))
    got = _extract({"title": "h1.t::text", "x": "#x::text"}, scope, indexed=False)
    assert scope._index is None
    assert got.values == {"title": "T", "x": "X"}


def test_every_demo_page_extracts_the_same_with_and_without_the_index() -> None:
    """Whole extractions (fields with fallbacks, types, many, each rows) of every page of
    the demo site, edge cases included, with the demo spec's selectors and more."""
    pages = render(generate(60, 7, True), "http://127.0.0.1:1")
    fields = {
        "number": {"css": ["#case-number::text", ".missing::text"], "required": True},
        "title": "h1.title::text",
        "court": ".court::text",
        "filed": {"css": ".filed::text", "type": "date", "format": "%d.%m.%Y"},
        "amount": {"css": [".amount::text", "[data-field=amount]::text"], "type": "number"},
        "room": ".room::text",
        "parties": {"css": ".parties span::text", "many": True},
        "tab_links": {"css": "a.tab::attr(href)", "many": True},
        "tabs": {"css": "[data-tab]::attr(data-tab)", "many": True},
        "cells": {"css": "td::text", "many": True},
        "everything": {"css": "*::text", "many": True},
        "case_div": ".case",
        "links": {"css": "a::attr(href)", "many": True},
    }
    indexed_pages = 0
    for key, page in sorted(pages.items()):
        if "html" not in page.content_type:
            continue
        body = page.body.decode("utf-8") if isinstance(page.body, bytes) else page.body
        sel = Selector(text=body)
        rows = [sel, *(Selector(root=r) for r in sel.root.iter("tr", "li", "div"))]
        for scope_sel in rows:
            slow = _extract(fields, Scope(url=key, selector=scope_sel), indexed=False)
            scope = Scope(url=key, selector=scope_sel)
            fast = _extract(fields, scope, indexed=True)
            assert scope._index is not None
            assert fast == slow, key
        indexed_pages += 1
    assert indexed_pages > 100


def test_the_bench_job_takes_the_index(tmp_path: Path) -> None:
    """The detail kind of bench/specs/bench.yaml (the benchmarks' job) is answered from
    the index: seven of its nine selectors are simple ones; `ul.judges li` is not."""
    root = REPO
    text = (root / "bench" / "specs" / "bench.yaml").read_text().replace("{base}", "http://h")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    job = CompiledJob(load_spec(path))
    sources = [s for cf in job.kinds["detail"].fields._fields for s in cf.sources]
    assert sum(1 for s in sources if getattr(s, "indexes", False)) >= 7
    judges = [s for s in sources if "judges" in s.label]
    assert len(judges) == 1
    assert judges[0].simple is None  # a descendant step: XPath


def test_an_xml_page_keeps_its_xpath() -> None:
    """XPath's text() tells a CDATA section from the text around it; lxml's ``.text``
    joins them: XML records are never indexed."""
    xml = "<r><i class='a'>x<![CDATA[y]]>z</i><i class='a' id='k'>w</i></r>"
    fields = {"one": {"css": ".a::text", "many": True}, "two": "#k::text", "three": "i::text"}
    scope = Scope(url="http://h/", selector=Selector(text=xml, type="xml"))
    got = _extract(fields, scope, indexed=True)
    assert scope._index is None
    slow = _extract(
        fields, Scope(url="http://h/", selector=Selector(text=xml, type="xml")), indexed=False
    )
    assert got == slow
    assert got.values["two"] == "w"
