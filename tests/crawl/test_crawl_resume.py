"""Interruptions: kill -9 at random moments, faults with Retry-After, partial runs.

The acceptance of the resumable workspace: after any number of hard kills the final
items equal those of an uninterrupted crawl (same keys, same content hashes), no URL
whose row was already ok is fetched again, and no row is left pending.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from framework.demo.faults import Fault
from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, item_hashes, url_log
from tests.paths import REPO

EXIT_CHECKPOINT = 3
EXIT_HALTED = 4
# Slow enough that a crawl lasts a few seconds and a kill lands mid-run.
SLOW = ("-s", "CONCURRENT_REQUESTS=8", "-L", "WARNING")


def _crawl(spec: Path, ws: Path, *extra: str) -> subprocess.Popen[str]:
    return procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), *SLOW, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(ws: Path) -> int:
    try:
        with open(ws / "urls.jsonl", "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _kill_loop(spec: Path, ws: Path, rng: random.Random, kills: int) -> int:
    """Start the crawl, and once it is fetching, kill -9 it at a random moment; repeat.
    Return how many kills landed mid-crawl (a crawl that finished first does not count)."""
    landed = 0
    attempts = 0
    while landed < kills and attempts < kills * 3:
        attempts += 1
        before = _lines(ws)
        proc = _crawl(spec, ws)
        deadline = time.monotonic() + 60
        while proc.poll() is None and _lines(ws) == before and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.communicate(timeout=60)
    return landed


def _assert_no_ok_row_fetched_again(ws: Path) -> None:
    lines = url_log(ws)
    ok_at: dict[int, int] = {}
    by_url: dict[tuple[str, str], list[str]] = defaultdict(list)
    for n, line in enumerate(lines):
        row = line["row"]
        assert row not in ok_at, f"row {row} ({line['url']}) fetched again after it was ok"
        if line["outcome"] == "ok":
            ok_at[row] = n
        by_url[(line["method"], line["url"])].append(line["outcome"])
    for key, outcomes in by_url.items():
        if "ok" in outcomes:
            assert outcomes.index("ok") == len(outcomes) - 1, (key, outcomes)


def _pending(ws: Path) -> int:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return sum(v.get(RowStatus.PENDING, 0) for v in w.store.row_counts().values())


@pytest.mark.kill
@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing_and_fetches_nothing_twice(
    make_site, good_spec, tmp_path, crawl_cli
):
    site = make_site(delay=0.1)
    spec = good_spec("cases", site.url, tmp_path)
    reference = tmp_path / "reference"
    r = crawl_cli("crawl", str(spec), "--workspace", str(reference), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]

    ws = tmp_path / "killed"
    landed = _kill_loop(spec, ws, random.Random(20261129), kills=5)
    assert landed >= 5
    final = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert final.returncode == EXIT_HALTED, final.stderr[-2000:]

    assert item_hashes(ws) == item_hashes(reference)
    assert _pending(ws) == 0
    _assert_no_ok_row_fetched_again(ws)
    kinds = [e["event"] for e in events(ws)]
    assert kinds.count("run_started") == 1
    assert kinds.count("run_resumed") >= 5


@pytest.mark.kill
@pytest.mark.slow
def test_rate_limits_and_a_failing_subtab_survive_kills(make_site, good_spec, tmp_path, crawl_cli):
    faults = [
        Fault("/cases?page=3", 429, times=2, retry_after=1),
        Fault("/cases/C2024-0010", 503, times=1, retry_after=1, retry_after_date=True),
        Fault("/cases/C2024-0020/tab/rulings", 500),  # always
    ]
    site = make_site(delay=0.1, faults=faults)
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    assert _kill_loop(spec, ws, random.Random(7), kills=5) >= 5
    final = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    # the always-failing sub-tab (and the site's broken pages) need a human: exit 4
    assert final.returncode == EXIT_HALTED, final.stderr[-2000:]
    assert "rows in error" in final.stderr
    assert _pending(ws) == 0
    _assert_no_ok_row_fetched_again(ws)

    truth = site.truth
    hashes = item_hashes(ws)
    assert {k for k, (_, complete) in hashes.items() if not complete} == {
        f"sipp-demo:{i}" for i in truth.incomplete
    }
    assert "C2024-0020" in truth.incomplete

    with Workspace.open(ws, create=False, readonly=True) as w:
        failing = next(
            r
            for r in w.store.iter_rows(status=RowStatus.ERROR)
            if r.url.endswith("0020/tab/rulings")
        )
        assert failing.attempts == 3
        history = w.store.attempts(failing.id)
        assert [a["error_kind"] for a in history] == ["http_5xx"] * 3
        assert [a["http_status"] for a in history] == [500] * 3
        # the rate-limited pages were retried and are ok; their 429/503 attempts are typed
        for path in ("/cases?page=3", "/cases/C2024-0010"):
            row = next(r for r in w.store.iter_rows() if r.url == site.url + path)
            assert row.status is RowStatus.OK
            kinds = [a["error_kind"] for a in w.store.attempts(row.id)]
            assert "rate_limited" in kinds

    # Retry-After was honoured: the retry of page 3 came at least 1 s after its 429
    page3 = [line for line in url_log(ws) if line["url"].endswith("/cases?page=3")]
    stamps = [line["time"] for line in page3]
    assert len(page3) >= 2
    from datetime import datetime

    first, last = datetime.fromisoformat(stamps[0]), datetime.fromisoformat(stamps[-1])
    assert (last - first).total_seconds() >= 0.9


@pytest.mark.process
def test_status_after_a_partial_run_says_exactly_what_is_done(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(ws), "--max-requests", "40", "-L", "WARNING"
    )
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    status = json.loads(crawl_cli("status", "x", "--workspace", str(ws), "--json").stdout)
    lines = url_log(ws)
    assert len(lines) == 40
    # done and pending, checked against the URL log and the truth of the site
    ok_rows = {line["row"] for line in lines if line["outcome"] == "ok"}
    assert status["rows"]["by_status"]["ok"] == len(ok_rows)
    assert (
        status["rows"]["total"]
        == status["rows"]["by_status"]["ok"]
        + status["rows"]["by_status"]["pending"]
        + status["rows"]["by_status"]["error"]
    )
    assert status["queue"]["pending"] > 0
    assert status["done"] is False
    assert status["last_run"]["reason"] == "max_requests"
    broken = {b.url for b in site.truth.broken}
    for m in status["misbehaving"]:
        assert m["url"] in broken
    # resuming finishes the job and the status then names every broken URL
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED
    status = json.loads(crawl_cli("status", "x", "--workspace", str(ws), "--json").stdout)
    assert {m["url"] for m in status["misbehaving"]} == broken
    assert status["queue"]["pending"] == 0
    _assert_no_ok_row_fetched_again(ws)


@pytest.mark.process
def test_stop_at_first_429_is_a_checkpoint(make_site, good_spec, tmp_path, crawl_cli):
    site = make_site(faults=[Fault("/cases?page=2", 429, retry_after=1)])
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--stop-on-429", "-L", "WARNING")
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    assert events(ws)[-1]["reason"] == "rate_limited"


@pytest.mark.process
def test_retry_after_over_the_cap_stops_instead_of_sleeping(
    make_site, good_spec, tmp_path, crawl_cli
):
    site = make_site(faults=[Fault("/cases?page=2", 503, retry_after=3600)])
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    assert site.hits("/cases?page=2") == 1  # stopped at the demand: no retry slept for
    assert "over the cap" in r.stderr
    assert _pending(ws) > 0
    # run again at once (a cron loop would): the deadline was kept in the workspace, so
    # nothing is sent to the site that asked to wait an hour
    lines, hits = len(url_log(ws)), site.hits("/cases?page=2")
    again = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert again.returncode == EXIT_CHECKPOINT, again.stderr[-2000:]
    assert "asked not to be called before" in again.stderr
    assert len(url_log(ws)) == lines
    assert site.hits("/cases?page=2") == hits
    assert events(ws)[-2]["event"] == "run_deferred"


@pytest.mark.slow
@pytest.mark.process
def test_a_retry_after_is_honoured_by_the_next_run_too(make_site, good_spec, tmp_path, crawl_cli):
    site = make_site(faults=[Fault("/cases?page=2", 429, times=1, retry_after=6)])
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--stop-on-429", "-L", "WARNING")
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]  # finished; the broken pages remain
    page2 = [line for line in url_log(ws) if line["url"].endswith("/cases?page=2")]
    assert [line["status"] for line in page2] == [429, 200]
    from datetime import datetime

    first, second = (datetime.fromisoformat(line["time"]) for line in page2)
    # the 429's line is written when its answer arrived; the retry's when its answer did
    assert (second - first).total_seconds() >= 5.5


@pytest.mark.process
def test_error_rate_breaker_halts(make_site, good_spec, tmp_path, crawl_cli):
    site = make_site(faults=[Fault("/cases/*", 500)])
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(ws), "-s", "FRAMEWORK_ERROR_RATE_WINDOW=20",
        "-L", "WARNING",
    )  # fmt: skip
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]
    assert "error-rate breaker" in r.stderr
    assert events(ws)[-1]["reason"] == "error_rate"
    # said once, not again for every answer in flight while the crawl closes
    assert r.stderr.count("over the last 20 requests: stopping") == 1, r.stderr[-3000:]


@pytest.mark.kill
def test_sigterm_is_a_clean_checkpoint(make_site, good_spec, tmp_path):
    site = make_site(delay=0.05)
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    proc = _crawl(spec, ws)
    deadline = time.monotonic() + 60
    while _lines(ws) == 0 and time.monotonic() < deadline:  # the crawl is fetching
        time.sleep(0.05)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CHECKPOINT, err[-2000:]
    last = events(ws)[-1]
    assert last["event"] == "run_finished"
    assert last["reason"] == "shutdown"


@pytest.mark.process
def test_requeue_errors_brings_rows_back(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    r = crawl_cli("requeue", "x", "--workspace", str(ws), "--errors", "--kind", "detail")
    assert r.returncode == 0, r.stderr
    assert _pending(ws) == 2  # the 404 page and the untitled page
    before = len(url_log(ws))
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED
    again = url_log(ws)[before:]
    assert sorted(line["url"] for line in again) == sorted(
        b.url for b in site.truth.broken if b.kind == "detail"
    )


@pytest.mark.kill
def test_a_second_crawl_on_the_same_workspace_leaves_without_touching_it(
    make_site, good_spec, tmp_path, crawl_cli
):
    site = make_site(delay=0.2)
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    first = _crawl(spec, ws)
    try:
        deadline = time.monotonic() + 60
        while _lines(ws) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _lines(ws) > 0
        second = crawl_cli("crawl", str(spec), "--workspace", str(ws))
        assert second.returncode == EXIT_CHECKPOINT, second.stderr[-2000:]
        assert f"held by pid {first.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None
        # the second crawl left without a word in the event log
        assert [e["event"] for e in events(ws)].count("run_started") == 1
        assert not any(e["event"] == "run_finished" for e in events(ws))
    finally:
        first.kill()
        first.wait()


def _scrapy(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`scrapy <args>` in the project at ``root``, with this checkout's framework."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FRAMEWORK_HOME": str(root),
        "SCRAPY_SETTINGS_MODULE": "framework.scrapy_settings",
    }
    return procs.run(
        [sys.executable, "-c", "from scrapy.cmdline import execute; execute()", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.process
def test_a_second_scrapy_crawl_is_one_line_and_exit_3(site, good_spec, tmp_path):
    good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    with Workspace.open(ws) as held, held.lock("crawl"):  # a crawl is running
        second = _scrapy(tmp_path, "crawl", "fixture-cases", "-s", f"JOBDIR={ws}", "-L", "WARNING")
    assert second.returncode == EXIT_CHECKPOINT, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert "Task exception was never retrieved" not in second.stderr
    assert second.stderr.strip().splitlines() == [
        f"{ws / 'crawl.lock'} is held by pid {os.getpid()} on {socket.gethostname()} since "
        + second.stderr.split(" since ", 1)[1].strip()
    ]
    assert not (ws / "urls.jsonl").exists()


@pytest.mark.process
@pytest.mark.parametrize("command", ["framework", "scrapy"])
def test_an_unknown_log_level_is_a_one_line_usage_error(
    site, good_spec, tmp_path, crawl_cli, command
):
    spec = good_spec("cases", site.url, tmp_path)
    if command == "framework":
        r = crawl_cli("crawl", str(spec), "--workspace", str(tmp_path / "ws"), "-L", "LOUD")
    else:
        r = _scrapy(tmp_path, "crawl", "fixture-cases", "-L", "LOUD")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert (
        "-L/--loglevel expects one of CRITICAL, ERROR, WARNING, INFO, DEBUG, got 'LOUD'" in lines[0]
    )
    assert not (tmp_path / "ws").exists()
    assert not (tmp_path / "var").exists()


@pytest.mark.process
def test_a_lower_case_log_level_is_fine(site, good_spec, tmp_path, crawl_cli):
    spec = good_spec("cases", site.url, tmp_path)
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(tmp_path / "ws"), "-L", "warning",
        "--max-requests", "3",
    )  # fmt: skip
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    assert "INFO" not in r.stderr
