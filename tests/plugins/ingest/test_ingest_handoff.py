"""The handoff to the application: claim is atomic, done/failed finish, the reaper requeues,
through the library and through the real ``framework ingest`` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import requests
from framework_ingest import handoff
from framework_ingest.db import open_backend

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item

FRAMEWORK = str(Path(sys.executable).parent / "framework")


def _store(s: IngestServer, n: int) -> list[str]:
    items = [make_item(f"{i:04d}", source_type="src" if i % 2 else "other") for i in range(n)]
    for start in range(0, n, 100):
        r = requests.post(f"{s.url}/v1/items/batch", json=items[start : start + 100], timeout=30)
        assert r.status_code == 200
    return sorted(i["dedupe_key"] for i in items)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [FRAMEWORK, "ingest", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_concurrent_claimers_never_get_the_same_row(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    keys = _store(s, 300)
    claimed: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def worker(n: int) -> None:
        backend = open_backend(s.db_url)  # its own connections and locks, like another process
        try:
            start.wait()
            while batch := handoff.claim(backend, 7):
                claimed[n].extend(i["dedupe_key"] for i in batch)
        finally:
            backend.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    everything = [k for c in claimed for k in c]
    assert len(everything) == len(set(everything))  # nobody got a row twice
    assert sorted(everything) == keys
    rows = s.rows()
    assert {r["status"] for r in rows} == {"running"}
    assert {r["attempts"] for r in rows} == {1}


@pytest.mark.process
def test_claim_done_failed_reap_through_the_cli(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    _store(s, 12)

    children = [
        procs.popen(
            [FRAMEWORK, "ingest", "claim", "--db", s.db_url, "--limit", "4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in children]
    assert [p.returncode for p in children] == [0, 0], outs
    first, second = (_lines(o[0]) for o in outs)
    assert len(first) == len(second) == 4
    assert not {i["dedupe_key"] for i in first} & {i["dedupe_key"] for i in second}
    assert all(i["status"] == "running" and i["attempts"] == 1 for i in first + second)
    assert "data" in first[0]

    only_src = cli("claim", "--db", s.db_url, "--limit", "50", "--source-type", "src")
    assert {i["source_type"] for i in _lines(only_src.stdout)} == {"src"}

    a, b, c = (i["dedupe_key"] for i in first[:3])
    lease = first[0]["claim_id"]
    assert {i["claim_id"] for i in first} == {lease}  # one claim, one fencing token
    assert second[0]["claim_id"] != lease
    r = cli("done", "--db", s.db_url, "--claim", lease, a, b)
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout) == [
        {"dedupe_key": a, "outcome": "done"},
        {"dedupe_key": b, "outcome": "done"},
    ]
    r = cli("failed", "--db", s.db_url, "--claim", lease, c, "--reason", "parser broke")
    assert _lines(r.stdout) == [{"dedupe_key": c, "outcome": "failed"}]
    # finished already by this claim, or unknown: a skip, not a change
    r = cli("done", "--db", s.db_url, "--claim", lease, a, "other:nope")
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout) == [
        {"dedupe_key": a, "outcome": "skipped"},
        {"dedupe_key": "other:nope", "outcome": "skipped"},
    ]
    assert s.row(c)["last_error"] == "parser broke"  # type: ignore[index]

    running_before = {r["dedupe_key"]: r["attempts"] for r in s.rows() if r["status"] == "running"}
    assert running_before
    r = cli("reap", "--db", s.db_url, "--older-than", "3600")  # nothing is that old
    assert (r.returncode, r.stdout) == (0, "")
    r = cli("reap", "--db", s.db_url, "--older-than", "0")
    assert r.returncode == 0, r.stderr
    assert sorted(x["dedupe_key"] for x in _lines(r.stdout)) == sorted(running_before)
    after = {r["dedupe_key"]: r for r in s.rows()}
    for key, attempts in running_before.items():
        assert after[key]["status"] == "queued"
        assert after[key]["attempts"] == attempts  # the reaper never touches attempts
        assert after[key]["claimed_at"] is None
    assert (after[a]["status"], after[c]["status"]) == ("done", "failed")

    again = _lines(cli("claim", "--db", s.db_url, "--limit", "100").stdout)
    assert {i["dedupe_key"] for i in again} == set(running_before) | {
        k for k, r in after.items() if r["status"] == "queued"
    }
    assert {i["dedupe_key"]: i["attempts"] for i in again if i["dedupe_key"] in running_before} == {
        k: v + 1 for k, v in running_before.items()
    }

    stats = json.loads(cli("stats", "--db", s.db_url).stdout)
    assert stats["by_status"] == {"queued": 0, "running": 9, "done": 2, "failed": 1}


@pytest.mark.process
def test_cli_help_lists_the_commands() -> None:
    r = cli("--help")
    assert r.returncode == 0
    for name in ("serve", "claim", "done", "failed", "reap", "stats", "purge"):
        assert name in r.stdout
