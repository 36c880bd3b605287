"""`framework preview` and `scrapy parse --spider JOB`, through the real CLIs against the
fixture site: values and the sources that gave them, dropped records, the requests a
page would make, and nothing ever written to the workspace."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import procs
from tests.fixtures.crawl import run_cli
from tests.fixtures.site import write_good_spec
from tests.paths import REPO

JOB = "fixture-cases"


@pytest.fixture
def project(site, tmp_path) -> Path:
    """A project folder (scrapy.cfg, projects/fixture-cases/job.yaml) run from its root."""
    write_good_spec("cases", site.url, tmp_path)
    shutil.copy(REPO / "scrapy.cfg", tmp_path / "scrapy.cfg")
    return tmp_path


def _preview(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("preview", JOB, *args, cwd=project)


def _json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout)


def _fields(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in record["fields"]}


@pytest.mark.process
def test_detail_page_values_and_the_sources_that_gave_them(site, project):
    truth = site.truth
    expected = truth.records()
    case = sorted(truth.fallbacks)[0]  # a page whose amount lost its class
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "detail", "--json")
    assert r.returncode == 0, r.stderr
    report = _json(r)
    assert report["kind"] == "detail"
    assert report["error"] is None
    [record] = report["records"]
    assert record["dedupe_key"] == expected[case]["dedupe_key"]
    assert record["stored"] is True
    fields = _fields(record)
    for name in ("title", "court", "category", "filed", "amount", "judges"):
        assert fields[name]["value"] == expected[case][name], name
    assert fields["id"]["source"] == "css: #case-number::text"
    assert fields["title"]["source"] == "css: h1.title::text"
    assert fields["title"]["source_index"] == 0
    assert fields["category"]["source"].startswith("embedded: ")
    # the fallback list: the second selector gave the amount
    assert fields["amount"]["source"] == "css: [data-field=amount]::text"
    assert fields["amount"]["source_index"] == 1
    assert fields["amount"]["fallback"] is True
    tabs = {t["kind"]: t for t in record["subtabs"]}
    assert tabs["detail.rulings"]["url"] == f"{site.url}/cases/{case}/tab/rulings"
    assert tabs["detail.documents"]["method"] == "POST"
    assert tabs["detail.documents"]["body"] == f"case={case}"
    # the same in text
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "detail")
    assert r.returncode == 0, r.stderr
    assert "fallback #1 css: [data-field=amount]::text: layout changed?" in r.stdout
    assert f"POST {site.url}/cases/{case}/tab/documents" in r.stdout


@pytest.mark.process
def test_list_page_shows_its_links_and_next_page(site, project):
    r = _preview(project, "--json")  # default: the first start URL, the start kind
    assert r.returncode == 0, r.stderr
    report = _json(r)
    assert report["kind"] == "list"
    assert report["url"] == f"{site.url}/cases"
    first_page = site.truth.detail_urls()[: len(report["follow"])]
    assert [link["url"] for link in report["follow"]] == first_page
    assert {link["kind"] for link in report["follow"]} == {"detail"}
    assert report["next"] == [{"kind": "list", "url": site.truth.list_urls()[1]}]
    statuses = [_fields(rec)["status"]["value"] for rec in report["records"]]
    assert len(statuses) == len(first_page)
    assert all(statuses)


@pytest.mark.process
def test_a_list_page_whose_each_matches_nothing_says_which(site, project):
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace('"table.cases tbody tr"', '"table.results tr"'), encoding="utf-8")
    r = _preview(project, "--json")
    # nothing found on the page is a failed check, as a missing required field is
    assert r.returncode == 1, r.stderr
    report = _json(r)
    assert (report["records"], report["follow"]) == ([], [])
    assert report["each"] == "table.results tr"
    assert (report["matched"], report["each_empty"]) == (0, True)
    r = _preview(project)
    assert r.returncode == 1, r.stderr
    assert "no records on this page: each (table.results tr) matched nothing" in r.stdout
    assert "(--kind K reads it as another kind: detail, detail.rulings" in r.stdout


@pytest.mark.process
def test_a_list_kind_with_no_fields_says_what_each_matched(site, project):
    # its rows keep no record (nothing to carry), yet its links come from them: not
    # "matched nothing"
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    fields = re.search(r"  fields:\n    status: .*\n", text)
    assert fields is not None
    spec.write_text(text.replace(fields.group(0), "", 1), encoding="utf-8")
    r = _preview(project, "--json")
    assert r.returncode == 0, r.stderr
    report = _json(r)
    n = len(report["follow"])
    assert n > 1
    assert (report["records"], report["matched"], report["each_empty"]) == ([], n, False)
    r = _preview(project)
    assert r.returncode == 0, r.stderr
    assert f"each (table.cases tbody tr) matched {n}; the kind has no fields" in r.stdout
    assert "no records" not in r.stdout
    assert "--kind K" not in r.stdout
    r = _scrapy(project, "parse", "--spider", JOB, "--nocolour", f"{site.url}/cases")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"<GET {site.truth.detail_urls()[0]}>" in r.stdout
    assert "no records at" not in r.stderr


@pytest.mark.process
def test_a_follow_that_finds_no_link_on_the_page_is_said(site, project):
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("a.detail::attr(href)", "a.detial::attr(href)"), encoding="utf-8")
    r = _preview(project, "--json")
    assert r.returncode == 0, r.stderr  # a page may lack a rule's links: said, not failed
    report = _json(r)
    assert (report["follow"], report["follow_empty"]) == ([], ["detail"])
    assert report["matched"] == len(report["records"]) > 1
    r = _preview(project)
    assert "! follow to detail: no link to follow on this page" in r.stdout


@pytest.mark.process
def test_a_next_selector_that_finds_no_next_page_is_said(site, project):
    """A wrong `next` ends the crawl at page 1 with no error (the last page of a list
    has no next link either): preview says it, as for a follow rule."""
    r = _preview(project, "--json")
    assert r.returncode == 0, r.stderr
    assert _json(r)["next_empty"] is None  # the good selector finds page 2
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("a.next::attr(href)", "a.nxt::attr(href)"), encoding="utf-8")
    r = _preview(project, "--json")
    assert r.returncode == 0, r.stderr  # a last page has none: said, not failed
    report = _json(r)
    assert (report["next"], report["next_empty"]) == ([], "a.nxt::attr(href)")
    r = _preview(project)
    assert "! next (a.nxt::attr(href)): no next page on this page" in r.stdout


@pytest.mark.process
def test_a_missing_required_field_exits_1_and_says_which(site, project):
    untitled = next(b for b in site.truth.broken if b.reason == "missing_required")
    r = _preview(project, untitled.url, "--kind", "detail", "--json")
    assert r.returncode == 1, r.stderr
    report = _json(r)
    [record] = report["records"]
    assert record["missing"] == ["title"]
    assert record["stored"] is False
    assert _fields(record)["title"]["outcome"] == "empty"
    assert "validation error" in report["error"]
    r = _preview(project, untitled.url, "--kind", "detail")
    assert r.returncode == 1
    assert "DROPPED: missing required title" in r.stdout
    assert "EMPTY (required): nothing matched" in r.stdout


@pytest.mark.process
def test_a_wrong_selector_shows_empty_and_a_failed_type(site, project):
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    text = text.replace('room: ".room::text"', 'room: ".courtroom::text"')
    text = text.replace('court: ".court::text"', 'court: {css: ".court::text", type: integer}')
    text = text.replace("      min: 0\n", "      min: 0\n      max: 1\n", 1)
    spec.write_text(text, encoding="utf-8")
    case = sorted(set(site.truth.ids) - set(site.truth.fallbacks))[0]
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "detail", "--json")
    assert r.returncode == 0, r.stderr  # none of them is required
    fields = _fields(_json(r)["records"][0])
    assert fields["room"]["outcome"] == "empty"
    assert fields["room"]["value"] is None
    assert fields["court"]["outcome"] == "failed"
    assert fields["court"]["source"] == "css: .court::text"
    assert fields["court"]["error"]
    assert fields["amount"]["outcome"] == "failed"  # over max: 1
    assert "breaks rule max" in fields["amount"]["error"]
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "detail")
    assert "EMPTY: nothing matched" in r.stdout
    assert "FAILED: " in r.stdout


@pytest.mark.process
def test_a_saved_file_is_read_without_a_request(site, project, tmp_path):
    case = site.truth.ids[1]
    url = f"{site.url}/cases/{case}"
    fetched = run_cli("preview", JOB, url, "--kind", "detail", "--json", cwd=project)
    page = tmp_path / "page.html"
    page.write_bytes(_get(url))
    before = site.hits(f"/cases/{case}")
    r = _preview(project, url, "--kind", "detail", "--file", str(page), "--json")
    assert r.returncode == 0, r.stderr
    assert site.hits(f"/cases/{case}") == before  # nothing fetched
    saved = _json(r)
    assert saved["origin"] == str(page)
    assert saved["records"] == _json(fetched)["records"]


@pytest.mark.process
def test_a_sub_tab_kind_shows_its_value(site, project):
    case = site.truth.ids[0]
    r = _preview(
        project, f"{site.url}/cases/{case}/tab/rulings", "--kind", "detail.rulings", "--json"
    )
    assert r.returncode == 0, r.stderr
    assert _json(r)["tab_value"] == site.truth.records()[case]["rulings"]


@pytest.mark.process
def test_bad_calls_are_usage_errors(site, project):
    r = _preview(project, "--kind", "nope")
    assert r.returncode == 2
    assert "no page kind 'nope'" in r.stderr
    assert "list, detail" in r.stderr
    # a URL that cannot be requested as written: one line, the URL it may have meant
    before = site.hits("/cases")
    for url, says in (
        ("/cases", f"on the job's site: {site.url}/cases"),
        (site.url.removeprefix("http://") + "/cases", f"did you mean {site.url}/cases?"),
        ("http://[::1", "is not a URL"),
        ("http:///cases", "names no host"),
    ):
        r = _preview(project, url)
        assert r.returncode == 2, (url, r.stderr[-2000:])
        assert says in r.stderr, (url, r.stderr)
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert site.hits("/cases") == before  # nothing was fetched


@pytest.mark.process
def test_preview_writes_nothing_to_the_workspace(site, project):
    ws = project / "var" / JOB
    r = _preview(project)
    assert r.returncode == 0, r.stderr
    assert not (project / "var").exists()
    # an existing workspace is left byte for byte as it was
    r = run_cli("crawl", JOB, "--max-requests", "2", "-L", "WARNING", cwd=project)
    assert r.returncode == 3, r.stderr[-2000:]
    before = _snapshot(ws)
    case = site.truth.ids[0]
    for args in ([], [f"{site.url}/cases/{case}", "--kind", "detail"]):
        r = _preview(project, *args)
        assert r.returncode == 0, r.stderr
    assert _snapshot(ws) == before


@pytest.mark.process
def test_credentials_are_resolved_and_never_shown(site, project):
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text + '\nheaders: {X-Api-Key: "{env:FW_PREVIEW_KEY}"}\n', encoding="utf-8")
    r = _preview(project)
    assert r.returncode == 2
    assert "FW_PREVIEW_KEY is not set" in r.stderr
    secret = "s3cr3t-preview-value"
    env = {**_env(), "FW_PREVIEW_KEY": secret}
    url = f"{site.url}/cases?key={{env:FW_PREVIEW_KEY}}"
    r = _run_env(project, env, "preview", JOB, url, "--json")
    assert r.returncode == 1, r.stderr  # the site knows no `key`: a 404 page, shown as one
    assert _json(r)["status"] == 404
    assert secret not in r.stdout + r.stderr
    assert _json(r)["url"] == f"{site.url}/cases?key={{env:FW_PREVIEW_KEY}}"
    assert site.hits(f"/cases?key={secret}") >= 1  # the value was sent


@pytest.mark.process
def test_scrapy_parse_extracts_and_writes_nothing(site, project):
    case = site.truth.ids[0]
    expected = site.truth.records()[case]
    r = _scrapy(
        project,
        "parse",
        "--spider",
        JOB,
        "-a",
        "kind=detail",
        "--nocolour",
        f"{site.url}/cases/{case}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "NotImplementedError" not in r.stderr
    assert f"'dedupe_key': '{expected['dedupe_key']}'" in r.stdout
    assert f"'title': '{expected['title']}'" in r.stdout
    assert f"<POST {site.url}/cases/{case}/tab/documents>" in r.stdout
    # the list page: its links as requests, parsed as their own kinds at depth 2
    r = _scrapy(project, "parse", "--spider", JOB, "--nocolour", "-d", "2", f"{site.url}/cases")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"'dedupe_key': '{site.truth.records()[site.truth.ids[0]]['dedupe_key']}'" in r.stdout
    assert f"<GET {site.truth.list_urls()[2]}>" in r.stdout
    assert "no records at" not in r.stderr
    # a detail page read as the start kind (no -a kind=): Scrapy shows two empty lists;
    # the log says why, as preview does, and how to read it as another kind
    r = _scrapy(project, "parse", "--spider", JOB, "--nocolour", f"{site.url}/cases/{case}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        f"no records at {site.url}/cases/{case} read as kind 'list': each (table.cases tbody tr)"
        " matched nothing; -a kind=K reads it as another (list, detail, detail.rulings" in r.stderr
    )
    assert not (project / "var").exists()


# ---------------------------------------------------------------------- helpers
def _snapshot(ws: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ws.iterdir())}


def _get(url: str) -> bytes:
    from urllib.request import urlopen

    with urlopen(url, timeout=30) as answer:  # noqa: S310 - the local fixture site
        return answer.read()


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def _run_env(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    from tests.fixtures.crawl import CLI

    return procs.run(
        [*CLI, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _scrapy(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [sys.executable, "-m", "scrapy", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.process
def test_a_value_carried_from_the_list_is_named_and_can_be_given(site, project):
    """A sub-tab template over a value the list row carries in (the `list-detail-subtabs`
    template's `court`): a detail page previewed alone lacks it. Preview says where the
    crawl takes it from and how to give it, instead of a bare template error."""
    spec = project / "projects" / JOB / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(
        text.replace('body: {form: {case: "{id}"}}', 'body: {form: {case: "{id}", s: "{status}"}}'),
        encoding="utf-8",
    )
    case = site.truth.ids[0]
    url = f"{site.url}/cases/{case}"
    r = _preview(project, url, "--kind", "detail")
    assert r.returncode == 1, r.stderr
    assert (
        "needs {status}, which 'detail' pages do not extract: the crawl carries it from the "
        "page that links here (list.fields.status); preview with --carry status=VALUE"
    ) in r.stdout
    r = _preview(project, url, "--kind", "detail", "--carry", "status=open", "--json")
    assert r.returncode == 0, r.stderr
    [record] = _json(r)["records"]
    assert _fields(record)["status"]["outcome"] == "carried"
    assert _fields(record)["status"]["value"] == "open"
    tabs = {t["kind"]: t for t in record["subtabs"]}
    assert tabs["detail.documents"]["body"] == f"case={case}&s=open"
    r = _preview(project, url, "--kind", "detail", "--carry", "status=open")
    assert re.search(r'^  status +"open"  \(carried: --carry\)$', r.stdout, re.MULTILINE)
    r = _preview(project, url, "--kind", "detail", "--carry", "status")
    assert r.returncode == 2
    assert "--carry: expected NAME=VALUE" in r.stderr
    # `scrapy parse` says the same, with its own way to give the value
    r = _scrapy(project, "parse", "--spider", JOB, "-a", "kind=detail", "--nocolour", url)
    assert "Traceback" not in r.stderr
    assert (
        "needs {status}, which 'detail' pages do not extract: the crawl carries it from the "
        """page that links here (list.fields.status); scrapy parse --meta '{"fw_carry": """
        """{"status": "VALUE"}}' gives it"""
    ) in r.stderr
    meta = json.dumps({"fw_carry": {"status": "open"}})
    r = _scrapy(project, "parse", "--spider", JOB, "-a", "kind=detail", "-m", meta, url)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "'status': 'open'" in r.stdout
    assert not (project / "var").exists()


@pytest.mark.process
def test_an_each_that_finds_nothing_names_the_data_in_the_page_s_scripts(site, project):
    case = site.truth.ids[0]
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "list")
    assert r.returncode == 1
    assert "no records on this page: each (table.cases tbody tr) matched nothing" in r.stdout
    assert (
        "  hint: scripts assign objects or lists to: window.__CASE__ (embedded: {var: NAME})"
    ) in r.stdout.splitlines()
    r = _preview(project, f"{site.url}/cases/{case}", "--kind", "list", "--json")
    assert _json(r)["script_data"]["assigned"] == ["window.__CASE__"]
    # the same list built by JavaScript: the hint is to render it
    r = _preview(project, f"{site.url}/js/cases", "--kind", "list")
    assert r.returncode == 1
    assert "JavaScript may build it (`render: playwright` on the kind" in r.stdout
    # a page whose records were found has no hint
    r = _preview(project, "--json")
    assert _json(r)["script_data"] is None
