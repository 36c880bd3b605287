"""The dashboard over what the real CLI leaves: crawls of the demo site (with its edge
cases: a 404, a 500, a page without its title, a page whose amount lost its class) and
ships; /metrics, the API and the page agree with ``framework status --json``.

* a crawl with a rule that holds records, then a ship to the reference ingest server:
  rows, items, errors, fill rates (last run and all items), drift, review holds and
  the door's answers;
* two ships to an endpoint that rejects one item: sent, skipped, rejected and the last
  attempt;
* a crawl stopped by a Retry-After over the cap and one stopped by a soft ban: the
  deferred host (and ``framework_deferrals_total``) and the blocked URL;
* ``crawl --processes 2``: while it runs, pages/s, items/s and the ETA; at its end, every
  worker's findings summed;
* the command itself: it binds loopback and says so."""

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

from framework.demo.faults import Fault
from framework.plugins import METRICS_HOST, serve_metrics
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.fixtures.ship import Fault as Answer
from tests.fixtures.ship import FaultEndpoint
from tests.fixtures.wait import wait_for
from tests.plugins.dashboard.helpers import (
    assert_every_worker_counted,
    by_label,
    fill_cells,
    get,
    pct,
    samples,
    serve,
    url_lines,
    worker_ends,
)

pytestmark = pytest.mark.process

JOB = "fixture-cases"
DASH = "\N{EN DASH}"
SLOW = ("-s", "CONCURRENT_REQUESTS=2", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=2")
# the edge cases' 500 retried at once, not after the default backoff
QUICK_RETRIES = ("-s", "FRAMEWORK_RETRY_BACKOFF_BASE=0.05", "-s", "FRAMEWORK_RETRY_BACKOFF_MAX=0.1")
# amounts over 50,000,000 break a rule: those records are held (three of the first 12)
HOLDING = ("      min: 0\n", "      min: 0\n      max: 50000000\n")


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
    spec = good_spec("cases", site.url, tmp_path)
    spec.write_text(spec.read_text(encoding="utf-8").replace(*HOLDING), encoding="utf-8")
    crawl = run_cli("crawl", JOB, "-q", *QUICK_RETRIES, cwd=tmp_path)
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
    # fill rates: the last run's records (held ones too) and all stored items, per field
    fill = status["fill_rates"]
    last, stored = fill["last_run"]["detail"], fill["stored"]["detail"]
    assert last["records"] > stored["records"]  # the held records are not items
    assert f"{last['records']} / {stored['records']} records" in page
    cells = fill_cells(page)
    assert set(cells) == {("detail", f) for f in {*last["fields"], *stored["fields"]}}
    for (_, name), shown in cells.items():
        assert shown == (pct(last["fields"].get(name)), pct(stored["fields"].get(name)))
    assert cells[("detail", "documents")][0] == DASH  # a sub-tab: in items, not in records
    assert cells[("detail", "room")] != (DASH, DASH)
    # drift: the page whose amount lost its class matched the fallback selector
    assert status["drift"]
    for d in status["drift"]:
        assert d["reason"] == "fallback"
        shown = f"<li>{d['kind']}.{d['field']}: matched fallback {d['selectors'][-1]} "
        assert f"{shown}{d['count']}x" in page
        for example in d["examples"]:
            assert example in page
    # review holds: every held record by status and by the rule it broke
    held = status["held"]
    assert held["total"] == 3
    assert held["by_rule"] == {"amount: max": 3}
    assert f'data-field="held">{held["total"]}</span>' in page
    for why, n in held["by_status"].items():
        assert f"<li>{why}: {n}</li>" in page
    for rule, n in held["by_rule"].items():
        assert f"<li>rule {rule}: {n}</li>" in page


def test_the_ship_side_shows_sent_skipped_rejected_and_the_last_attempt(
    make_site: Any, good_spec: Any, fault_endpoint: FaultEndpoint, tmp_path: Path
) -> None:
    site = make_site(cases=12)
    good_spec("cases", site.url, tmp_path)
    assert run_cli("crawl", JOB, "-q", *QUICK_RETRIES, cwd=tmp_path).returncode == 4
    ship = ("ship", JOB, "--endpoint", fault_endpoint.url, "--batch-size", "1")
    first = run_cli(*ship, "--max-items", "2", cwd=tmp_path)
    assert first.returncode in (0, 3), first.stderr  # 3: stopped at --max-items
    # the next item sent is refused: a rejection waits for a human (exit 4)
    refusal = {"title": "Unprocessable", "status": 422, "detail": "amount: not a number"}
    fault_endpoint.script("/v1/items", Answer(status=422, body=refusal))
    second = run_cli(*ship, cwd=tmp_path)
    assert second.returncode == 4, second.stderr
    status = _status(tmp_path)
    side = status["plugins"]["ship"]
    counts = side["last_run"]["counts"]
    complete = status["items"]["complete"]
    assert counts["skipped"] == 2  # delivered by the first run
    assert counts["rejected"] == 1
    sent = sum(counts.get(k, 0) for k in ("accepted", "updated", "duplicate"))
    assert sent == complete - 3
    log = [
        json.loads(line)
        for line in (tmp_path / "var" / JOB / "ship-log.jsonl").read_text().splitlines()
    ]
    last = log[-1]

    with serve(tmp_path) as (server, _):
        _, _, text = get(server.url + "/metrics")
        _, _, page = get(server.url + f"/jobs/{JOB}")

    for key, value in (
        ("sent", sent),
        ("skipped", 2),
        ("rejected", 1),
        ("delivered", side["keys_delivered"]),
        ("complete", complete),
    ):
        assert f'data-ship="{key}">{value}<' in page
    assert f"last ship run: {side['last_run']['time']}, " in page
    assert f"(exit {side['last_run']['exit_code']})" in page
    assert side["last_run"]["exit_code"] == 4
    shown = (
        f"<p>last attempt: {last['time']} {last['dedupe_key']} \N{RIGHTWARDS ARROW} "
        f"{last['outcome']} (HTTP {last['http_status']})</p>"
    )
    assert shown in page
    for outcome, n in side["latest_outcomes"].items():
        assert f'data-outcome="{outcome}">{n}<' in page
    assert side["latest_outcomes"] == {"accepted": complete - 1, "rejected": 1}
    answers = Counter(str(line.get("http_status")) for line in log)
    assert answers == {"201": complete - 1, "422": 1}
    for code, n in answers.items():
        assert f'data-answer="{code}">{n}<' in page
    assert by_label(text, "framework_ship_keys", "outcome") == side["latest_outcomes"]
    attempts = by_label(text, "framework_ship_attempts_total", "outcome")
    assert attempts == {"accepted": complete - 1, "rejected": 1}
    assert by_label(text, "framework_ship_responses_total", "status") == answers


def test_a_retry_after_and_a_soft_ban_show_where_the_crawls_stopped(
    make_site: Any, good_spec: Any, tmp_path: Path
) -> None:
    """One job's site asks (429, Retry-After an hour: over the cap) not to be called; the
    other's answers a page with a status its spec calls a soft ban. Both crawls stop
    (exit 3); the page and /metrics show the deferred host and the blocked URL."""
    deferring = make_site(cases=12, faults=[Fault("/cases?page=2", 429, retry_after=3600)])
    good_spec("cases", deferring.url, tmp_path)
    banning = make_site(cases=12, faults=[Fault("/cases/C2024-0003", 403)])
    spec = good_spec("cases", banning.url, tmp_path / "b").read_text(encoding="utf-8")
    banned = tmp_path / "projects" / "banned" / "job.yaml"
    banned.parent.mkdir()
    banned.write_text(
        spec.replace(f"name: {JOB}", "name: banned") + "blocked: {status: 403, name: forbidden}\n",
        encoding="utf-8",
    )
    for job in (JOB, "banned"):
        crawl = run_cli("crawl", job, "-q", cwd=tmp_path)
        assert crawl.returncode == 3, crawl.stderr
    deferred = _status(tmp_path)
    (deferral,) = deferred["deferrals"]
    host = deferring.url.removeprefix("http://")
    assert deferral["host"] == host
    assert 3000 < deferral["seconds_left"] <= 3600
    r = run_cli("status", "banned", "--json", cwd=tmp_path)
    blocked = json.loads(r.stdout)["last_run"]["blocked"]
    assert blocked["rule"] == "forbidden"
    assert blocked["url"] == f"{banning.url}/cases/C2024-0003"
    limited = [x for x in url_lines(tmp_path / "var" / JOB) if x["outcome"] == "rate_limited"]
    assert len(limited) == 1  # the one answer that deferred the host
    bans = [x for x in url_lines(tmp_path / "var" / "banned") if x["outcome"] == "blocked"]
    assert bans

    with serve(tmp_path) as (server, _):
        _, _, text = get(server.url + "/metrics")
        _, _, page = get(server.url + f"/jobs/{JOB}")
        _, _, banned_page = get(server.url + "/jobs/banned")

    assert "<h3>Deferred hosts</h3>" in page
    assert (f"<li>{host} asked not to be called before {deferral['until']} (") in page
    assert by_label(text, "framework_deferred_hosts", "job") == {JOB: 1, "banned": 0}
    (left,) = samples(text, "framework_deferral_seconds", job=JOB, host=host)
    assert 3000 < left.value <= 3600
    assert by_label(text, "framework_deferrals_total", "host", job=JOB) == {host: 1}
    assert by_label(text, "framework_deferrals_total", "job") == {JOB: 1}  # none for banned
    assert by_label(text, "framework_errors_total", "error", job=JOB)["rate_limited"] == 1
    # a crawl's or a ship's --metrics-port serves the same counter
    handle = serve_metrics(JOB, tmp_path / "var" / JOB, METRICS_HOST, 0)
    try:
        own = get(f"http://{METRICS_HOST}:{handle.port}/metrics")[2]
    finally:
        handle.stop()
    assert by_label(own, "framework_deferrals_total", "host") == {host: 1}

    assert (
        f'<p class="warn">blocked: {blocked["url"]} matched the rule forbidden (status 403)</p>'
    ) in banned_page
    assert "<h3>Deferred hosts</h3>" not in banned_page
    errors = samples(text, "framework_errors_total", job="banned", error="blocked")
    assert [(s.labels["kind"], s.value) for s in errors] == [("detail", len(bans))]


@pytest.mark.slow
def test_two_workers_live_then_every_workers_findings_summed(
    make_site: Any, good_spec: Any, tmp_path: Path
) -> None:
    """``crawl --processes 2`` on a workspace folder: while it runs, the dashboard shows
    it running with pages/s, items/s and an ETA (on /metrics and on the page); at its
    end, status's totals and every worker's findings summed."""
    site = make_site(cases=24, delay=0.05)
    good_spec("cases", site.url, tmp_path)
    seen: dict[str, Any] = {}
    with serve(tmp_path, interval=0.1) as (server, _):
        crawl = procs.popen(
            [*CLI, "crawl", JOB, "-q", "--processes", "2", *SLOW, *QUICK_RETRIES],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def moving() -> bool:
                _, _, text = get(server.url + "/metrics")
                _, _, page = get(server.url + f"/jobs/{JOB}")
                figures = {
                    name: [s.value for s in samples(text, name, job=JOB)]
                    for name in (
                        "framework_crawl_running",
                        "framework_pages_per_second",
                        "framework_items_per_second",
                        "framework_eta_seconds",
                    )
                }
                for name, values in figures.items():
                    if values and values[0] > 0:
                        seen[name] = values[0]
                eta = re.search(r'data-v="eta">([^<]*)<', page)
                if eta and eta.group(1) != DASH:
                    seen["page ETA"] = eta.group(1)
                if 'data-v="running" hidden' not in page:
                    seen["page running"] = True
                return len(seen) == 6

            def alive() -> None:
                assert crawl.poll() is None, f"the crawl ended first; seen {seen}"

            wait_for(moving, 120, "pages/s, items/s and an ETA during the crawl", alive)
            _, err = crawl.communicate(timeout=240)
        finally:
            if crawl.poll() is None:
                crawl.kill()
                crawl.communicate(timeout=30)
        assert crawl.returncode == 4, err  # the site's edge cases
        assert re.fullmatch(r"(\d+h )?(\d+m )?\d+s", seen["page ETA"])
        status = _status(tmp_path)
        assert status["workers"]["live"] == 0
        ws = tmp_path / "var" / JOB
        assert_every_worker_counted(server.url, JOB, status, worker_ends(ws), url_lines(ws))
        _, _, after = get(server.url + "/metrics")
    assert samples(after, "framework_eta_seconds", job=JOB) == []  # nothing left to fetch


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
