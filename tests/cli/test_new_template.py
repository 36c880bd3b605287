"""`framework new --template index-list-detail` through the real CLI: the spec it writes
validates as written, and with only its CHANGE-ME selectors filled in it harvests a
site of that shape (an index -> two paginated lists with a visible total -> detail)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from framework.cli import main
from tests.fixtures.crawl import workspace_items
from tests.fixtures.hostile import HostileServer

TEMPLATE = "index-list-detail"

# placeholder -> the fixture site's selector: all a user has to change
FILLED = {
    "a.CHANGE-ME-list-link::attr(href)": "nav a::attr(href)",
    ".CHANGE-ME-row-title::text": "a.title::text",  # before its prefix, .CHANGE-ME-row
    ".CHANGE-ME-row": "li.job",
    "a.CHANGE-ME-detail-link::attr(href)": "a.title::attr(href)",
    "a.CHANGE-ME-next::attr(href)": "a[rel=next]::attr(href)",
    "CHANGE-ME-results": "jobs",
    ".CHANGE-ME-id::text": ".ref::text",
    ".CHANGE-ME-date::text": ".posted::text",
    ".CHANGE-ME-amount::text": ".salary::text",
    "a.CHANGE-ME-document::attr(href)": "a.pdf::attr(href)",
    ".CHANGE-ME-tags li::text": "ul.tags li::text",
}

# category -> the ids of its jobs, 3 to a list page
JOBS = {"it": [1, 2, 3, 4, 5], "sales": [6, 7]}


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "projects").mkdir()
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path))
    return tmp_path


def _new(root: Path, name: str, start_url: str) -> Path:
    assert main(["new", name, "--template", TEMPLATE, "--start-url", start_url]) == 0
    return root / "projects" / name / "job.yaml"


def test_the_template_is_listed_and_writes_a_spec_that_validates(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "--list-templates"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert listed[TEMPLATE].split(None, 1)[1].startswith("Index -> paginated lists -> detail")
    target = _new(root, "jobs", "https://jobs.example.org/categories")
    text = target.read_text(encoding="utf-8")
    assert "{{" not in text
    assert 'start_urls:\n  - "https://jobs.example.org/categories"' in text
    # every site-specific value is a visible placeholder, and `total:` is there for real
    values = json.dumps(yaml.safe_load(text))
    assert set(re.findall(r"CHANGE-ME[\w-]*", values)) == {
        m for k in FILLED for m in re.findall(r"CHANGE-ME[\w-]*", k)
    }
    assert re.search(r"^    total: \{re: ", text, re.MULTILINE)
    capsys.readouterr()
    assert main(["validate", "jobs"]) == 0
    assert capsys.readouterr().out == f"ok {target}\n"


def _list_page(base: str, category: str, page: int) -> str:
    ids = JOBS[category]
    shown = ids[(page - 1) * 3 : page * 3]
    rows = "".join(
        f'<li class="job"><a class="title" href="/job/{i}">Job {i}</a></li>' for i in shown
    )
    first = (page - 1) * 3 + 1
    more = page * 3 < len(ids)
    nxt = f'<a rel="next" href="/list/{category}/{page + 1}">Next</a>' if more else ""
    return (
        f"<html><body><p>Showing {first}-{first + len(shown) - 1} of {len(ids)} jobs</p>"
        f"<ul>{rows}</ul>{nxt}</body></html>"
    )


def _detail(i: int) -> str:
    return (
        f"<html><body><h1>Job {i}</h1><span class='ref'>J-{i}</span>"
        f"<span class='posted'>2026-01-{i:02d}</span><span class='salary'>{i},250.50</span>"
        f"<a class='pdf' href='/files/{i}.pdf'>PDF</a>"
        f"<ul class='tags'><li>t{i}</li><li>all</li></ul></body></html>"
    )


@pytest.mark.process
@pytest.mark.timeout(240)
def test_filled_in_it_harvests_every_job_of_every_list(
    root: Path, hostile_server: Callable[[], HostileServer], crawl_cli: Any
) -> None:
    site = hostile_server()
    site.route("/", "<html><body><nav>" + "".join(
        f'<a href="/list/{c}/1">{c}</a>' for c in JOBS) + "</nav></body></html>")  # fmt: skip
    for category, ids in JOBS.items():
        for page in range(1, (len(ids) + 2) // 3 + 1):
            site.route(f"/list/{category}/{page}", _list_page(site.url, category, page))
        for i in ids:
            site.route(f"/job/{i}", _detail(i))
    target = _new(root, "jobs", f"{site.url}/")
    text = target.read_text(encoding="utf-8")
    for placeholder, selector in FILLED.items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, selector)
    assert "CHANGE-ME" not in json.dumps(yaml.safe_load(text))  # (comments may say it)
    target.write_text(text.replace("DOWNLOAD_DELAY: 0.5", "DOWNLOAD_DELAY: 0"), encoding="utf-8")

    ws = root / "ws"
    r = crawl_cli("crawl", str(target), "--workspace", str(ws), "-q", cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "total_mismatch" not in r.stderr
    items = workspace_items(ws)
    assert sorted(items) == [f"jobs:J-{i}" for i in range(1, 8)]
    assert items["jobs:J-4"] == {
        "dedupe_key": "jobs:J-4",
        "source_type": "jobs",
        "source_id": "J-4",
        "listed_title": "Job 4",  # carried from its list row (page 2 of the `it` list)
        "title": "Job 4",
        "posted": "2026-01-04",
        "amount": 4250.5,
        "document": f"{site.url}/files/4.pdf",
        "tags": ["t4", "all"],
    }
    r = crawl_cli("status", "jobs", "--workspace", str(ws), "--json", cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "total_mismatch" not in json.dumps(json.loads(r.stdout))

    # `next` left as its placeholder finds no page 2: the `it` list's total says so
    target.write_text(
        text.replace("a[rel=next]::attr(href)", "a.CHANGE-ME-next::attr(href)"), encoding="utf-8"
    )
    ws = root / "ws-no-next"
    r = crawl_cli("crawl", str(target), "--workspace", str(ws), "-q", cwd=root)
    assert r.returncode == 4, r.stderr[-3000:]
    assert sorted(workspace_items(ws)) == [f"jobs:J-{i}" for i in (1, 2, 3, 6, 7)]
    r = crawl_cli("status", "jobs", "--workspace", str(ws), "--json", cwd=root)
    findings = [
        f for f in re.findall(r"\{[^{}]*\}", r.stdout) if '"total_mismatch"' in f
    ]  # the finding's own object, wherever status files it
    assert len(findings) == 1, r.stdout
    assert "expected 5, found 3" in findings[0]
    assert f"{site.url}/list/it/1" in findings[0]
