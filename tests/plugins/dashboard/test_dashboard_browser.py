"""The job page in Debian's Chromium while a real crawl runs: the counts move (two
screenshots seconds apart differ), a ``kill -9`` and a resume later it shows what
``framework status --json`` says, and it does all that with every host but 127.0.0.1
unreachable (the page needs nothing from outside).

``FRAMEWORK_DASHBOARD_SHOTS=DIR`` also saves the job page and the list page there (how
the screenshots in docs/ are made). Skips without the plugin or Chromium unless
``FRAMEWORK_REQUIRE_BROWSER=1`` / CI.
"""

from __future__ import annotations

import json
import os
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
SLOW = ("-s", "CONCURRENT_REQUESTS=2", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=2")


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


def _ok(page: Any) -> int:
    text = _figures(page)["ok"]
    return int(text) if text.isdigit() else 0  # a dash until the workspace exists


def _kinds(page: Any) -> dict[tuple[str, str], str]:
    cells = page.eval_on_selector_all(
        "#kinds td[data-k]",
        "cells => cells.map(c => [c.dataset.k, c.dataset.s, c.textContent.trim()])",
    )
    return {(k, s): v for k, s, v in cells}


def test_the_job_page_follows_a_crawl_through_a_kill_and_a_resume(
    make_site: Any, good_spec: Any, tmp_path: Path
) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    site = make_site(cases=60, delay=0.02)
    good_spec("cases", site.url, tmp_path)
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
            finally:
                crawl.send_signal(signal.SIGKILL)
                crawl.wait(30)

            resumed = run_cli("crawl", JOB, "-q", cwd=tmp_path)
            assert resumed.returncode in (0, 4), resumed.stderr  # 4: the site's edge cases
            r = run_cli("status", JOB, "--json", cwd=tmp_path)
            status = json.loads(r.stdout)
            assert status["last_run"]["mode"] == "resumed"
            want = {
                "ok": str(status["rows"]["by_status"]["ok"]),
                "pending": str(status["rows"]["by_status"]["pending"]),
                "error": str(status["rows"]["by_status"]["error"]),
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
            _wait(
                "the sections re-read after the run's end",
                lambda: page.text_content('#sections [data-field="state"]') == status["state"],
            )
            _wait("the crawl shown stopped", lambda: page.is_hidden('#live [data-v="running"]'))

            # a reload after all that reads the same (what the server renders)
            page.reload()
            page.wait_for_selector('#live[data-connected="yes"]')
            assert _figures(page) == want
            shots = os.environ.get("FRAMEWORK_DASHBOARD_SHOTS")
            if shots:
                page.screenshot(path=str(Path(shots) / "dashboard-job.png"), full_page=True)
            page.goto(f"{server.url}/")
            row = page.text_content(f'tr[data-job="{JOB}"] [data-field="rows"]')
            assert row == want["rows"]
            if shots:
                page.screenshot(path=str(Path(shots) / "dashboard-jobs.png"), full_page=True)
        finally:
            browser.close()
    hosts = {urlsplit(u).hostname for u in requested}
    assert hosts == {"127.0.0.1"}, hosts
    assert not [u for u in failed if "/stream" not in u], failed  # streams end at a reload
