"""Outcomes say the next step, with the flags that locate the job and its workspace:
a crawl that extracted nothing names `status` with them, a crawl after a spec change
names `reparse` with them, a reparse whose fixed follow rule queued new pages exits 0
and names the crawl that fetches them; `preview` without `--kind` reads a page as the
kind the job's URL patterns lead it to. Through the real CLI, on a local site."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import _page, _rows, _write_spec
from tests.fixtures.crawl import workspace_items
from tests.fixtures.hostile import HostileServer

EXIT_HALTED = 4

SPEC = """\
name: hostile
source_type: hostile
start_urls: ["{base}/jobs/"]
pages:
  list:
    follow: {{css: "{follow}", to: detail}}
  detail:
    id: {{url: '([^/]+)$'}}
    fields:
      title: {{css: "h1::text"}}
"""


def _site(site: HostileServer) -> None:
    links = "".join(f'<a class="job" href="/jobs/{n}">job {n}</a>' for n in (1, 2, 3))
    site.route("/jobs/", _page(links))
    for n in (1, 2, 3):
        site.route(f"/jobs/{n}", _page(f"<h1>job {n}</h1>"))


@pytest.mark.process
@pytest.mark.timeout(400)
def test_the_reparse_after_a_follow_fix_exits_0_and_names_the_crawl_with_its_workspace(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    _site(site)
    spec = _write_spec(tmp_path, SPEC.format(base=site.url, follow="a.nope"))
    ws = tmp_path / "a workspace"  # a space: the hints quote it for a shell
    located = f"{shlex.quote(str(spec))} --workspace {shlex.quote(str(ws))}"

    # a follow rule that finds nothing: nothing extracted, a human must look
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    # status reads a workspace, not a spec: the job's name and the workspace
    assert f"`framework status hostile --workspace {shlex.quote(str(ws))}`" in r.stderr
    assert "`framework status hostile`" not in r.stderr

    # the fix; a crawl now says the stored pages are read again by a reparse of THIS
    # workspace (they are all fetched: it has nothing else to do)
    spec.write_text(SPEC.format(base=site.url, follow="a.job"), encoding="utf-8")
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert f"`framework reparse {located}`" in r.stderr, r.stderr[-3000:]
    assert "`framework reparse hostile`" not in r.stderr

    r = crawl_cli("reparse", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"3 new pages queued: run `framework crawl {located}`" in r.stderr
    assert "expect_empty" not in r.stderr
    assert {row["status"] for u, row in _rows(ws).items() if u != f"{site.url}/jobs/"} == {
        "pending"
    }
    r = crawl_cli("status", "hostile", "--workspace", str(ws), "--json", timeout=120)
    assert "extracted nothing" not in r.stdout, r.stderr[-3000:]
    # more to do, not a human's to look at: the reparse queued what the crawl fetches
    assert json.loads(r.stdout)["state"] == "unfinished", r.stdout

    # the step it named is the one that finishes the job
    r = crawl_cli(*shlex.split(f"crawl {located}"), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(i["title"] for i in workspace_items(ws).values()) == [
        "job 1",
        "job 2",
        "job 3",
    ]


@pytest.mark.process
@pytest.mark.timeout(240)
def test_preview_without_kind_reads_a_detail_url_as_the_kind_its_pattern_leads_to(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    _site(site)
    text = SPEC.format(base=site.url, follow="a.job").replace(
        '{css: "a.job", to: detail}', "{pattern: '/jobs/\\d+$', to: detail}"
    )
    _write_spec(tmp_path, text)

    r = crawl_cli("preview", "hostile", f"{site.url}/jobs/2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{site.url}/jobs/2 as kind 'detail'" in r.stdout
    assert '"job 2"' in r.stdout
    assert "read as kind 'detail': the URL matches list.follow pattern" in r.stderr

    # a URL no pattern leads anywhere: the start kind, and the kinds --kind can give
    r = crawl_cli("preview", "hostile", f"{site.url}/about", cwd=tmp_path, timeout=120)
    assert "as kind 'list'" in r.stdout, r.stderr[-3000:]
    assert "no follow pattern of the job matches the URL (--kind: list, detail)" in r.stderr


def test_a_hint_gets_the_flags_of_its_own_job_only() -> None:
    from framework.cli.hints import Locator

    loc = Locator("demo", "projects/demo/job.yaml", "/data/the ws")
    said = loc.located(
        "see `framework status demo`; `framework crawl --fresh demo` starts over; "
        "`framework crawl other` is another job; `framework export demo -o FILE`; "
        "`framework status demo --workspace /elsewhere` is located already"
    )
    # a command that reads the spec takes its path; one that reads a workspace, a name
    assert said == (
        "see `framework status demo --workspace '/data/the ws'`; "
        "`framework crawl projects/demo/job.yaml --fresh --workspace '/data/the ws'` starts "
        "over; `framework crawl other` is another job; "
        "`framework export demo -o FILE --workspace '/data/the ws'`; "
        "`framework status demo --workspace /elsewhere` is located already"
    )
    # a database workspace's password is masked, as everywhere a line is logged
    db = Locator("demo", "demo", "postgresql://u:s3cret-pw@db.local/jobs")
    hint = db.located("see `framework status demo`")
    assert "s3cret-pw" not in hint
    assert "--workspace 'postgresql://[redacted]@db.local/jobs'" in hint
    # a job named as it is, in its default workspace: nothing to add
    plain = Locator("demo", "demo")
    assert plain.located("see `framework status demo`") == "see `framework status demo`"
