"""The job page in Debian's Chromium while real crawls run: at the end of an
uninterrupted crawl it shows what ``framework status --json`` says; during a slower one
the counts move (two screenshots seconds apart differ) and an ETA shows, and a
``kill -9`` and a resume later it shows what status says again. All of it with every
host but 127.0.0.1 unreachable (the page needs nothing from outside).

The screenshots in docs/images are taken by ``python -m tests.plugins.dashboard.screenshots``
(the demo job, driven the same way). Skips without the plugin or Chromium unless
``FRAMEWORK_REQUIRE_BROWSER=1`` / CI.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.fixtures.wait import wait_for
from tests.plugins.dashboard.helpers import serve

pytestmark = [pytest.mark.browser, pytest.mark.kill, pytest.mark.slow]

JOB = "fixture-cases"
DASH = "\N{EN DASH}"  # what the page shows for a figure that is not there
SLOW = ("-s", "CONCURRENT_REQUESTS=2", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=2")
# the edge cases' 500 retried at once, not after the default backoff
QUICK_RETRIES = ("-s", "FRAMEWORK_RETRY_BACKOFF_BASE=0.05", "-s", "FRAMEWORK_RETRY_BACKOFF_MAX=0.1")


def _chromium() -> str:
    required = os.environ.get("CI") == "true" or os.environ.get("FRAMEWORK_REQUIRE_BROWSER") == "1"
    try:
        from framework_playwright.browser import find_chromium

        return str(find_chromium())
    except Exception as exc:  # the plugin missing (ImportError) or no Chromium
        if required:
            pytest.fail(f"a browser is required here (CI): {exc}")
        pytest.skip(f"no playwright plugin or Chromium: {exc}")


def _wait(what: str, condition: Callable[[], Any], timeout: float = 60) -> Any:
    return wait_for(condition, timeout, what)


def _figures(page: Any) -> dict[str, str]:
    return {
        key: (page.text_content(f'#live [data-v="{key}"]') or "").strip()
        for key in ("ok", "pending", "error", "rows", "items")
    }


def _eta(page: Any) -> str:
    return (page.text_content('#live [data-v="eta"]') or "").strip()


def _ok(page: Any) -> int:
    text = _figures(page)["ok"]
    return int(text) if text.isdigit() else 0  # a dash until the workspace exists


def _kinds(page: Any) -> dict[tuple[str, str], str]:
    cells = page.eval_on_selector_all(
        "#kinds td[data-k]",
        "cells => cells.map(c => [c.dataset.k, c.dataset.s, c.textContent.trim()])",
    )
    return {(k, s): v for k, s, v in cells}


def _status(root: Path, job: str) -> dict[str, Any]:
    r = run_cli("status", job, "--json", cwd=root)
    assert r.returncode in (0, 4), r.stderr
    status: dict[str, Any] = json.loads(r.stdout)
    return status


def _shows_status(page: Any, status: dict[str, Any]) -> None:
    """Wait until the page's live figures, its rows per kind and its state line read
    what ``status`` says (the stream's last samples and the sections re-read)."""
    by = status["rows"]["by_status"]
    want = {
        "ok": str(by["ok"]),
        "pending": str(by["pending"]),
        "error": str(by["error"]),
        "rows": str(status["rows"]["total"]),
        "items": str(status["items"]["total"]),
    }
    _wait("the page's totals equal status's", lambda: _figures(page) == want)
    kinds = {
        (kind, s): str(c[s])
        for kind, c in status["rows"]["by_kind"].items()
        for s in ("ok", "pending", "error", "total")
    }
    _wait("the page's rows per kind equal status's", lambda: _kinds(page) == kinds)
    # the run's end reloads them soon, not only with the periodic reload a running
    # crawl asked for (every 10 s)
    _wait(
        "the sections re-read after the run's end",
        lambda: page.text_content('#sections [data-field="state"]') == status["state"],
        timeout=8,
    )
    _wait("the crawl shown stopped", lambda: page.is_hidden('#live [data-v="running"]'))


def test_the_job_page_follows_a_crawl_through_a_kill_and_a_resume(
    make_site: Any, good_spec: Any, tmp_path: Path
) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    site = make_site(cases=60, delay=0.02)
    good_spec("cases", site.url, tmp_path)
    # a second, small job of the same project, crawled once from start to end
    small = make_site(cases=8)
    text = good_spec("cases", small.url, tmp_path / "small").read_text(encoding="utf-8")
    whole = tmp_path / "projects" / "whole" / "job.yaml"
    whole.parent.mkdir(parents=True)
    whole.write_text(text.replace(f"name: {JOB}", "name: whole"), encoding="utf-8")
    requested: list[str] = []
    with serve(tmp_path, interval=0.25) as (server, _), sync_playwright() as pw:
        # every host but loopback goes to a proxy that is not there: blocked
        browser = pw.chromium.launch(
            executable_path=executable,
            headless=True,
            proxy={"server": "http://127.0.0.1:9", "bypass": "127.0.0.1"},
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requested.append(r.url))
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url))

            # an uninterrupted crawl, followed live from before its start to its end
            page.goto(f"{server.url}/jobs/whole")
            page.wait_for_selector('#live[data-connected="yes"]')
            done = run_cli("crawl", "whole", "-q", *QUICK_RETRIES, cwd=tmp_path)
            assert done.returncode == 4, done.stderr  # the site's edge cases
            status = _status(tmp_path, "whole")
            assert status["last_run"]["mode"] == "started"
            _shows_status(page, status)

            page.goto(f"{server.url}/jobs/{JOB}")  # before the crawl: no workspace yet
            page.wait_for_selector('#live[data-connected="yes"]')

            crawl = procs.popen([*CLI, "crawl", JOB, "-q", *SLOW], cwd=tmp_path)
            try:
                _wait("rows ok on the page", lambda: _ok(page) >= 10)
                before = page.screenshot()
                ok_before = _ok(page)
                _wait("the ok count moving", lambda: _ok(page) >= ok_before + 10)
                after = page.screenshot()
                assert before != after
                assert page.get_attribute("#rate-line", "points")  # pages/s drawn
                assert not page.is_hidden('#live [data-v="running"]')
                _wait("an ETA on the page", lambda: _eta(page) != DASH)
                assert re.fullmatch(r"(\d+h )?(\d+m )?\d+s", _eta(page))
            finally:
                crawl.send_signal(signal.SIGKILL)
                crawl.wait(30)

            resumed = run_cli("crawl", JOB, "-q", *QUICK_RETRIES, cwd=tmp_path)
            assert resumed.returncode in (0, 4), resumed.stderr  # 4: the site's edge cases
            status = _status(tmp_path, JOB)
            assert status["last_run"]["mode"] == "resumed"
            _shows_status(page, status)
            assert _eta(page) == DASH  # nothing left to fetch

            # a reload after all that reads the same (what the server renders)
            want = _figures(page)
            page.reload()
            page.wait_for_selector('#live[data-connected="yes"]')
            assert _figures(page) == want
            page.goto(f"{server.url}/")
            for job, rows in (
                (JOB, want["rows"]),
                ("whole", str(_status(tmp_path, "whole")["rows"]["total"])),
            ):
                assert page.text_content(f'tr[data-job="{job}"] [data-field="rows"]') == rows
        finally:
            browser.close()
    hosts = {urlsplit(u).hostname for u in requested}
    assert hosts == {"127.0.0.1"}, hosts
    assert not [u for u in failed if "/stream" not in u], failed  # streams end at a reload
