"""Forms and chains (``forms:``): an ASP.NET-style two-step postback crawled from YAML.

The real CLI against the fixture site of :mod:`tests.fixtures.aspnet_site`, whose
server checks its view state's MAC and event validation: a request that does not carry
the page's own hidden fields is refused, so the known truth is only reached by
submitting each page's own form, every author, then every tag of that author.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote_plus

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.aspnet_site import AUTHORS, AspNetSite, author_tags, truth
from tests.fixtures.crawl import CLI, events, run_cli, url_log, workspace_items

EXIT_OK = 0
EXIT_SPEC = 2
SECRET = "s3cret form value!"

CHAIN = """\
name: quotes_search
source_type: quotes
start_urls: ["{url}{start}"]
{extra}
pages:
  search:
    forms:
      css: "form#aspnetForm"
      to: tags
      dont_click: true              # the author's onchange posts back without a button
      fields:
        author: {{options: true, carry: author}}
        __EVENTTARGET: author
  tags:
    forms:
      css: "form#aspnetForm"
      to: results
      click: {{name: submit_button}}   # the first submit button clears the search
      fields:
        tag: {{options: true, carry: tag}}
  results:
    each: "div.quote"
    id: {{xpath: "@data-id"}}
    fields:
      text: "span.text::text"
"""


def write_spec(
    tmp_path: Path, site: AspNetSite, start: str = "/search.aspx", extra: str = ""
) -> Path:
    path = tmp_path / "quotes_search.yaml"
    path.write_text(CHAIN.format(url=site.url, start=start, extra=extra), encoding="utf-8")
    return path


def crawl(spec: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING", *extra)


def records(ws: Path) -> dict[str, dict[str, Any]]:
    """The stored items as the truth writes them (id, text, author, tag)."""
    return {
        item["source_id"]: {k: item[k] for k in ("text", "author", "tag")}
        | {"id": item["source_id"]}
        for item in workspace_items(ws).values()
    }


def rows(ws: Path) -> list[Any]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return list(w.store.iter_rows())


def pairs() -> int:
    return sum(len(author_tags(i)) for i in range(len(AUTHORS)))


@pytest.mark.process
def test_the_two_step_postback_reaches_every_author_and_tag(make_aspnet_site, tmp_path):
    site = make_aspnet_site()
    spec = write_spec(tmp_path, site)
    ws = tmp_path / "ws"
    r = crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]

    assert records(ws) == truth()  # record by record
    assert site.rejected == []  # every post carried its page's own view state
    assert site.hits[("POST", "/filter.aspx")] == len(AUTHORS) + pairs()
    # each submission is a row of its own: POST, the form's fields as the body
    posted = [row for row in rows(ws) if row.method == "POST"]
    assert len(posted) == len(AUTHORS) + pairs()
    for row in posted:
        fields = dict(parse_qsl(row.body))
        assert row.body_type == "form"
        assert row.url == f"{site.url}/filter.aspx"
        assert {"__VIEWSTATE", "__EVENTVALIDATION", "author"} <= set(fields)
        if row.kind == "tags":
            assert fields["__EVENTTARGET"] == "author"
            assert "submit_button" not in fields
        else:
            assert fields["submit_button"] == "Search"
            assert "clear_button" not in fields
    # the empty placeholder option is never submitted
    assert all(dict(parse_qsl(r.body, keep_blank_values=True))["author"] for r in posted)


@pytest.mark.process
def test_a_second_run_on_the_same_workspace_posts_nothing_again(make_aspnet_site, tmp_path):
    site = make_aspnet_site()
    spec = write_spec(tmp_path, site)
    ws = tmp_path / "ws"
    assert crawl(spec, ws).returncode == EXIT_OK
    before = site.hits[("POST", "/filter.aspx")]
    again = crawl(spec, ws)
    assert again.returncode == EXIT_OK, again.stderr[-2000:]
    assert site.hits[("POST", "/filter.aspx")] == before
    assert records(ws) == truth()


def _kill_loop(spec: Path, ws: Path, rng: random.Random, kills: int) -> int:
    landed = 0
    for _ in range(kills * 3):
        if landed >= kills:
            break
        log = ws / "urls.jsonl"
        before = log.read_bytes().count(b"\n") if log.exists() else 0
        proc = procs.popen(
            [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if log.exists() and log.read_bytes().count(b"\n") > before:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.05, 0.35))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.wait(timeout=60)
    return landed


@pytest.mark.kill
@pytest.mark.slow
def test_kill_9_mid_chain_and_resume_gives_the_same_truth(make_aspnet_site, tmp_path):
    # each answer takes 0.4 s: a kill 0.05-0.35 s after a run's first answer lands while
    # that level of the chain is in flight
    site = make_aspnet_site(delay=0.4)
    spec = write_spec(tmp_path, site)
    ws = tmp_path / "ws"
    landed = _kill_loop(spec, ws, random.Random(20261130), kills=2)
    assert landed == 2
    final = crawl(spec, ws)
    assert final.returncode == EXIT_OK, final.stderr[-3000:]

    assert records(ws) == truth()
    assert site.rejected == []  # stored rows posted after a restart still validate
    assert not [r for r in rows(ws) if r.status is not RowStatus.OK]
    ok_rows: set[int] = set()
    for line in url_log(ws):  # no row that was ok is ever posted again
        assert line["row"] not in ok_rows, line
        if line["outcome"] == "ok":
            ok_rows.add(line["row"])
    kinds = [e["event"] for e in events(ws)]
    assert kinds.count("run_resumed") >= 2


@pytest.mark.process
def test_a_form_whose_action_is_off_site_is_refused_and_counted(make_aspnet_site, tmp_path):
    site = make_aspnet_site()
    spec = write_spec(tmp_path, site, start="/offsite.aspx", extra="expect_empty: true")
    ws = tmp_path / "ws"
    r = crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-2000:]
    assert site.hits[("POST", "/filter.aspx")] == 0  # localhost is the same server, not allowed
    assert not [row for row in rows(ws) if row.method == "POST"]
    log = events(ws)
    refused = [e for e in log if e["event"] == "link_refused"]
    assert refused
    assert refused[0]["why"] == "offsite"
    assert "localhost" in refused[0]["target"]
    counts = [e["counts"] for e in log if e["event"] == "links_refused"]
    assert counts == [{"offsite": 1}]  # one form, refused once (not once per author)


@pytest.mark.process
def test_a_fan_out_over_the_limit_is_an_error_and_sends_nothing(make_aspnet_site, tmp_path):
    site = make_aspnet_site(big_options=2500)
    spec = tmp_path / "big.yaml"
    spec.write_text(
        f"""\
name: big_select
source_type: big
start_urls: ["{site.url}/big.aspx"]
pages:
  start:
    forms:
      css: "form#big"
      to: item
      fields:
        item: {{options: true}}
  item:
    id: {{css: "h1::text"}}
""",
        encoding="utf-8",
    )
    ws = tmp_path / "ws"
    r = crawl(spec, ws)
    assert r.returncode != EXIT_OK
    assert site.hits[("POST", "/filter.aspx")] == 0
    (row,) = rows(ws)
    assert row.status is RowStatus.ERROR
    assert row.last_error_kind == "parse"
    assert "would make 2500 requests (item: 2500)" in (row.last_error or "")
    assert "over its max_requests (1000)" in (row.last_error or "")
    failed = [e for e in events(ws) if e["event"] == "row_failed"]
    assert len(failed) == 1
    assert "max_requests" in failed[0]["error"]

    # raised on purpose, the same page fans out in full
    spec.write_text(
        spec.read_text(encoding="utf-8").replace(
            "        item: {options: true}",
            "        item: {options: true}\n      max_requests: 3000",
        ),
        encoding="utf-8",
    )
    r = crawl(spec, tmp_path / "ws2", "--max-requests", "5")
    assert len([x for x in rows(tmp_path / "ws2") if x.method == "POST"]) == 2500


@pytest.mark.process
def test_a_credential_in_a_form_is_sent_and_never_stored(make_aspnet_site, tmp_path, monkeypatch):
    monkeypatch.setenv("FW_FORM_SECRET", SECRET)
    # the page carries a hidden input naming the same variable: it is sent as text
    site = make_aspnet_site(trap="{env:FW_FORM_SECRET}")
    spec = tmp_path / "quotes_search.yaml"
    text = CHAIN.format(url=site.url, start="/search.aspx", extra="").replace(
        "        __EVENTTARGET: author\n",
        "        __EVENTTARGET: author\n"
        '        passcode: "{env:FW_FORM_SECRET}"\n'
        "      method: POST\n",
    )
    spec.write_text(text, encoding="utf-8")
    ws = tmp_path / "ws"
    r = crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert records(ws) == truth()

    first = [dict(parse_qsl(b.decode())) for b in site.posted[: len(AUTHORS)]]
    assert all(f["passcode"] == SECRET for f in first)  # resolved where the spec put it
    assert all(f["trap"] == "{env:FW_FORM_SECRET}" for f in first)  # the page's: text
    encoded = quote_plus(SECRET).encode()
    for path in ws.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data, path.name
            assert encoded not in data, path.name
    assert SECRET not in r.stdout + r.stderr


@pytest.mark.process
def test_validate_locates_a_bad_form_selector_and_an_unknown_kind(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        """\
name: bad_forms
source_type: bad
start_urls: ["http://example.org/search.aspx"]
pages:
  search:
    forms:
      - css: "form[["
        to: results
        fields:
          author: {options: true}
      - index: 1
        to: nowhere
        fields:
          q: "{no_such_field}"
          password: hunter2
  results:
    each: "div.quote"
    id: {css: "::attr(data-id)"}
""",
        encoding="utf-8",
    )
    r = run_cli("validate", str(spec))
    assert r.returncode == EXIT_SPEC, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert f"{spec}:7:14: invalid CSS selector 'form[['" in out, out
    assert f"{spec}:12:13: `to: nowhere` names no page kind" in out, out
    assert f"{spec}:14:14: form field template '{{no_such_field}}' names unknown field" in out, out
    assert f"{spec}:15:21: a literal credential in form field 'password'" in out, out
    assert "Traceback" not in out


@pytest.mark.process
def test_preview_lists_the_form_requests_a_page_would_make(make_aspnet_site, tmp_path):
    site = make_aspnet_site()
    spec = write_spec(tmp_path, site)
    r = run_cli("preview", str(spec), "--kind", "search", "--json")
    assert r.returncode == EXIT_OK, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert [f["carry"] for f in report["forms"]] == [{"author": a} for a in AUTHORS]
    assert {(f["kind"], f["method"], f["url"]) for f in report["forms"]} == {
        ("tags", "POST", f"{site.url}/filter.aspx")
    }
    assert site.hits[("POST", "/filter.aspx")] == 0  # shown, not sent
    text = run_cli("preview", str(spec), "--kind", "search")
    assert "form requests (8):" in text.stdout
    assert "author=Albert+Einstein&__EVENTTARGET=author" in text.stdout


@pytest.mark.process
def test_the_search_form_template_crawls_the_fixture_to_the_truth(make_aspnet_site, tmp_path):
    site = make_aspnet_site()
    env = {**os.environ, "FRAMEWORK_HOME": str(tmp_path)}
    procs.run(
        [*CLI, "new", "qs", "--template", "search-form", "--start-url", f"{site.url}/search.aspx"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    spec = tmp_path / "projects" / "qs" / "job.yaml"
    spec.write_text(spec.read_text().replace("DOWNLOAD_DELAY: 0.5", "DOWNLOAD_DELAY: 0"))
    r = crawl(spec, tmp_path / "ws")
    assert r.returncode == EXIT_OK, r.stderr[-2000:]
    items = workspace_items(tmp_path / "ws")
    got = {i["source_id"]: (i["text"], i["said_by"], i["author"], i["tag"]) for i in items.values()}
    assert got == {k: (q["text"], q["author"], q["author"], q["tag"]) for k, q in truth().items()}


# ------------------------------------------------------------------ Scrapy parity
PARITY_PAGE = b"""<html><head><base href="http://site.test/app/"></head><body>
<form id="other" action="/other"><input name="x" value="1"></form>
<form id="main" action=" search?old=1 " method="post">
  <input type="hidden" name="__VIEWSTATE" value="dDwtMTA+Oz4=">
  <input name="q" value="prefilled">
  <input type="checkbox" name="exact" value="yes" checked>
  <input type="checkbox" name="unchecked" value="no">
  <input type="radio" name="scope" value="all">
  <input type="radio" name="scope" value="titles" checked>
  <textarea name="note">some text</textarea>
  <select name="lang"><option value="en">English</option>
    <option value="fr">Fran\xc3\xa7ais</option></select>
  <select name="pick" multiple><option value="a" selected>A</option>
    <option value="b" selected>B</option></select>
  <input type="reset" name="reset" value="Reset">
  <input type="image" name="img" value="i">
  <button name="go" value="Go">Go</button>
  <input type="submit" name="submit_button" value="Search">
</form></body></html>"""


@pytest.mark.parametrize(
    ("ours", "scrapy"),
    [
        ({"css": "#main"}, {"formcss": "#main"}),
        ({"css": "#main textarea"}, {"formcss": "#main textarea"}),
        ({"index": 0}, {"formnumber": 0}),
        (
            {"xpath": "//form[2]", "dont_click": True},
            {"formxpath": "//form[2]", "dont_click": True},
        ),
        (
            {
                "css": "#main",
                "click": {"name": "submit_button"},
                "fields": {"q": "new", "lang": "fr"},
            },
            {
                "formcss": "#main",
                "clickdata": {"name": "submit_button"},
                "formdata": {"q": "new", "lang": "fr"},
            },
        ),
        ({"css": "#main", "click": {"nr": 1}}, {"formcss": "#main", "clickdata": {"nr": 1}}),
        (
            {"css": "#main", "method": "GET", "fields": {"extra": "é & ü"}},
            {"formcss": "#main", "method": "GET", "formdata": {"extra": "é & ü"}},
        ),
    ],
)
def test_a_form_request_is_the_one_scrapy_from_response_makes(ours, scrapy):
    from scrapy.exceptions import ScrapyDeprecationWarning
    from scrapy.http import FormRequest, HtmlResponse

    from framework.crawl.forms import CompiledForm
    from framework.spec.models import FormSpec

    response = HtmlResponse("http://site.test/app/page", body=PARITY_PAGE, encoding="utf-8")
    (sub,) = CompiledForm("page", 0, FormSpec.model_validate({**ours, "to": "next"})).submissions(
        response.selector, response.encoding, {}, {}, lambda url: True
    )
    # deprecated in 2.19 in favour of form2request, still the behaviour users know
    with pytest.warns(ScrapyDeprecationWarning, match="from_response"):
        expected = FormRequest.from_response(response, **scrapy)
    assert (sub.method, sub.url) == (expected.method, expected.url)
    assert (sub.body or "").encode() == expected.body


def test_fan_out_makes_one_request_per_combination_once_each():
    from scrapy.http import HtmlResponse

    from framework.crawl.forms import CompiledForm
    from framework.spec.models import FormSpec

    page = b"""<form action="/f" method="post"><select name="a">
      <option value="">choose</option><option>x</option><option value="y">Why</option>
      <option value="y">again</option><option value="z" disabled>no</option>
      <option value="----">----</option></select></form>"""
    response = HtmlResponse("http://site.test/", body=page, encoding="utf-8")
    spec = FormSpec.model_validate(
        {
            "to": "next",
            "fields": {
                "a": {"options": True, "exclude": ["----"], "carry": "a", "carry_label": "label"},
                "b": {"values": ["1", "{n}"], "carry": "b"},
            },
        }
    )
    subs = CompiledForm("page", 0, spec).submissions(
        response.selector, "utf-8", {"n": "2"}, {"kept": 1}, lambda url: True
    )
    assert [s.body for s in subs] == ["a=x&b=1", "a=x&b=2", "a=y&b=1", "a=y&b=2"]
    assert subs[2].carry == {"kept": 1, "a": "y", "label": "Why", "b": "1"}


@pytest.mark.process
def test_validate_reports_a_bad_form_selector_beside_a_shape_error(tmp_path):
    spec = tmp_path / "raw.yaml"
    spec.write_text(
        """\
name: bad_forms
source_type: bad
start_urls: ["http://example.org/search.aspx"]
pages:
  search:
    forms:
      css: "form[["
      to: results
      frobnicate: 1
  results:
    each: "div.quote"
    id: {css: "h1::text"}
""",
        encoding="utf-8",
    )
    r = run_cli("validate", str(spec))
    assert r.returncode == EXIT_SPEC
    assert f"{spec}:7:12: invalid CSS selector 'form[['" in r.stderr + r.stdout
    assert f"{spec}:9:7: unknown key 'frobnicate'" in r.stderr + r.stdout


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"css": "form#missing"}, "the page has no form (css 'form#missing')"),
        ({"index": 3}, "the page has no form (form number 3)"),
        ({"fields": {"nope": {"options": True}}}, "the form has no <select name='nope'>"),
        ({"click": {"name": "absent"}}, "no element matches `click: {'name': 'absent'}`"),
        ({"css": "#main", "click": {"type": "checkbox"}}, "several elements match"),
        ({"fields": {"q": "{missing}"}}, "field 'q': template '{missing}' needs a value"),
    ],
)
def test_a_form_that_cannot_be_submitted_as_written_is_a_page_error(spec, problem):
    from scrapy.http import HtmlResponse

    from framework.crawl.forms import CompiledForm, FormError
    from framework.spec.models import FormSpec

    response = HtmlResponse("http://site.test/app/page", body=PARITY_PAGE, encoding="utf-8")
    form = CompiledForm("page", 0, FormSpec.model_validate({**spec, "to": "next"}))
    with pytest.raises(FormError, match=r"page\.forms\[0\]") as err:
        form.submissions(response.selector, "utf-8", {}, {}, lambda url: True)
    assert problem in str(err.value)
    optional = CompiledForm(
        "page", 0, FormSpec.model_validate({"css": "nav", "to": "next", "required": False})
    )
    assert optional.submissions(response.selector, "utf-8", {}, {}, lambda url: True) == []
    refused: list[str] = []
    main = CompiledForm("page", 0, FormSpec.model_validate({"css": "#main", "to": "next"}))
    assert (
        main.submissions(response.selector, "utf-8", {}, {}, lambda u: refused.append(u) and False)
        == []
    )
    assert refused == ["http://site.test/app/search?old=1"]
