"""Real crawls with `render: playwright` of the demo site's JS-rendered variant
(framework/demo/js.py), through the real CLI and Debian's Chromium.

They need the playwright plugin and a Chromium: without them they skip with the reason,
except in CI (``CI=true`` or ``FRAMEWORK_REQUIRE_BROWSER=1``, set by .ci/run), where a
missing browser is a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from framework.workspace import ErrorKind, RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, url_log, workspace_items
from tests.fixtures.wait import wait_for

EXIT_HALTED = 4  # the demo site's broken pages leave rows in error, as in a plain crawl


def _require_browser() -> None:
    required = os.environ.get("CI") == "true" or os.environ.get("FRAMEWORK_REQUIRE_BROWSER") == "1"
    try:
        from framework_playwright.browser import find_chromium

        find_chromium()
    except Exception as exc:  # the plugin missing (ImportError) or no Chromium
        if required:
            pytest.fail(f"a browser is required here (CI): {exc}")
        pytest.skip(f"no playwright plugin or Chromium: {exc}")


@pytest.fixture(autouse=True)
def _browser() -> None:
    _require_browser()


def _crawl(spec: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _by_id(ws: Path) -> dict[str, dict[str, Any]]:
    return {item["source_id"]: item for item in workspace_items(ws).values()}


def _assert_same_records(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    assert sorted(got) == sorted(want)
    for sid, record in want.items():
        for name in sorted(set(record) | set(got[sid])):
            assert got[sid].get(name, "<absent>") == record.get(name, "<absent>"), (sid, name)


def _chromium_started_after(t0: float) -> list[psutil.Process]:
    """The browsers started since t0 that still run or wait on a parent of the test's.

    A zombie has exited: once its crawl is gone it is reparented to the machine's init,
    which in a container may never reap it. It counts only while its parent is a
    process started by the test (a driver or browser that outlived the crawl).
    """
    found = []
    for proc in psutil.process_iter(["name", "create_time", "status", "ppid"]):
        if proc.info["name"] != "chromium" or proc.info["create_time"] < t0:
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE and not _started_after(
            proc.info["ppid"], t0
        ):
            continue
        found.append(proc)
    return found


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def _started_after(pid: int, t0: float) -> bool:
    try:
        return psutil.Process(pid).create_time() >= t0
    except psutil.Error:
        return False


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("name", ["js_cases", "js_scroll"])
def test_rendered_crawl_yields_the_static_records_field_by_field(
    make_site, good_spec, tmp_path, name
):
    t0 = time.time()
    site = make_site(cases=25)
    spec = good_spec(name, site.url, tmp_path)
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]

    truth = site.truth
    _assert_same_records(_by_id(ws), truth.records())
    items = workspace_items(ws)
    with Workspace.open(ws, create=False, readonly=True) as w:
        incomplete = {
            i.source_id for i in w.store.iter_items(complete_only=False) if not i.complete
        }
        errors = {
            (row.kind, row.url): row.last_error_kind
            for row in w.store.iter_rows(status=RowStatus.ERROR)
        }
    assert incomplete == set(truth.incomplete)
    assert len(items) == len(truth.records())
    # the broken pages fail as they do on the plain site: 404 and 500 by status
    failing_id, _ = site.data.failing_tab
    assert errors[("detail.hearings", f"{site.url}/js/cases/{failing_id}/tab/hearings")] == (
        ErrorKind.HTTP_5XX
    )
    assert ErrorKind.HTTP_4XX in errors.values()
    assert ErrorKind.TIMEOUT not in errors.values()
    # every page rendered once, and the tab's content was loaded by its click
    for case in site.data.good:
        assert site.hits(f"/js/cases/{case.id}") == 1
        if case.id != failing_id:
            assert site.hits(f"/cases/{case.id}/tab/hearings") == 1
    # pages and browser are closed with the crawl
    wait_for(lambda: not _chromium_started_after(t0), 15, "the crawl's browsers to exit")


@pytest.mark.browser
def test_a_plain_crawl_of_the_js_site_finds_no_record(make_site, good_spec, tmp_path):
    # what the new user saw: the records are not in the HTML a server sends
    site = make_site(cases=5)
    spec = good_spec("js_cases", site.url, tmp_path)
    spec.write_text(_drop_browser_blocks(spec.read_text(encoding="utf-8")), encoding="utf-8")
    assert "playwright" not in spec.read_text(encoding="utf-8")
    r = _crawl(spec, tmp_path / "ws")
    # a crawl that stores nothing needs a human (exit 4): here, a browser
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert workspace_items(tmp_path / "ws") == {}
    assert site.hits("/js/cases") == 1


def _drop_browser_blocks(text: str) -> str:
    """The spec with `render: http` and without its `browser:` blocks."""
    out: list[str] = []
    skip_deeper: int | None = None
    for line in text.replace("render: playwright", "render: http").splitlines():
        indent = len(line) - len(line.lstrip())
        if skip_deeper is not None and (not line.strip() or indent > skip_deeper):
            continue
        skip_deeper = None
        if line.strip().startswith("browser:"):
            skip_deeper = indent
            continue
        out.append(line)
    return "\n".join(out) + "\n"


TIMEOUT_SPEC = """\
name: js-timeout
source_type: sipp-demo
start_urls: ["{base}/js/cases"]
render: playwright
max_attempts: 1
list:
  each: "table.cases tbody tr"
  follow: "a.detail::attr(href)"
  next: "a.next::attr(href)"
  browser: {{wait_for: "div.pager"}}
detail:
  browser:
    wait_for: {{selector: ".room", timeout: 1}}   # missing on some cases
  id: {{css: "#case-number::text", required: true}}
  fields:
    room: ".room::text"
"""


@pytest.mark.browser
def test_wait_for_timing_out_is_a_typed_error_and_the_crawl_goes_on(make_site, tmp_path):
    site = make_site(cases=12, edge_cases=False)
    spec = tmp_path / "projects" / "js-timeout" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(TIMEOUT_SPEC.format(base=site.url), encoding="utf-8")
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]

    with_room = {c.id for c in site.data.cases if c.room is not None}
    without = {c.id for c in site.data.cases if c.room is None}
    assert with_room
    assert without
    with Workspace.open(ws, create=False, readonly=True) as w:
        rows = {
            row.url.rsplit("/", 1)[-1]: row for row in w.store.iter_rows() if row.kind == "detail"
        }
    assert set(rows) == with_room | without
    for cid in without:
        row = rows[cid]
        assert row.status is RowStatus.ERROR, cid
        assert row.last_error_kind is ErrorKind.TIMEOUT, (cid, row.last_error)
        assert "'.room'" in (row.last_error or ""), row.last_error
    for cid in with_room:
        assert rows[cid].status is RowStatus.OK, (cid, rows[cid].last_error)
    assert set(_by_id(ws)) == with_room


@pytest.mark.slow
@pytest.mark.browser
def test_kill_9_and_resume_rerenders_no_ok_row(make_site, good_spec, tmp_path):
    site = make_site(cases=25, delay=0.05)
    spec = good_spec("js_cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    proc = procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: sum(1 for line in _lines(ws) if "/js/cases/C" in line["url"]) >= 8,
            300,
            "8 rendered pages logged before the kill",
            alive=lambda: proc.poll() is None or pytest.fail("the crawl ended before the kill"),
        )
        browsers = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    # the browser does not outlive its crawl (Playwright's driver closes it)
    # (a zombie has exited; reaping it is the job of init, which a container may not do)
    wait_for(lambda: not _running(browsers), 30, "the killed crawl's browsers to exit")

    with Workspace.open(ws, create=False, readonly=True) as w:
        ok_before = [row.url for row in w.store.iter_rows(status=RowStatus.OK)]
    rendered_ok = [u for u in ok_before if "/js/" in u]
    assert rendered_ok, "no rendered row was ok before the kill"
    hits_before = {u: site.hits(u) for u in ok_before}

    r = _crawl(spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert {u: site.hits(u) for u in ok_before} == hits_before  # no ok row fetched again
    _assert_same_records(_by_id(ws), site.truth.records())
    ok_rows: set[int] = set()
    for line in url_log(ws):
        assert line["row"] not in ok_rows, line
        if line["outcome"] == "ok":
            ok_rows.add(line["row"])


def _lines(ws: Path) -> list[dict[str, Any]]:
    try:
        return url_log(ws)
    except FileNotFoundError:
        return []


@pytest.mark.browser
def test_a_refused_connection_is_typed_connect(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = tmp_path / "projects" / "js-down" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        "name: js-down\nsource_type: demo\n"
        f'start_urls: ["http://127.0.0.1:{port}/js/cases"]\n'
        'render: playwright\nmax_attempts: 1\ndetail:\n  id: "#case-number::text"\n',
        encoding="utf-8",
    )
    ws = tmp_path / "ws"
    r = _crawl(spec, ws)
    # typed as for plain pages, so the host-down stop applies too: come back later
    assert r.returncode == 3, r.stderr[-3000:]
    assert "host_down" in r.stderr
    with Workspace.open(ws, create=False, readonly=True) as w:
        (row,) = list(w.store.iter_rows())
    assert row.status is RowStatus.ERROR
    assert row.last_error_kind is ErrorKind.CONNECT, row.last_error
    assert "ERR_CONNECTION_REFUSED" in (row.last_error or "")


@pytest.mark.slow
@pytest.mark.browser
def test_a_load_more_button_clicked_until_it_is_gone(make_site, good_spec, tmp_path):
    site = make_site(cases=25)
    spec = good_spec("js_scroll", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    text = text.replace("/js/scroll", "/js/more").replace(
        "scroll: {times: 50, pause: 2}", 'click: {selector: "button.more", times: 50}'
    )
    assert "/js/more" in text
    assert "button.more" in text
    spec.write_text(text, encoding="utf-8")
    r = _crawl(spec, tmp_path / "ws")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    # 27 rows, ten per click: every detail page was found, so every record is there
    _assert_same_records(_by_id(tmp_path / "ws"), site.truth.records())
    with Workspace.open(tmp_path / "ws", create=False, readonly=True) as w:
        (listing,) = [row for row in w.store.iter_rows() if row.kind == "list"]
    assert listing.status is RowStatus.OK, listing.last_error
