"""Shortcuts on the extraction's hot path give exactly what the long way gives.

* A date format of ``%d``, ``%m`` and ``%Y`` is matched with strptime's own patterns
  instead of calling strptime: every string and format below gives the same date, or
  the same refusal, as ``datetime.strptime``.
* The reparse builds an HTML page's tree without its document URL when the spec has no
  forms (only forms read it): the parse of the same stored page is the same as with
  Scrapy's ``response.selector``, and a spec with forms still resolves a form's action
  against the page's ``<base>``.
"""

from __future__ import annotations

import itertools
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from scrapy.selector import Selector

from framework.crawl.page import CompiledJob, PageResult
from framework.crawl.reparse import parse, rebuild
from framework.extract.convert import ConversionError, ConvertContext, _strptime_any, to_date
from framework.spec import load_spec
from framework.workspace.records import Row, RowStatus, StoredResponse

FORMATS = ["%d.%m.%Y", "%d/%m/%Y", "%Y/%m/%d", "%Y-%m-%d", "%m/%d/%Y", "%Y%m%d", "%d.%d.%Y"]


def _dates() -> list[str]:
    out = ["", "1", "2022", "31.02.2022", "29.02.2024", "29.02.2023", "00.01.2022", "1.1.0000"]
    out += ["9.8.2022", " 9.8.2022", "09.08.22", "09.08.20222", "09-08-2022", "\u0663.1.2022"]
    out += ["2022/8/9", "20220809", "2022-08-09", "2022-W05-3", "12/31/2022", "31/12/2022"]
    for d, m, sep in itertools.product(("0", "1", "9", "10", "29", "31", "32"), ("1", "12"), "./-"):
        out += [f"{d}{sep}{m}{sep}2022", f"2022{sep}{m}{sep}{d}", f"{m}{sep}{d}{sep}2022"]
    return out


def _outcome(read: Any, text: str, fmt: str) -> datetime | str | None:
    try:
        return read(text, fmt)
    except ValueError:
        return None
    except Exception as exc:  # a bad format: whatever strptime raises, the same
        return type(exc).__name__


def test_a_numeric_date_format_reads_what_strptime_reads() -> None:
    read = 0
    for fmt, text in itertools.product(FORMATS, _dates()):
        expected = _outcome(datetime.strptime, text, fmt)
        assert _outcome(lambda t, f: _strptime_any(t, (f,)), text, fmt) == expected, (text, fmt)
        read += isinstance(expected, datetime)
    assert read > 50  # most of them are dates: the shortcut was taken, not only refused
    ctx = ConvertContext(date_format="%d.%m.%Y", absolute=False)
    assert to_date(" 9.8.2022 ", ctx) == "2022-08-09"
    with pytest.raises(ConversionError):
        to_date("31.02.2022", ctx)


SPEC = """\
name: fast
source_type: fast
start_urls: ["http://site.test/list"]
pages:
  list:
{forms}    follow: [{{css: "a.item::attr(href)", to: item}}]
  item:
    id: {{css: "h1::text"}}
    fields:
      title: ".title::text"
"""
FORMS = """\
    forms:
      css: "form#f"
      to: item
      fields:
        q: hello
"""
PAGE = b"""<html><head><base href="http://site.test/base/"></head><body>
<form id="f" action="search" method="get"><input name="q" value=""></form>
<a class="item" href="one">one</a><h1>x</h1><p class="title"> T </p></body></html>"""


def _job(tmp_path: Path, forms: bool) -> CompiledJob:
    path = tmp_path / "fast.yaml"
    path.write_text(SPEC.format(forms=FORMS if forms else ""), encoding="utf-8")
    return CompiledJob(load_spec(path))


def _page(kind: str) -> tuple[Row, StoredResponse]:
    url = "http://site.test/list"
    row = Row(
        id=1,
        kind=kind,
        url=url,
        method="GET",
        body=None,
        body_type=None,
        parent_id=None,
        status=RowStatus.OK,
        attempts=1,
        retryable=True,
        last_error_kind=None,
        last_error=None,
        last_http_status=200,
        context={},
        created_at="",
        updated_at="",
    )
    packed = zlib.compress(PAGE)
    return row, StoredResponse(1, url, url, 200, "text/html; charset=utf-8", packed, len(packed))


def _scrapy_way(job: CompiledJob, row: Row, stored: StoredResponse) -> Any:
    response = rebuild(stored)
    # Scrapy's own tree (a new parser, the document URL found as Scrapy finds it)
    response._cached_selector = Selector(response)
    return job.kinds[row.kind].parse(response, {}, 1)


@pytest.mark.parametrize("forms", [False, True])
def test_the_reparse_parse_is_the_scrapy_selector_parse(tmp_path: Path, forms: bool) -> None:
    job = _job(tmp_path, forms)
    for kind in ("list", "item"):
        row, stored = _page(kind)
        assert repr(parse(job, row, stored)) == repr(_scrapy_way(job, row, stored))
    if forms:
        row, stored = _page("list")
        result = parse(job, row, stored)
        assert isinstance(result, PageResult)
        # the action is resolved against the page's <base>: the document URL was kept
        assert [s.url for s in result.forms] == ["http://site.test/base/search?q=hello"]


@pytest.mark.parametrize("forms", [False, True])
def test_the_crawl_parse_is_the_scrapy_selector_parse(tmp_path: Path, forms: bool) -> None:
    """The crawl's own path (a fresh response, the kind builds the tree): the same as
    with Scrapy's selector, and a kind with forms keeps the document URL for them."""
    from scrapy.http import HtmlResponse

    job = _job(tmp_path, forms)
    for kind in ("list", "item"):
        row, stored = _page(kind)
        fresh = HtmlResponse(url=stored.final_url, body=stored.body, encoding="utf-8")
        result = job.kinds[kind].parse(fresh, {}, 1)
        assert repr(result) == repr(_scrapy_way(job, row, stored))
        with_base = fresh.selector.root.getroottree().docinfo.URL is not None
        assert with_base is (forms and kind == "list")  # only a kind with forms looks it up
    if forms:
        fresh = HtmlResponse(url="http://site.test/list", body=PAGE, encoding="utf-8")
        found = job.kinds["list"].parse(fresh, {}, 1)
        assert [s.url for s in found.forms] == ["http://site.test/base/search?q=hello"]
