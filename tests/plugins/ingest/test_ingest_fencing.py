"""Leases on claimed work: a claim carries a fencing token (``claim_id``); a finish from
a claim that was reaped (and re-claimed, or updated meanwhile) is refused as ``stale``
(exit 5) and never overwrites the current holder's outcome. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from framework_ingest import handoff
from framework_ingest.errors import EXIT_STALE

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item

FRAMEWORK = str(Path(sys.executable).parent / "framework")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [FRAMEWORK, "ingest", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.process
def test_a_stale_claimer_is_told_so_and_the_current_holder_wins(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    assert requests.post(f"{s.url}/v1/items", json=make_item("a"), timeout=10).status_code == 201
    db = s.db_url

    r = cli("claim", "--db", db, "--limit", "1")  # worker A
    [a_item] = _lines(r.stdout)
    a_claim = a_item["claim_id"]
    assert (a_item["dedupe_key"], a_item["attempts"]) == ("test:a", 1)

    r = cli("reap", "--db", db, "--older-than", "0")  # A looks dead
    assert _lines(r.stdout) == [{"dedupe_key": "test:a", "outcome": "requeued"}]

    r = cli("claim", "--db", db, "--limit", "1")  # worker B takes it over
    [b_item] = _lines(r.stdout)
    b_claim = b_item["claim_id"]
    assert (b_item["attempts"], b_claim != a_claim) == (2, True)

    # A comes back late: refused, told it is stale, exit 5; B still holds the item
    r = cli("done", "--db", db, "--claim", a_claim, "test:a")
    assert r.returncode == EXIT_STALE == 5, r.stderr
    assert _lines(r.stdout) == [{"dedupe_key": "test:a", "outcome": "stale"}]
    assert "stale" in r.stderr
    row = s.row("test:a")
    assert row is not None
    assert (row["status"], row["attempts"], row["finished_at"]) == ("running", 2, None)

    r = cli("failed", "--db", db, "--claim", b_claim, "test:a", "--reason", "B's parser broke")
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout) == [{"dedupe_key": "test:a", "outcome": "failed"}]

    # A tries again, either way: still stale; B's outcome stands
    for args in (["done"], ["failed", "--reason", "A says so"]):
        r = cli(*args, "--db", db, "--claim", a_claim, "test:a")
        assert r.returncode == 5
        assert _lines(r.stdout) == [{"dedupe_key": "test:a", "outcome": "stale"}]
    row = s.row("test:a")
    assert row is not None
    assert (row["status"], row["last_error"], row["attempts"]) == ("failed", "B's parser broke", 2)

    # B repeating its own finish changes nothing and is not an error
    r = cli("failed", "--db", db, "--claim", b_claim, "test:a", "--reason", "again")
    assert (r.returncode, _lines(r.stdout)) == (0, [{"dedupe_key": "test:a", "outcome": "skipped"}])
    assert s.row("test:a")["last_error"] == "B's parser broke"  # type: ignore[index]

    kinds = [(e["type"], e.get("attempts")) for e in s.events()]
    assert kinds == [
        ("accepted", None),
        ("claimed", 1),
        ("reaped", 1),
        ("claimed", 2),
        ("failed", 2),
    ]


def test_an_update_while_claimed_makes_the_claim_stale(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    backend = s.store.backend
    requests.post(f"{s.url}/v1/items", json=make_item("u", {"v": 1}), timeout=10)
    [item] = handoff.claim(backend, 1)
    requests.post(f"{s.url}/v1/items", json=make_item("u", {"v": 2}), timeout=10)  # new version
    assert handoff.done(backend, item["claim_id"], ["test:u"]) == {"test:u": "stale"}
    assert s.row("test:u")["status"] == "queued"  # type: ignore[index]
    [again] = handoff.claim(backend, 1)
    assert again["version"] == 2
    assert handoff.done(backend, again["claim_id"], ["test:u", "test:nope"]) == {
        "test:u": "done",
        "test:nope": "skipped",
    }


@pytest.mark.process
def test_mixed_outcomes_print_every_key_then_exit_5(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    for i in ("1", "2"):
        requests.post(f"{s.url}/v1/items", json=make_item(i), timeout=10)
    [one, two] = handoff.claim(s.store.backend, 2)
    handoff.reap(s.store.backend, 0)
    [two_again, one_again] = sorted(
        handoff.claim(s.store.backend, 2), key=lambda i: i["dedupe_key"], reverse=True
    )
    # the old lease over both keys: both stale; the new lease finishes them
    r = cli("done", "--db", s.db_url, "--claim", one["claim_id"], "test:1", "test:2")
    assert r.returncode == 5
    assert [x["outcome"] for x in _lines(r.stdout)] == ["stale", "stale"]
    r = cli("done", "--db", s.db_url, "--claim", one_again["claim_id"], "test:1", "test:2")
    assert r.returncode == 0, r.stderr
    assert [x["outcome"] for x in _lines(r.stdout)] == ["done", "done"]
    assert two_again["claim_id"] == one_again["claim_id"] != two["claim_id"]


@pytest.mark.process
def test_done_requires_the_claim_id() -> None:
    r = cli("done", "--db", "sqlite:///unused.db", "test:1")
    assert r.returncode == 2
    assert "--claim" in r.stderr
