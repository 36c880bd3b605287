"""Retention: ``framework ingest purge`` (and the server's periodic purge) forgets old
history, idempotency keys, delivered events and done items' data in bounded batches,
never a queued, running or failed item; afterwards a replay of every write still answers
duplicate or updated, never a second create (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from framework_ingest import handoff, retention

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item

FRAMEWORK = str(Path(sys.executable).parent / "framework")
ALL_NOW = ["--history-age", "0", "--idempotency-age", "0", "--event-age", "0", "--done-age", "0"]


def purge_cli(db_url: str, *args: str) -> dict[str, int]:
    r = procs.run(
        [FRAMEWORK, "ingest", "purge", "--db", db_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    counts: dict[str, int] = json.loads(r.stdout)
    return counts


def _deliver(s: IngestServer) -> list[tuple[str, Any, dict[str, str]]]:
    """Write a mixed history; return every request made (the 'ship log' to replay)."""
    log: list[tuple[str, Any, dict[str, str]]] = []

    def post(route: str, body: Any, headers: dict[str, str] | None = None) -> None:
        log.append((route, body, headers or {}))
        assert requests.post(f"{s.url}{route}", json=body, headers=headers, timeout=10).ok

    for i in range(6):
        v1 = make_item(str(i), {"v": 1})
        post("/v1/items", v1, {"Idempotency-Key": f"{v1['dedupe_key']}@{v1['content_hash']}"})
    for i in range(3):  # new versions of 0-2: history rows
        post("/v1/items", make_item(str(i), {"v": 2}))
    batch = [{**make_item(f"b{i}"), "idempotency_key": f"b{i}@1"} for i in range(4)]
    post("/v1/items/batch", batch)
    return log


def _replay(s: IngestServer, log: list[tuple[str, Any, dict[str, str]]]) -> list[str]:
    statuses: list[str] = []
    for route, body, headers in log:
        r = requests.post(f"{s.url}{route}", json=body, headers=headers, timeout=10)
        assert r.status_code in (200, 201), r.text
        if route.endswith("/batch"):
            statuses += [x["status"] for x in r.json()["results"]]
        else:
            statuses.append(r.json()["status"])
    return statuses


@pytest.mark.process
def test_purge_keeps_every_live_row_and_replays_never_create_twice(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    log = _deliver(s)
    backend = s.store.backend
    claimed = {i["dedupe_key"]: i for i in handoff.claim(backend, 6)}
    done_keys = sorted(claimed)[:3]
    failed_key = sorted(claimed)[3]
    handoff.done(backend, claimed[done_keys[0]]["claim_id"], done_keys)
    handoff.failed(backend, claimed[failed_key]["claim_id"], [failed_key], "broke")
    before = {r["dedupe_key"]: r for r in s.rows()}
    assert s.history_count() == 3
    assert len(s.idempotency_keys()) == 10

    # the defaults (days) remove nothing this young
    assert purge_cli(s.db_url) == dict.fromkeys(
        ("history", "idempotency_keys", "events", "done_items", "signatures"), 0
    )
    counts = purge_cli(s.db_url, *ALL_NOW, "--batch", "2")  # tiny batches: many rounds
    assert counts["history"] == 3
    assert counts["idempotency_keys"] == 10
    assert counts["done_items"] == 3
    assert counts["events"] == len(before) + 3 + 6 + 4  # accepted, updated, claimed, finished
    assert s.history_count() == 0
    assert s.idempotency_keys() == {}
    assert s.events() == []

    after = {r["dedupe_key"]: r for r in s.rows()}
    assert set(after) == set(before)  # no item row is ever deleted
    for key, row in after.items():
        if key in done_keys:
            assert (row["data"], row["status"]) == (None, "done")
            assert row["purged_at"] is not None
            assert (row["content_hash"], row["version"]) == (
                before[key]["content_hash"],
                before[key]["version"],
            )
        else:  # queued, running, failed: untouched
            assert row == before[key]
    assert {after[k]["status"] for k in after if k not in done_keys} == {
        "queued",
        "running",
        "failed",
    }
    item = requests.get(f"{s.url}/v1/items/{done_keys[0]}", timeout=10).json()
    assert (item["data"], item["status"]) == (None, "done")

    statuses = _replay(s, log)
    assert "accepted" not in statuses
    assert set(statuses) <= {"duplicate", "updated"}
    assert statuses.count("updated") == 6  # 0-2 go back to v1, then forward to v2 again
    # a reader who had not read the purged events is told so, with where to resume
    r = requests.get(f"{s.url}/v1/events", params={"after": 0}, timeout=10)
    assert r.status_code == 410
    assert r.json()["type"] == "urn:framework:ingest:events-purged"
    resume = r.json()["oldest_after"]
    r = requests.get(f"{s.url}/v1/events", params={"after": resume}, timeout=10)
    assert [e["type"] for e in r.json()["events"]] == ["updated"] * 6


@pytest.mark.process
def test_only_old_events_go_and_only_as_a_prefix(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    for i in range(5):
        requests.post(f"{s.url}/v1/items", json=make_item(str(i)), timeout=10)
    assert purge_cli(s.db_url, "--event-age", "1h")["events"] == 0
    backend = s.store.backend
    # make events 1-2 old and 4 old too; 3 is young, so only 1-2 may go (no hole at 3)
    with backend.transaction() as tx:
        tx.execute(
            "UPDATE events SET created_at = ? WHERE seq IN (1, 2, 4)", ("2000-01-01T00:00:00Z",)
        )
    counts = retention.purge(backend, retention.RetentionPolicy(None, None, 3600.0, None), batch=1)
    assert counts["events"] == 2
    assert [e["seq"] for e in s.events()] == [3, 4, 5]


def test_the_server_purges_periodically(make_ingest_server: Callable[..., IngestServer]) -> None:
    s = make_ingest_server(
        purge_every=0.1,
        retention_policy=retention.RetentionPolicy(0.0, 0.0, None, None),
        purge_batch=1,
    )
    for v in (1, 2, 3):
        requests.post(
            f"{s.url}/v1/items",
            json=make_item("1", {"v": v}),
            headers={"Idempotency-Key": f"k{v}"},
            timeout=10,
        )
    deadline = time.monotonic() + 30
    while s.history_count() or s.idempotency_keys():
        assert time.monotonic() < deadline, "the periodic purge did not run"
        time.sleep(0.05)
    assert [e["type"] for e in s.events()] == ["accepted", "updated", "updated"]  # kept
    r = requests.post(f"{s.url}/v1/items", json=make_item("1", {"v": 3}), timeout=10)
    assert r.json()["status"] == "duplicate"


@pytest.mark.process
def test_events_above_a_consumer_cursor_are_kept(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    for i in range(5):
        requests.post(f"{s.url}/v1/items", json=make_item(str(i)), timeout=10)
    cursor = f"{s.url}/v1/events/consumers"
    r = requests.put(f"{cursor}/billing", json={"last_seq": 2}, timeout=10)
    assert (r.status_code, r.json()["last_seq"]) == (200, 2)
    requests.put(f"{cursor}/search", json={"last_seq": 4}, timeout=10)
    # old enough, but billing has not processed 3-5: only 1-2 count as delivered
    assert purge_cli(s.db_url, "--event-age", "0")["events"] == 2
    assert [e["seq"] for e in s.events()] == [3, 4, 5]
    requests.put(f"{cursor}/billing", json={"last_seq": 5}, timeout=10)
    assert purge_cli(s.db_url, "--event-age", "0")["events"] == 2  # up to search's 4
    assert requests.delete(f"{cursor}/search", timeout=10).status_code == 204
    assert purge_cli(s.db_url, "--event-age", "0")["events"] == 1
    assert requests.get(cursor, timeout=10).json()["consumers"][0]["name"] == "billing"
    # a cursor does not override the age: young events stay whatever the cursors say
    requests.post(f"{s.url}/v1/items", json=make_item("9"), timeout=10)
    requests.put(f"{cursor}/billing", json={"last_seq": 6}, timeout=10)
    assert purge_cli(s.db_url, "--event-age", "1h")["events"] == 0


def test_cursor_requests_are_checked(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    requests.post(f"{s.url}/v1/items", json=make_item("1"), timeout=10)
    base = f"{s.url}/v1/events/consumers"
    for name, body, status in (
        ("ok", {"last_seq": 2}, 422),  # beyond the last event (1)
        ("ok", {"last_seq": -1}, 422),
        ("ok", {"last_seq": "1"}, 422),
        ("ok", {"last_seq": 1, "extra": 1}, 422),
        ("bad%20name", {"last_seq": 1}, 422),
        ("nul%00", {"last_seq": 1}, 422),
    ):
        r = requests.put(f"{base}/{name}", json=body, timeout=10)
        assert r.status_code == status, (name, body, r.text)
    r = requests.put(f"{base}/ok", data="last_seq=1", timeout=10,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert r.status_code == 415
    assert requests.delete(f"{base}/nobody", timeout=10).status_code == 404
    assert requests.delete(f"{base}/nul%00", timeout=10).status_code == 404
    r = requests.get(f"{base}/ok", timeout=10)
    assert r.status_code == 405
    assert set(r.headers["Allow"].replace(" ", "").split(",")) == {"PUT", "DELETE"}
    assert requests.get(base, timeout=10).json() == {"consumers": []}
