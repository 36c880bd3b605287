"""Discovery: a crawl that starts from robots.txt -> a sitemap index -> gzip sitemaps,
and follow rules by URL pattern with ``deny`` and ``max_depth``. Real crawls of the
fixture site (tests/fixtures/sitemap_site.py) through the real CLI, from YAML only,
compared with the site's truth record by record, also across kill -9 and resumes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, run_cli, url_log, workspace_items
from tests.fixtures.sitemap_site import DENIED, SitemapSite

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_CHECKPOINT = 3
EXIT_HALTED = 4

SITEMAP_SPEC = """\
name: books
source_type: books
start_urls: ["{base}/robots.txt"]
start: sitemaps
pages:
  sitemaps:
    format: sitemap
    follow:
      - pattern: "/book/\\\\d+"
        deny: ["/draft$", "/print$"]
        to: book
  book:
    id: ".id::text"
    fields:
      title: "h1::text"
      price: {{css: ".price::text", type: number}}
"""

HUB_SPEC = """\
name: hubs
source_type: articles
start_urls: ["{base}/hub/0"]
start: hub
pages:
  hub:
    follow:
      - {{pattern: "/hub/\\\\d+$", to: hub, max_depth: 2}}
      - pattern: "/article/"
        deny: "-draft$"
        to: article
  article:
    id: ".id::text"
    fields:
      title: "h1::text"
"""


def _spec(tmp_path: Path, text: str, site: SitemapSite, name: str = "job") -> Path:
    folder = tmp_path / "projects" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(text.format(base=site.url), encoding="utf-8")
    return path


def _crawl(spec: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING", *extra],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _rows(ws: Path) -> dict[str, dict[RowStatus, int]]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return w.store.row_counts()


def _finished(ws: Path) -> list[dict]:
    return [e for e in events(ws) if e["event"] == "run_finished"]


def _at(out: str, where: str, line: int) -> str:
    """The problems `validate` reported on one line of the spec."""
    return "\n".join(x for x in out.splitlines() if x.startswith(f"{where}:{line}:"))


def _fetched(ws: Path) -> list[str]:
    return [line["url"] for line in url_log(ws)]


@pytest.mark.process
def test_sitemap_index_of_two_gzip_sitemaps_is_crawled_to_the_truth(sitemap_site, tmp_path):
    site = sitemap_site()
    spec = _spec(tmp_path, SITEMAP_SPEC, site)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert workspace_items(ws) == site.truth_books()
    assert site.hits("/book/2/de") == 0  # an alternate, not asked for

    # robots.txt, the index and both sitemaps (.xml.gz and gzip-encoded) are rows
    rows = _rows(ws)
    assert rows["sitemaps"] == {RowStatus.OK: 4}, rows
    assert rows["book"] == {RowStatus.OK: 40}, rows
    # denied, unwanted and off-site URLs never became requests
    for path in (*DENIED, "/about"):
        assert site.hits(path) == 0, path
    fetched = _fetched(ws)
    assert not [u for u in fetched if "elsewhere" in u or "draft" in u or "print" in u]
    assert len(fetched) == len(set(fetched)) == 44  # each row once
    # the off-site sitemap of the index and the off-site book: refused and counted
    refused = [e for e in events(ws) if e["event"] == "links_refused"]
    assert refused, "no links_refused event"
    assert refused[-1]["counts"] == {"offsite": 2}, refused
    told = {e["url"] for e in events(ws) if e["event"] == "link_refused"}
    assert told == {"http://elsewhere.invalid/sitemap.xml"}  # said once per host


@pytest.mark.process
def test_a_resumed_sitemap_crawl_goes_on_instead_of_ending_at_once(sitemap_site, tmp_path):
    """The SitemapSpider pitfall: robots.txt and the sitemaps were already fetched, so a
    crawl that dedupes by "seen" URLs finds nothing new and ends. Here they are rows."""
    site = sitemap_site()
    spec = _spec(tmp_path, SITEMAP_SPEC, site)
    ws = tmp_path / "ws"
    first = _crawl(spec, ws, "--max-requests", "6")  # 4 discovery rows + 2 books
    assert first.returncode == EXIT_CHECKPOINT, first.stderr[-3000:]
    rows = _rows(ws)
    assert rows["sitemaps"] == {RowStatus.OK: 4}, rows
    assert rows["book"] == {RowStatus.OK: 2, RowStatus.PENDING: 38}, rows

    resumed = _crawl(spec, ws)
    assert resumed.returncode == EXIT_OK, resumed.stderr[-3000:]
    last = _finished(ws)[-1]
    assert last["reason"] == "finished"
    assert last["counts"]["requests"] == 38  # the rest, and only the rest
    assert workspace_items(ws) == site.truth_books()
    assert site.hits("/sitemap_index.xml") == 1  # discovery was not done again
    fetched = _fetched(ws)
    assert len(fetched) == len(set(fetched)) == 44

    again = _crawl(spec, ws)  # now it is done: that, and only that, ends at once
    assert again.returncode == EXIT_OK, again.stderr[-3000:]
    assert _finished(ws)[-1]["reason"] == "already_done"


@pytest.mark.kill
def test_kill_9_mid_sitemap_crawl_then_resume_gives_the_truth(sitemap_site, tmp_path):
    site = sitemap_site(delay=0.3)  # 40 books at the default concurrency: a few seconds
    spec = _spec(tmp_path, SITEMAP_SPEC, site)
    ws = tmp_path / "ws"
    proc = procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    books_done = 0
    while proc.poll() is None and time.monotonic() < deadline:
        log = ws / "urls.jsonl"
        lines = log.read_bytes().count(b"\n") if log.exists() else 0
        books_done = lines - 4
        if books_done >= 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the crawl ended before the kill: make the site slower"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    before = workspace_items(ws)
    assert 0 < len(before) < 40, len(before)

    resumed = _crawl(spec, ws)
    assert resumed.returncode == EXIT_OK, resumed.stderr[-3000:]
    assert _finished(ws)[-1]["counts"]["requests"] >= 40 - len(before)
    assert workspace_items(ws) == site.truth_books()
    assert _rows(ws)["book"] == {RowStatus.OK: 40}
    # a page whose row was ok before the kill is never fetched again
    ok_seen: set[str] = set()
    for line in url_log(ws):
        assert line["url"] not in ok_seen, line
        if line["outcome"] == "ok":
            ok_seen.add(line["url"])


@pytest.mark.process
def test_gzip_bombs_are_error_rows_not_memory(sitemap_site, tmp_path):
    site = sitemap_site(bombs=True)
    text = SITEMAP_SPEC + "settings:\n  DOWNLOAD_MAXSIZE: 4194304\n"
    spec = _spec(tmp_path, text, site)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    # the bombs are rows in error a human must look at; everything else was crawled
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert workspace_items(ws) == site.truth_books()
    with Workspace.open(ws, create=False, readonly=True) as w:
        failed = {
            row.url.rsplit("/", 1)[1]: row
            for row in w.store.iter_rows(kind="sitemaps")
            if row.status is RowStatus.ERROR
        }
    assert set(failed) == {"bomb.xml.gz", "bomb-encoded.xml"}, failed
    for row in failed.values():
        assert row.last_error_kind is not None
        assert row.last_error_kind.value == "parse"
        assert "DOWNLOAD_MAXSIZE" in (row.last_error or ""), row.last_error
        assert not row.retryable  # the same body will not shrink by asking again
    assert "gzip sitemap larger than DOWNLOAD_MAXSIZE" in failed["bomb.xml.gz"].last_error
    # a Content-Encoding bomb is said as the other size refusals are, not in Scrapy's words
    assert failed["bomb-encoded.xml"].last_error == (
        "response larger than DOWNLOAD_MAXSIZE (4194304 bytes) once decompressed "
        "(its Content-Encoding): page not read"
    )


@pytest.mark.process
@pytest.mark.parametrize(
    ("options", "expected", "unread"),
    [
        # only the nested sitemaps whose URL matches: books-2 (the even books)
        ("{follow: ['books-2']}", lambda n: n % 2 == 0, "/sitemaps/books-1.xml.gz"),
        # entries whose lastmod is before the day: the odd books (2023) are skipped
        ("{modified_since: 2024-01-01}", lambda n: n % 2 == 0, "/book/1"),
        ("{modified_since: 2023-06-01}", lambda n: True, "/about"),
    ],
    ids=["follow", "modified_since", "modified_since_same_day"],
)
def test_sitemap_options_choose_what_is_read(sitemap_site, tmp_path, options, expected, unread):
    site = sitemap_site()
    escaped = options.replace("{", "{{").replace("}", "}}")  # SITEMAP_SPEC is a format
    text = SITEMAP_SPEC.replace("format: sitemap\n", f"format: sitemap\n    sitemap: {escaped}\n")
    spec = _spec(tmp_path, text, site)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    truth = site.truth_books()
    assert workspace_items(ws) == {k: v for k, v in truth.items() if expected(int(v["source_id"]))}
    assert site.hits(unread) == 0


@pytest.mark.process
def test_alternate_urls_are_taken_only_when_asked(sitemap_site, tmp_path):
    site = sitemap_site()
    text = SITEMAP_SPEC.replace(
        "    format: sitemap\n", "    format: sitemap\n    sitemap: {{alternate: true}}\n"
    )
    spec = _spec(tmp_path, text, site)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    german = {
        "dedupe_key": "books:2-de",
        "source_type": "books",
        "source_id": "2-de",
        "title": "Book 2",
        "price": 2.5,
    }
    assert workspace_items(ws) == {**site.truth_books(), "books:2-de": german}


@pytest.mark.process
def test_follow_rules_deny_and_max_depth(sitemap_site, tmp_path):
    site = sitemap_site()
    spec = _spec(tmp_path, HUB_SPEC, site)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert workspace_items(ws) == site.truth_articles(max_hub=2)
    assert [site.hits(f"/hub/{d}") for d in range(4)] == [1, 1, 1, 0]
    assert not [u for u in _fetched(ws) if "draft" in u]
    with Workspace.open(ws, create=False, readonly=True) as w:
        depths = {r.url.split("/", 3)[3]: r.context.get("depth", 0) for r in w.store.iter_rows()}
    assert (depths["hub/0"], depths["hub/2"], depths["article/2-a"]) == (0, 2, 3)


@pytest.mark.process
def test_depth_survives_a_resume(sitemap_site, tmp_path):
    """hub/2 is left pending by the first run; if its depth were lost on resume, it
    would count as a start page and lead on to hub/3."""
    site = sitemap_site()
    spec = _spec(tmp_path, HUB_SPEC, site)
    ws = tmp_path / "ws"
    first = _crawl(spec, ws, "--max-requests", "2")  # hub/0, hub/1
    assert first.returncode == EXIT_CHECKPOINT, first.stderr[-3000:]
    assert site.hits("/hub/2") == 0
    resumed = _crawl(spec, ws)
    assert resumed.returncode == EXIT_OK, resumed.stderr[-3000:]
    assert workspace_items(ws) == site.truth_articles(max_hub=2)
    assert (site.hits("/hub/2"), site.hits("/hub/3")) == (1, 0)


@pytest.mark.process
def test_validate_reports_bad_discovery_keys_with_positions(tmp_path):
    spec = tmp_path / "projects" / "bad" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        """\
name: bad
source_type: bad
start_urls: ["http://example.org/robots.txt"]
start: sitemaps
pages:
  sitemaps:
    format: sitemap
    sitemap: {follow: ["(unclosed"]}
    follow:
      - pattern: "/book/"
        deny: ["[oops"]
        to: nowhere
      - {css: "a::attr(href)", to: book}
  book:
    id: ".id::text"
    follow: {pattern: "/x/", deny: "*bad", to: book, max_depth: 2}
""",
        encoding="utf-8",
    )
    r = procs.run(
        [*CLI, "validate", str(spec)], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == EXIT_USAGE, r.stdout + r.stderr
    out = r.stdout + r.stderr
    where = str(spec)
    assert "(unclosed" in _at(out, where, 8)  # sitemap.follow
    assert "[oops" in _at(out, where, 11)  # deny in a list
    assert "nowhere" in _at(out, where, 12)  # unknown kind
    assert "pattern:" in _at(out, where, 13)  # css on a sitemap kind
    assert "*bad" in _at(out, where, 16)  # deny as a string
    assert "Traceback" not in out


@pytest.mark.process
def test_validate_refuses_records_on_a_sitemap_kind(tmp_path):
    spec = tmp_path / "projects" / "bad2" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        """\
name: bad2
source_type: bad
start_urls: ["http://example.org/sitemap.xml"]
start: sitemaps
render: playwright
pages:
  sitemaps:
    format: sitemap
    each: "url"
  book:
    id: ".id::text"
    sitemap: {alternate: true}
""",
        encoding="utf-8",
    )
    r = procs.run(
        [*CLI, "validate", str(spec)], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == EXIT_USAGE, r.stdout + r.stderr
    out = r.stdout + r.stderr
    where = str(spec)
    assert "sitemap page kind" in _at(out, where, 9)  # each
    assert "without follow rules" in _at(out, where, 7)
    # the job renders, but a sitemap kind is fetched over HTTP unless it says otherwise
    assert "renders with" not in _at(out, where, 7)
    assert "not a sitemap" in _at(out, where, 12)  # sitemap: on an html kind


def _new_sitemap_job(root: Path, start_url: str) -> None:
    """`framework new shop --template sitemap` in ``root``, only the start URL given."""
    (root / "projects").mkdir()
    new = run_cli(
        "new", "shop", "--template", "sitemap", "--start-url", start_url, cwd=root, timeout=120
    )
    assert new.returncode == EXIT_OK, new.stderr


@pytest.mark.process
def test_the_sitemap_template_crawls_a_shop(sitemap_site, tmp_path):
    """`framework new --template sitemap` as written, only the start URL given: robots.txt,
    its two sitemaps (the books' index is read, its entries match no rule), the products,
    and their related products up to the template's max_depth."""
    site = sitemap_site(shop=True)
    _new_sitemap_job(tmp_path, f"{site.url}/robots.txt")
    ws = tmp_path / "ws"
    r = run_cli("crawl", "shop", "--workspace", str(ws), "-L", "INFO", cwd=tmp_path)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert workspace_items(ws) == site.truth_products()
    assert site.hits("/product/p1-rel2") == 0  # depth 3
    assert site.hits("/product/p1/print") == 0
    assert site.hits("/book/1") == 0
    # the books' sitemaps hold no product: said once, naming the kind
    told = [x for x in r.stderr.splitlines() if "matched a follow rule of 'sitemaps'" in x]
    assert len(told) == 1, told
    assert "/sitemaps/books-" in told[0]
    assert "gave no link to follow" not in r.stderr  # every follow rule found some
    # preview of the start URL: its sitemaps as links, no "no records" of a kind that
    # reads none
    p = run_cli("preview", "shop", cwd=tmp_path, timeout=120)
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    assert f"-> {site.url}/sitemap_index.xml  (sitemaps)" in p.stdout
    assert "no records" not in p.stdout
    assert "! follow" not in p.stdout  # a robots.txt naming sitemaps links to no product
    assert "--kind K" not in p.stdout


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<!doctype html>\n<html><body><h1>Home</h1></body></html>", "no element could be read"),
        (b"User-agent: *\nDisallow:\n", "no element could be read"),
        (b"", "no element found"),
    ],
)
def test_a_page_that_is_no_xml_document_says_why_it_is_not_a_sitemap(body, detail):
    from framework.crawl.discovery import SitemapError, _open

    with pytest.raises(SitemapError) as got:
        _open(body)
    assert str(got.value).startswith(f"not a sitemap (no XML document): {detail}")


def test_an_xml_document_of_another_root_is_not_a_sitemap():
    from framework.crawl.discovery import SitemapError, _open

    with pytest.raises(SitemapError, match=r"the root element is <html>, expected <urlset>"):
        _open(b"<html></html>")


@pytest.mark.process
def test_a_robots_txt_that_names_no_sitemap_is_said(site, tmp_path):
    """The sitemap template started from a robots.txt with no `Sitemap:` line (the demo
    site's): the crawl extracts nothing (exit 4) and says why, not only that its follow
    rules found no link."""
    _new_sitemap_job(tmp_path, f"{site.url}/robots.txt")
    r = run_cli("crawl", "shop", "--workspace", str(tmp_path / "ws"), "-q", cwd=tmp_path)
    assert r.returncode == 4, r.stderr[-3000:]
    (told,) = [x for x in r.stderr.splitlines() if "names no sitemap" in x]
    assert f"{site.url}/robots.txt names no sitemap (no `Sitemap:` line)" in told
    assert "gave no link to follow" in r.stderr  # the follow rule's finding, counted
