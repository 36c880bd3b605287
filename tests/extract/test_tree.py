"""The HTML tree built with one parser per thread (framework/extract/tree.py) is the tree
Scrapy's ``response.selector`` builds with a new parser per page: same serialisation,
same element classes (forms keep lxml's FormElement), same document URL, whatever came
before it on the same parser."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from lxml import etree, html
from scrapy.http import HtmlResponse
from scrapy.selector import Selector

from framework.demo.data import generate
from framework.demo.pages import render
from framework.extract.tree import html_root, html_selector
from tests.extract.test_simplecss import _tree

ODD = [
    "",
    "   \n\t ",
    "<!-- only a comment -->",
    "\x00",
    "<p>a\x00b</p>\x00",
    "\ufeff<p>bom</p>",
    "plain text, no tag",
    "<P CLASS=X>upper<FORM ACTION=/s><INPUT NAME=q><Select><option>1</select></FORM>",
    "<label for=q>L</label><textarea>t</textarea>",
    "<html><head><base href='/b/'></head><body><form action='go'></form></body></html>",
    "<?xml version='1.0'?><root><a/></root>",
    "<div>" * 400 + "deep" + "</div>" * 400,  # deeper than libxml2's default limit
    "<p>&nbsp;&amp;&unknown;&#x1F600;</p><![CDATA[x]]><?pi y?>",
    "<svg:rect xmlns:svg='http://www.w3.org/2000/svg'/><math><mi>x</mi></math>",
    "<table><tr><td>1<td>2</table><p>unclosed <b>bold <i>both</p>",
    "caf\u00e9 \u65e5\u672c \U0001f600",
]


def _scrapy(text: str, url: str = "http://site.test/p") -> Any:
    response = HtmlResponse(url=url, body=text.encode("utf-8"), encoding="utf-8")
    return Selector(response).root


def _ours(text: str, url: str = "http://site.test/p") -> Any:
    response = HtmlResponse(url=url, body=text.encode("utf-8"), encoding="utf-8")
    return html_selector(response).root


def _same(a: Any, b: Any) -> None:
    assert etree.tostring(a) == etree.tostring(b)
    assert [type(e) for e in a.iter()] == [type(e) for e in b.iter()]
    assert a.getroottree().docinfo.URL == b.getroottree().docinfo.URL


@pytest.mark.parametrize("text", ODD)
def test_odd_documents_give_scrapys_tree(text: str) -> None:
    _same(_ours(text), _scrapy(text))


def test_generated_trees_and_demo_pages_give_scrapys_tree_on_one_parser() -> None:
    rng = random.Random(7)
    docs = [f"<html><body>{_tree(rng)}</body></html>" for _ in range(200)]
    pages = render(generate(40, 7, True), "http://127.0.0.1:1").values()
    docs += [
        p.body.decode("utf-8") if isinstance(p.body, bytes) else p.body
        for p in pages
        if "html" in p.content_type
    ]
    docs += ODD
    rng.shuffle(docs)  # each parse follows another document on the same parser
    for text in docs:
        _same(_ours(text), _scrapy(text))


def test_forms_keep_their_classes_and_document_url() -> None:
    page = "<html><head><base href='/b/'></head><body><FORM action='go'><input name=q>"
    root = _ours(page, "http://site.test/dir/page")
    (form,) = root.xpath("//form")
    assert isinstance(form, html.FormElement)
    assert isinstance(form.inputs["q"], html.InputElement)
    assert form.base_url == "http://site.test/b/"  # Scrapy's get_base_url: <base> read
    response = HtmlResponse(url="http://site.test/dir/page", body=page.encode(), encoding="utf-8")
    plain = html_selector(response, base_url=False)
    assert plain.root.getroottree().docinfo.URL is None
    assert plain.response is response
    assert response.selector is plain  # built once per response, then Scrapy's cache


def test_the_html_lookup_is_lxmls() -> None:
    """The classes are lxml.html's own (its lookup's table, looked up in C)."""
    from framework.extract.tree import HTML_CLASSES

    assert html.HtmlElementClassLookup()._element_classes == HTML_CLASSES
    page = "<form><input><select></select><textarea></textarea><label></label><!--c-->"
    root = html_root(page)
    found = {e.tag if isinstance(e.tag, str) else e.tag.__name__: type(e) for e in root.iter()}
    for tag, cls in HTML_CLASSES.items():
        assert found[tag] is cls
    assert found["body"] is html.HtmlElement
    assert found["Comment"] is html.HtmlComment


def test_a_parser_per_thread() -> None:
    from framework.extract import tree

    parsers: dict[int, list[Any]] = {}

    def grab(n: int) -> None:
        parsers[n] = [tree._parser(), tree._parser()]

    threads = [threading.Thread(target=grab, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert parsers[0][0] is parsers[0][1]  # kept within a thread
    assert parsers[1][0] is parsers[1][1]
    assert parsers[0][0] is not parsers[1][0]  # never shared between threads


def test_a_lone_surrogate_fails_as_with_scrapy() -> None:
    with pytest.raises(UnicodeEncodeError):
        Selector(text="<p>\ud800</p>", type="html")
    with pytest.raises(UnicodeEncodeError):
        html_root("<p>\ud800</p>")
