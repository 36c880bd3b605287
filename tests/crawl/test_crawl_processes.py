"""`framework crawl JOB --processes N`: workers sharing one workspace by leases.

* one worker killed by SIGKILL mid-crawl: the other finishes the job (the dead worker's
  rows are taken over), a resume has nothing left, the items equal a one-process crawl
  field by field, and the site's own counters show no page fetched twice beyond the
  requests in flight at the kill (the URL log: never after its row was ok);
* one worker stopped (SIGSTOP) past its lease: the other takes its rows over, and the
  stopped worker, resumed, cannot commit them (the fence): its outcomes are refused,
  counted and logged, and never overwrite the newer ones.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, url_log, workspace_items

EXIT_OK = 0
EXIT_CHECKPOINT = 3
IN_FLIGHT = 4  # CONCURRENT_REQUESTS of each worker in these tests
GROUP = 4  # FRAMEWORK_COMMIT_BATCH: responses that may wait for their commit at a kill
QUIET = ("-L", "WARNING")


def _multi(spec: Path, ws: Path, lease: float) -> subprocess.Popen[str]:
    return procs.popen(
        [
            *CLI,
            "crawl",
            str(spec),
            "--workspace",
            str(ws),
            "--processes",
            "2",
            "-s",
            f"FRAMEWORK_LEASE_SECONDS={lease}",
            "-s",
            f"CONCURRENT_REQUESTS={IN_FLIGHT}",
            "-s",
            f"FRAMEWORK_COMMIT_BATCH={GROUP}",
            *QUIET,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _cases(
    make_site: Any, good_spec: Any, tmp_path: Path, cases: int, delay: float
) -> tuple[Any, Path]:
    """The demo site with ``cases`` cases, each page ``delay`` s late, and its job spec."""
    site = make_site(cases=cases, delay=delay, edge_cases=False)
    return site, good_spec("cases", site.url, tmp_path)


def _crawl_to_the_end(crawl_cli: Any, spec: Path, ws: Path) -> None:
    """A single-process crawl (or resume) that must finish the job."""
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), *QUIET)
    assert r.returncode == EXIT_OK, r.stderr[-2000:]


def _exits(proc: subprocess.Popen[str], code: int, timeout: float) -> None:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == code, err[-3000:]


def _lines(ws: Path) -> int:
    try:
        with open(ws / "urls.jsonl", "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _running_workers(ws: Path) -> dict[int, int]:
    """worker id -> pid of the workers registered and not stopped."""
    try:
        with sqlite3.connect(f"file:{ws / 'state.sqlite'}?mode=ro", uri=True) as conn:
            return dict(conn.execute("SELECT id, pid FROM workers WHERE stopped_at IS NULL"))
    except sqlite3.Error:
        return {}


def _leased_by(ws: Path, worker: int) -> int:
    with sqlite3.connect(f"file:{ws / 'state.sqlite'}?mode=ro", uri=True) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM rows WHERE lease_owner = ? AND status != 'ok'", (worker,)
        ).fetchone()
    return int(n)


def _wait_fetching(proc: subprocess.Popen[str], ws: Path, lines: int) -> dict[int, int]:
    """Wait until both workers run and the URL log has ``lines`` lines."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        found = _running_workers(ws)
        if len(found) == 2 and _lines(ws) >= lines:
            return found
        time.sleep(0.05)
    raise AssertionError("the workers did not start fetching")


def _pending(ws: Path) -> int:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return sum(v.get(RowStatus.PENDING, 0) for v in w.store.row_counts().values())


def _assert_no_ok_row_fetched_again(lines: list[dict[str, Any]]) -> None:
    ok_rows: set[int] = set()
    for line in lines:
        row = line["row"]
        assert row not in ok_rows, f"row {row} ({line['url']}) fetched again after it was ok"
        if line["outcome"] == "ok":
            ok_rows.add(row)


def _hits(site: Any) -> Counter[str]:
    return Counter(
        {
            f"{r['method']} {r['target']}": r["count"]
            for r in site.stats()["requests"]
            if r["target"] != "/robots.txt"  # each process reads it once
        }
    )


@pytest.mark.kill
@pytest.mark.slow
def test_a_worker_killed_mid_crawl_leaves_the_other_to_finish(
    make_site, good_spec, tmp_path, crawl_cli
):
    site, spec = _cases(make_site, good_spec, tmp_path, cases=120, delay=0.05)
    reference = tmp_path / "reference"
    _crawl_to_the_end(crawl_cli, spec, reference)
    before = _hits(site)

    ws = tmp_path / "two"
    proc = _multi(spec, ws, lease=3.0)
    found = _wait_fetching(proc, ws, lines=40)
    victim_id, victim = sorted(found.items())[0]
    os.kill(victim, signal.SIGKILL)
    # the killed worker was interrupted: the parent says "run again" (3), although the
    # other worker took the dead one's rows and finished the job
    _exits(proc, EXIT_CHECKPOINT, timeout=240)
    assert _pending(ws) == 0
    finished = [e for e in events(ws) if e["event"] == "run_finished"]
    assert [e["worker"] for e in finished] == [w for w in sorted(found) if w != victim_id]

    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json", cwd=tmp_path)
    report = json.loads(status.stdout)
    listed = {w["pid"]: w for w in report["workers"]["list"]}
    assert set(found.values()) <= set(listed)
    assert report["workers"]["live"] == 0
    assert listed[victim]["state"] != "running"

    _crawl_to_the_end(crawl_cli, spec, ws)
    assert workspace_items(ws) == workspace_items(reference)

    lines = url_log(ws)
    _assert_no_ok_row_fetched_again(lines)
    # both fetched: rows a worker finds are not all kept by it (the other would idle)
    assert {line.get("worker") for line in lines} >= set(found)
    fetched = _hits(site) - before
    assert set(fetched) == set(before)  # every page of the site, by both crawls
    repeated = {page: n for page, n in fetched.items() if n > 1}
    # only what was in flight (or waiting for its group commit) at the kill
    assert all(n == 2 for n in repeated.values()), repeated
    assert len(repeated) <= IN_FLIGHT + GROUP, repeated


@pytest.mark.process
@pytest.mark.slow
def test_a_worker_paused_past_its_lease_cannot_commit_what_was_taken_over(
    make_site, good_spec, tmp_path, crawl_cli
):
    _, spec = _cases(make_site, good_spec, tmp_path, cases=60, delay=0.3)
    reference = tmp_path / "reference"
    _crawl_to_the_end(crawl_cli, spec, reference)

    ws = tmp_path / "two"
    lease = 1.5
    proc = _multi(spec, ws, lease=lease)
    found = _wait_fetching(proc, ws, lines=20)
    paused_id, paused = next((w, pid) for w, pid in sorted(found.items()) if _leased_by(ws, w))
    os.kill(paused, signal.SIGSTOP)
    try:
        time.sleep(4 * lease)  # its leases expire; the other worker takes its rows
    finally:
        os.kill(paused, signal.SIGCONT)
    _exits(proc, EXIT_OK, timeout=240)
    assert workspace_items(ws) == workspace_items(reference)

    lines = url_log(ws)
    fenced = [line for line in lines if line["outcome"] == "fenced"]
    assert fenced, "the paused worker's late outcomes were not refused"
    assert {line["worker"] for line in fenced} == {paused_id}
    counted = {
        e["worker"]: e["counts"]["fenced"] for e in events(ws) if e["event"] == "run_finished"
    }
    assert counted[paused_id] == len(fenced)
    refused = [e for e in events(ws) if e["event"] == "outcome_refused"]
    assert sorted(e["row"] for e in refused) == sorted(line["row"] for line in fenced)
    # the newer outcome stands: one attempt per fenced row, committed by the other worker
    attempts: dict[int, list[str]] = defaultdict(list)
    with Workspace.open(ws, create=False, readonly=True) as w:
        for line in fenced:
            row = w.store.get_row(line["row"])
            assert row is not None
            assert row.status is RowStatus.OK
            attempts[row.id] = [a["outcome"] for a in w.store.attempts(row.id)]
    assert all(history == ["ok"] for history in attempts.values()), attempts
    _assert_no_ok_row_fetched_again([line for line in lines if line["outcome"] != "fenced"])


@pytest.mark.kill
@pytest.mark.slow
def test_sigterm_to_the_parent_stops_every_worker_as_a_checkpoint(
    make_site, good_spec, tmp_path, crawl_cli
):
    _, spec = _cases(make_site, good_spec, tmp_path, cases=60, delay=0.2)
    ws = tmp_path / "two"
    proc = _multi(spec, ws, lease=30.0)
    found = _wait_fetching(proc, ws, lines=10)
    proc.send_signal(signal.SIGTERM)
    _exits(proc, EXIT_CHECKPOINT, timeout=120)
    reasons = {e["worker"]: e["reason"] for e in events(ws) if e["event"] == "run_finished"}
    assert reasons == dict.fromkeys(found, "shutdown")
    assert _running_workers(ws) == {}  # both stopped cleanly: their leases released
    assert _pending(ws) > 0
    # a single-process resume takes over at once (no lease to wait for) and finishes
    _crawl_to_the_end(crawl_cli, spec, ws)
    assert _pending(ws) == 0
    _assert_no_ok_row_fetched_again(url_log(ws))
