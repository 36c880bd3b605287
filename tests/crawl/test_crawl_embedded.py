"""Records anywhere, from a YAML spec only: quotes in a JavaScript literal (not JSON),
in a JSON script, in JSON-LD and in microdata, crawled to the known truth record by
record at the default concurrency (and after kill -9 and a resume); a definition list
and a two-column table as one mapping each; helper fields used in a sub-tab's body
but neither stored nor hashed (a view state that changes on every crawl ships
nothing again); `preview` of an embedded-JSON page; a malformed, a huge and a
pathologically nested script as error rows with a note that says which; `validate`
locating bad expressions in the new keys.

The site is tests/fixtures/script_site.py (modelled on quotes.toscrape.com/js/)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, item_hashes, url_log, workspace_items
from tests.fixtures.script_site import (
    AUTHORS,
    PAGES,
    PER_PAGE,
    QUOTES,
    author_truth,
    quote,
    truth,
)

EXIT_OK, EXIT_USAGE, EXIT_HALTED = 0, 2, 4

JS_SPEC = """\
name: quotes-js
source_type: quotes
start_urls: ["{url}/js/"]
pages:
  quotes:
    each:
      embedded: {{var: data, path: "$[*]"}}
    id: {{json: $.id}}
    fields:
      text: {{json: $.text, required: true}}
      author: {{json: $.author.name}}
      author_url: {{json: $.author.goodreads_link, type: url}}
      tags: {{json: $.tags, many: true}}
    pagination: {{next: "li.next a::attr(href)"}}
"""

# the same quotes, other containers: (path prefix, each, id path, text, author, tags)
CONTAINERS = {
    "jsonld": ("ld", "{jsonld: Quote}", "$.identifier", "$.keywords"),
    "microdata": ("md", "{microdata: https://schema.org/Quote}", "$.identifier", "$.keywords"),
    "json-script": (
        "json",
        '{embedded: {script: "script#data", path: $.quotes}}',
        "$.id",
        "$.tags",
    ),
    "json-parse": ("state", "{embedded: {var: __STATE__, path: $.quotes}}", "$.id", "$.tags"),
}

OTHER_SPEC = """\
name: quotes-{name}
source_type: quotes
start_urls: ["{url}/{prefix}/"]
pages:
  quotes:
    each: {each}
    id: {{json: "{id}"}}
    fields:
      text: {{json: $.text, required: true}}
      author: {{json: $.author.name}}
      tags: {{json: "{tags}", many: true}}
    pagination: {{next: "li.next a::attr(href)"}}
"""

AUTHORS_SPEC = """\
name: authors
source_type: authors
start_urls: ["{url}/authors/"]
start: index
pages:
  index:
    each: "li"
    fields:
      listed_as: {{css: "a::text", helper: true}}  # carried to the author page
    follow: {{css: "a.author::attr(href)", to: author}}
  author:
    id: "h1::attr(data-slug)"
    fields:
      name: "h1::text"
      facts:
        pairs: {{each: "dl.facts > dt", key: "./text()", value: "./following-sibling::dd[1]"}}
      details:
        pairs: {{each: "table.details tr"}}
      viewstate:
        css: "input[name=__VIEWSTATE]::attr(value)"
        required: true
        helper: true
    subtabs:
      bio:
        url: "/author/{{id}}/bio?listed_as={{listed_as}}"
        method: POST
        body: {{form: {{__VIEWSTATE: "{{viewstate}}"}}}}
        format: json
        fields:
          bio: {{json: $.bio}}
"""


def _write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _crawl(crawl_cli: Any, spec: Path, ws: Path, *extra: str) -> Any:
    return crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING", *extra)


def _rows(ws: Path) -> list[Any]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return list(w.store.iter_rows())


def _only(values: dict[str, dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    keep = ("dedupe_key", "source_type", "source_id", *names)
    return {k: {f: v[f] for f in keep} for k, v in values.items()}


@pytest.mark.process
def test_quotes_in_a_javascript_literal_are_crawled_to_the_truth(script_site, tmp_path, crawl_cli):
    site = script_site()
    spec = _write(tmp_path, JS_SPEC.format(url=site.url))
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)  # the default concurrency
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    items = workspace_items(ws)
    expected = truth("quotes", site.url)
    assert len(expected) == QUOTES
    for key, record in expected.items():  # record by record: the first difference shows
        assert items.get(key) == record, key
    assert items == expected
    # one request per page: the records came from the pages' scripts
    assert sorted(line["url"] for line in url_log(ws)) == sorted(
        [f"{site.url}/js/"] + [f"{site.url}/js/page/{p}/" for p in range(2, PAGES + 1)]
    )


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(CONTAINERS))
def test_the_same_quotes_from_json_ld_microdata_and_a_json_script(
    name, script_site, tmp_path, crawl_cli
):
    site = script_site()
    text, expected = _spec_and_truth(name, site.url)
    spec = _write(tmp_path, text)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    items = workspace_items(ws)
    for key, record in expected.items():
        assert items.get(key) == record, key
    assert items == expected


@pytest.mark.process
def test_the_embedded_json_template_crawls_the_quotes_and_their_authors(
    script_site, tmp_path, crawl_cli
):
    site = script_site()
    (tmp_path / "projects").mkdir()
    r = crawl_cli(
        "new",
        "quotes",
        "--template",
        "embedded-json",
        "--start-url",
        f"{site.url}/js/",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_OK, r.stderr
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", "quotes", "--workspace", str(ws), "-L", "WARNING", cwd=tmp_path)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    expected = {**truth("quotes", site.url), **author_truth("quotes")}
    items = workspace_items(ws)
    for key, record in expected.items():
        assert items.get(key) == record, key
    assert items == expected


def _lines(ws: Path) -> int:
    try:
        return (ws / "urls.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _spec_and_truth(name: str, url: str) -> tuple[str, dict[str, Any]]:
    if name == "js":
        return JS_SPEC.format(url=url), truth("quotes", url)
    prefix, each, id_path, tags = CONTAINERS[name]
    text = OTHER_SPEC.format(name=name, url=url, prefix=prefix, each=each, id=id_path, tags=tags)
    return text, _only(truth("quotes", url), ("text", "author", "tags"))


@pytest.mark.kill
@pytest.mark.slow
@pytest.mark.parametrize("name", ["js", "jsonld"])
def test_a_killed_crawl_resumes_to_the_same_quotes(name, script_site, tmp_path, crawl_cli):
    site = script_site(delay=0.4)  # slow pages: a kill lands between them
    text, expected = _spec_and_truth(name, site.url)
    spec = _write(tmp_path, text)
    ws = tmp_path / "ws"
    rng = random.Random(20261130)
    landed = 0
    for _ in range(6):
        if landed >= 2:
            break
        before = _lines(ws)
        proc = procs.popen(
            [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while proc.poll() is None and _lines(ws) == before and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.communicate(timeout=60)
    assert landed >= 1  # a kill of a running crawl: it had not drained yet
    final = _crawl(crawl_cli, spec, ws)
    assert final.returncode == EXIT_OK, final.stderr[-3000:]
    items = workspace_items(ws)
    for key, record in expected.items():
        assert items.get(key) == record, key
    assert items == expected
    assert all(row.status is RowStatus.OK for row in _rows(ws))
    kinds = [e["event"] for e in events(ws)]
    assert kinds.count("run_resumed") >= 1


def _ship(crawl_cli: Any, spec: Path, ws: Path, endpoint: str) -> Any:
    r = crawl_cli("ship", "authors", "--workspace", str(ws), "--endpoint", endpoint)
    assert r.returncode == EXIT_OK, r.stdout[-2000:] + r.stderr[-2000:]
    return r


@pytest.mark.process
def test_pairs_become_one_mapping_and_helpers_are_neither_stored_nor_hashed(
    script_site, tmp_path, crawl_cli, ingest_server
):
    site = script_site()
    spec = _write(tmp_path, AUTHORS_SPEC.format(url=site.url))
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    items = workspace_items(ws)
    assert items == author_truth("authors")  # no `viewstate` in any item
    # the helper reached the sub-tab's body: every bio POST carried an issued view state
    assert site.bios_refused == 0
    # and a helper carried from the index page reached the sub-tab's URL template
    bios = sorted(unquote(line["url"]) for line in url_log(ws) if line["kind"] == "author.bio")
    assert bios == sorted(
        f"{site.url}/author/{slug.lower()}/bio?listed_as={name}" for name, slug, *_ in AUTHORS
    )
    assert len(site.viewstates) == len(AUTHORS)
    hashes = item_hashes(ws)
    assert all(complete for _, complete in hashes.values())
    _ship(crawl_cli, spec, ws, ingest_server.url)
    shipped = {row["dedupe_key"]: row for row in ingest_server.rows()}
    assert set(shipped) == set(items)
    assert all("viewstate" not in row["data"] for row in shipped.values())

    # the next crawl gets new view states (the site issues one per page view) ...
    first_states = set(site.viewstates)
    again = _crawl(crawl_cli, spec, ws, "--fresh")
    assert again.returncode == EXIT_OK, again.stderr[-3000:]
    assert len(site.viewstates - first_states) == len(AUTHORS)
    assert site.bios_refused == 0
    # ... and nothing changed: the same hashes, no change event, nothing shipped again
    assert item_hashes(ws) == hashes
    assert not [e for e in events(ws) if e["event"] == "items_changed"]
    _ship(crawl_cli, spec, ws, ingest_server.url)
    after = {row["dedupe_key"]: row for row in ingest_server.rows()}
    assert {k: (v["content_hash"], v["version"]) for k, v in after.items()} == {
        k: (v["content_hash"], v["version"]) for k, v in shipped.items()
    }
    assert ingest_server.history_count() == 0


@pytest.mark.process
def test_preview_shows_the_records_of_an_embedded_json_page(script_site, tmp_path, crawl_cli):
    site = script_site()
    spec = _write(tmp_path, JS_SPEC.format(url=site.url))
    r = crawl_cli("preview", str(spec), f"{site.url}/js/page/2/", "--json")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["error"] is None
    expected = truth("quotes", site.url)
    got = []
    for record in report["records"]:
        fields = {f["name"]: f for f in record["fields"]}
        assert fields["text"]["source"] == "json: $.text"
        got.append(
            (
                record["dedupe_key"],
                fields["text"]["value"],
                fields["tags"]["value"],
                record["stored"],
            )
        )
    page = range(PER_PAGE + 1, 2 * PER_PAGE + 1)
    assert got == [
        (f"quotes:{n}", expected[f"quotes:{n}"]["text"], quote(n)["tags"], True) for n in page
    ]
    assert report["next"] == [{"kind": "quotes", "url": f"{site.url}/js/page/3/"}]
    human = crawl_cli("preview", str(spec), f"{site.url}/js/page/2/")
    assert human.returncode == EXIT_OK, human.stderr[-3000:]
    assert quote(PER_PAGE + 1)["author"]["name"] in human.stdout


@pytest.mark.process
def test_a_malformed_a_huge_and_a_too_deep_script_are_error_rows_with_a_note(
    script_site, tmp_path, crawl_cli
):
    site = script_site()
    text = JS_SPEC.format(url=site.url).replace(
        f'start_urls: ["{site.url}/js/"]',
        f'start_urls: ["{site.url}/bad/", "{site.url}/huge/", "{site.url}/deep/", '
        f'"{site.url}/js/page/{PAGES}/"]',
    )
    spec = _write(tmp_path, text)
    ws = tmp_path / "ws"
    started = time.monotonic()
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]  # rows in error: a human looks
    assert time.monotonic() - started < 200  # not a hang (a generous bound, not a timing)
    rows = {row.url.removeprefix(site.url): row for row in _rows(ws)}
    notes = {}
    for path in ("/bad/", "/huge/", "/deep/"):
        row = rows[path]
        assert row.status is RowStatus.ERROR, path
        assert str(row.last_error_kind) == "parse", path
        notes[path] = row.last_error or ""
    assert "neither JSON nor a JavaScript literal" in notes["/bad/"]
    assert "FRAMEWORK_MAX_MATCH_CHARS" in notes["/huge/"]
    assert "nested too deeply" in notes["/deep/"]
    assert all(n.startswith("embedded data (var=data) in <script>") for n in notes.values())
    # the good page of the same crawl is stored all the same
    assert rows[f"/js/page/{PAGES}/"].status is RowStatus.OK
    assert len(workspace_items(ws)) == PER_PAGE


@pytest.mark.process
def test_microdata_nested_thousands_deep_is_an_error_row_not_a_hang(
    script_site, tmp_path, crawl_cli
):
    site = script_site()
    prefix, each, id_path, tags = CONTAINERS["microdata"]
    text = OTHER_SPEC.format(
        name="md", url=site.url, prefix=prefix, each=each, id=id_path, tags=tags
    ).replace(f'["{site.url}/md/"]', f'["{site.url}/mddeep/", "{site.url}/md/page/{PAGES}/"]')
    spec = _write(tmp_path, text)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    rows = {row.url.removeprefix(site.url): row for row in _rows(ws)}
    deep = rows["/mddeep/"]
    assert deep.status is RowStatus.ERROR
    assert str(deep.last_error_kind) == "parse"
    note = deep.last_error or ""
    assert note.startswith("microdata of the page: items nested"), note
    assert "too deep to read" in note
    assert rows[f"/md/page/{PAGES}/"].status is RowStatus.OK
    assert len(workspace_items(ws)) == PER_PAGE


BAD_SPEC = """\
name: bad
source_type: quotes
start_urls: ["http://127.0.0.1:1/js/"]
pages:
  quotes:
    each:
      embedded: {var: data, path: "$[?(@.x ==]"}
    id: {json: $.id}
    fields:
      text: {json: "$.text["}
      info: {pairs: {each: "$.rows[*]", key: "$.name[", value: $.value}}
      cells: {pairs: {each: "table tr", key: "th[", hue: td}}
      state: {embedded: {var: "1 bad", path: $.a}}
      token: {css: "input::attr(value)", helper: true}
"""


@pytest.mark.process
def test_validate_locates_bad_expressions_in_the_new_keys(tmp_path, crawl_cli):
    spec = _write(tmp_path, BAD_SPEC)
    r = crawl_cli("validate", str(spec))
    assert r.returncode == EXIT_USAGE, r.stdout + r.stderr
    out = r.stdout + r.stderr
    lines = BAD_SPEC.splitlines()

    def at(text: str, token: str) -> str:
        """``file:line:col:`` of ``token`` on the line holding ``text``."""
        n = next(i for i, line in enumerate(lines) if text in line)
        return f"job.yaml:{n + 1}:{lines[n].index(token) + 1}:"

    expected = [
        (at("embedded: {var: data", '"$[?'), "invalid JSON path"),
        (at("text: {json:", '"$.text['), "invalid JSON path"),  # a JSON record: json is fine
        (at("info: {pairs:", '"$.name['), "invalid JSON path"),
        (at("cells: {pairs:", '"table tr"'), "`pairs` on JSON records takes JSON paths"),
        (at("cells: {pairs:", "hue"), "unknown key 'hue' in `pairs`"),
        (at("state: {embedded:", '"1 bad"'), "is not a JavaScript name"),
        (at("token: {css:", '"input'), "a `css` selector on a `format: json` page"),
    ]
    for where, what in expected:
        assert any(where in line and what in line for line in out.splitlines()), (where, what, out)
    assert len(out.strip().splitlines()) == len(expected), out
    # the json sources of records read from a script are not "a json path on an HTML page"
    assert "on an HTML page" not in out


NESTED_SPEC = """\
name: quote-pages
source_type: pages
start_urls: ["{url}/ld/page/2/", "{url}/md/page/3/"]
pages:
  page:
    id: {{url: '/(\\w+/page/\\d+)/$'}}
    fields:
      title: "title::text"
      # a field from a script found by selector (the md page has none: null)
      site:
        embedded: {{script: 'script[type="application/ld+json"]', path: "$['@graph'][0].name"}}
      quotes:
        each: {{jsonld: Quote}}
        fields:
          text: {{json: $.text}}
          by: {{json: $.author.name}}
      items:
        each: {{microdata: Quote}}
        fields:
          text: {{json: $.text}}
          by: {{json: $.author.name}}
      n: {{url: '/page/(\\d+)/$', type: integer, helper: true}}
    subtabs:
      js:  # the same page's quotes from the JS version: rows from a script (path: $)
        url: "/js/page/{{n}}/"
        each: {{embedded: {{var: data}}}}
        fields:
          id: {{json: $.id, type: integer}}
          tags: {{json: $.tags, many: true}}
"""


@pytest.mark.process
def test_nested_groups_and_a_sub_tab_take_their_rows_from_data_in_the_page(
    script_site, tmp_path, crawl_cli
):
    site = script_site()
    spec = _write(tmp_path, NESTED_SPEC.format(url=site.url))
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]

    def numbers(page: int) -> range:
        return range(PER_PAGE * (page - 1) + 1, PER_PAGE * page + 1)

    def rows(page: int) -> list[dict[str, Any]]:
        return [{"text": quote(n)["text"], "by": quote(n)["author"]["name"]} for n in numbers(page)]

    def tab(page: int) -> list[dict[str, Any]]:
        return [{"id": n, "tags": quote(n)["tags"]} for n in numbers(page)]

    items = workspace_items(ws)
    assert items == {
        "pages:ld/page/2": {
            "dedupe_key": "pages:ld/page/2",
            "source_type": "pages",
            "source_id": "ld/page/2",
            "title": "Quotes",
            "site": "Quotes to Scrape",
            "quotes": rows(2),  # the JSON-LD page has no microdata
            "items": [],
            "js": tab(2),
        },
        "pages:md/page/3": {
            "dedupe_key": "pages:md/page/3",
            "source_type": "pages",
            "source_id": "md/page/3",
            "title": "Quotes",
            "site": None,
            "quotes": [],
            "items": rows(3),
            "js": tab(3),
        },
    }
