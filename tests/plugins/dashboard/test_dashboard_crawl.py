"""The dashboard over what the real CLI leaves: a crawl of the demo site (with its edge
cases: a 404, a 500, a page without its title) and a ship to the reference ingest
server; /metrics, the API and the page agree with ``framework status --json``. And the
command itself: it binds loopback and says so."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.plugins.dashboard.helpers import get, serve

pytestmark = pytest.mark.process

JOB = "fixture-cases"


def _status(root: Path) -> dict[str, Any]:
    r = run_cli("status", JOB, "--json", cwd=root)
    assert r.returncode in (0, 4), r.stderr
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def _samples(text: str, name: str) -> list[Any]:
    return [
        s
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
        if not s.name.endswith("_created")
    ]


def test_metrics_and_pages_agree_with_status_after_a_crawl_and_a_ship(
    make_site: Any, good_spec: Any, ingest_server: Any, tmp_path: Path
) -> None:
    site = make_site(cases=12)
    good_spec("cases", site.url, tmp_path)
    crawl = run_cli("crawl", JOB, "-q", cwd=tmp_path)
    assert crawl.returncode == 4, crawl.stderr  # the site's edge cases: rows in error
    ship = run_cli("ship", JOB, "--endpoint", ingest_server.url, cwd=tmp_path)
    assert ship.returncode == 0, ship.stderr
    status = _status(tmp_path)

    with serve(tmp_path) as (server, _):
        _, _, text = get(server.url + "/metrics")
        _, _, api = get(server.url + f"/api/jobs/{JOB}")
        _, _, page = get(server.url + f"/jobs/{JOB}")

    rows = {
        (s.labels["kind"], s.labels["state"]): int(s.value)
        for s in _samples(text, "framework_rows")
    }
    assert rows == {
        (kind, state): counts[state]
        for kind, counts in status["rows"]["by_kind"].items()
        for state in ("pending", "ok", "error")
    }
    items = {s.labels["state"]: int(s.value) for s in _samples(text, "framework_items")}
    assert items == {
        "complete": status["items"]["complete"],
        "incomplete": status["items"]["incomplete"],
    }
    counts = status["last_run"]["counts"]
    (pages,) = _samples(text, "framework_pages")
    assert pages.name == "framework_pages_total"
    assert int(pages.value) == counts["requests"]
    errors: Counter[str] = Counter()
    for s in _samples(text, "framework_errors"):
        assert s.name == "framework_errors_total"
        errors[s.labels["error"]] += int(s.value)
    assert dict(errors) == counts["errors_by_kind"]
    assert sum(errors.values()) == counts["errors"]
    ship_keys = {s.labels["outcome"]: int(s.value) for s in _samples(text, "framework_ship_keys")}
    assert ship_keys == status["plugins"]["ship"]["latest_outcomes"]
    attempts = {
        s.labels["outcome"]: int(s.value) for s in _samples(text, "framework_ship_attempts")
    }
    assert attempts == {"accepted": status["items"]["complete"]}
    answers = {s.labels["status"]: int(s.value) for s in _samples(text, "framework_ship_responses")}
    assert answers == {"201": status["items"]["complete"]}
    (running,) = _samples(text, "framework_crawl_running")
    assert running.value == 0

    # the API is status's report, with the last run summed over its workers (one here)
    report = json.loads(api)
    assert report["rows"] == status["rows"]
    assert report["state"] == status["state"]
    assert report["fill_rates"]["last_run_all_workers"] == status["fill_rates"]["last_run"]
    # and the page shows those figures
    total = status["rows"]["by_status"]
    for state in ("ok", "pending", "error"):
        assert f'data-v="{state}">{total[state]}<' in page
    for m in status["misbehaving"]:
        assert f'<td class="num">{m["row_id"]}</td>' in page
    assert f'data-ship="delivered">{status["plugins"]["ship"]["keys_delivered"]}<' in page
    assert f'data-answer="201">{status["items"]["complete"]}<' in page
    assert re.search(r'data-fill="detail\.title"><td>title</td><td class="num">100\.0%', page)


def test_the_command_binds_loopback_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "projects").mkdir()
    proc = procs.popen(
        [*CLI, "dashboard", "--port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "(read-only, bound to 127.0.0.1: local only)" in first, first
        url = re.search(r"http://127\.0\.0\.1:\d+/", first)
        assert url is not None
        deadline = time.monotonic() + 30
        while True:  # uvicorn accepts once its loop runs: a moment after the line
            try:
                status, _, body = get(url.group(0))
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        assert status == 200
        assert "no jobs under" in body
    finally:
        proc.terminate()
        proc.wait(30)
    bad = run_cli("dashboard", "--workspace-root", str(tmp_path / "missing"), cwd=tmp_path)
    assert bad.returncode == 2
    assert "no such folder" in bad.stderr
