"""The ingest contract through the real server: statuses, bodies, batches, reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import requests

from tests.fixtures.ingest import IngestServer, make_item


def post(server: IngestServer, item: Any, **headers: str) -> requests.Response:
    return requests.post(f"{server.url}/v1/items", json=item, headers=headers, timeout=30)


def post_batch(server: IngestServer, items: Any) -> requests.Response:
    return requests.post(f"{server.url}/v1/items/batch", json=items, timeout=30)


def test_new_key_is_accepted_then_duplicate_then_updated_with_history(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    first = make_item("42", {"title": "first"})
    r = post(s, first)
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    assert r.headers["location"] == "/v1/items/test:42"
    assert r.json() == {
        "status": "accepted",
        "dedupe_key": "test:42",
        "content_hash": first["content_hash"],
        "version": 1,
    }

    r = post(s, first)
    assert (r.status_code, r.json()["status"], r.json()["version"]) == (200, "duplicate", 1)
    assert s.history("test:42") == []

    second = make_item("42", {"title": "second"})
    r = post(s, second)
    assert (r.status_code, r.json()["status"], r.json()["version"]) == (200, "updated", 2)

    rows = s.rows()
    assert len(rows) == 1
    assert rows[0]["content_hash"] == second["content_hash"]
    assert rows[0]["data"] == {"title": "second"}
    assert rows[0]["status"] == "queued"
    history = s.history("test:42")
    assert [(h["version"], h["content_hash"], h["data"]) for h in history] == [
        (1, first["content_hash"], {"title": "first"})
    ]


def test_an_update_puts_a_finished_item_back_to_queued(any_ingest_server: IngestServer) -> None:
    from framework_ingest import handoff

    s = any_ingest_server
    post(s, make_item("1", {"v": 1}))
    [claimed] = handoff.claim(s.store.backend, 5)
    done = handoff.done(s.store.backend, claimed["claim_id"], [claimed["dedupe_key"]])
    assert done == {"test:1": "done"}
    assert s.row("test:1")["status"] == "done"  # type: ignore[index]
    post(s, make_item("1", {"v": 1}))  # a duplicate leaves the downstream state alone
    assert s.row("test:1")["status"] == "done"  # type: ignore[index]
    post(s, make_item("1", {"v": 2}))
    row = s.row("test:1")
    assert row is not None
    assert (row["status"], row["attempts"], row["finished_at"], row["version"]) == (
        "queued",
        0,
        None,
        2,
    )


def test_get_item_stats_and_healthz(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    post(s, make_item("a:b/c", {"x": [1, 2]}, source_type="alpha"))
    post(s, make_item("2", source_type="beta"))

    r = requests.get(f"{s.url}/v1/items/alpha:a:b/c", timeout=10)
    assert r.status_code == 200
    body = r.json()
    assert (body["dedupe_key"], body["source_id"], body["data"], body["status"]) == (
        "alpha:a:b/c",
        "a:b/c",
        {"x": [1, 2]},
        "queued",
    )
    assert body["scraped_at"] == "2026-01-01T00:00:00.000000Z"

    r = requests.get(f"{s.url}/v1/items/alpha:missing", timeout=10)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "urn:framework:ingest:not-found"

    stats = requests.get(f"{s.url}/v1/stats", timeout=10).json()
    assert stats["items"] == 2
    assert stats["by_status"] == {"queued": 2, "running": 0, "done": 0, "failed": 0}
    assert stats["by_source_type"]["alpha"]["total"] == 1
    assert stats["by_source_type"]["beta"]["queued"] == 1

    health = requests.get(f"{s.url}/healthz", timeout=10)
    assert health.json() == {"status": "ok", "database": s.store.backend.dialect}


def test_unknown_routes_404_and_wrong_methods_405(ingest_server: IngestServer) -> None:
    s = ingest_server
    r = requests.get(f"{s.url}/v2/items", timeout=10)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    r = requests.get(f"{s.url}/v1/items", timeout=10)
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json()["status"] == 405
    r = requests.delete(f"{s.url}/v1/stats", timeout=10)
    assert r.status_code == 405
    r = requests.put(f"{s.url}/v1/items", json=make_item("1"), timeout=10)
    assert r.status_code == 405
    assert s.rows() == []


def test_batch_answers_in_order_and_an_invalid_element_spares_its_neighbours(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    post(s, make_item("dup"))
    post(s, make_item("upd", {"v": 1}))
    bad = make_item("bad")
    del bad["content_hash"]
    items = [make_item("new"), make_item("dup"), bad, make_item("upd", {"v": 2}), 7]
    r = post_batch(s, items)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [(x["index"], x["status"], x["status_code"]) for x in results] == [
        (0, "accepted", 201),
        (1, "duplicate", 200),
        (2, "invalid", 422),
        (3, "updated", 200),
        (4, "invalid", 422),
    ]
    assert results[2]["dedupe_key"] == "test:bad"
    assert results[2]["problem"]["errors"] == [
        {"field": "content_hash", "message": "Field required"}
    ]
    assert [r["dedupe_key"] for r in s.rows()] == ["test:dup", "test:new", "test:upd"]
    assert len(s.history("test:upd")) == 1


def test_batch_may_repeat_a_key_and_is_processed_in_order(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    r = post_batch(
        s, [make_item("k", {"v": 1}), make_item("k", {"v": 2}), make_item("k", {"v": 2})]
    )
    assert [x["status"] for x in r.json()["results"]] == ["accepted", "updated", "duplicate"]
    assert s.row("test:k")["version"] == 2  # type: ignore[index]


def test_empty_batch_is_an_empty_answer(ingest_server: IngestServer) -> None:
    r = post_batch(ingest_server, [])
    assert (r.status_code, r.json()) == (200, {"results": []})


def test_batch_over_the_maximum_is_413_and_writes_nothing(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    s = make_ingest_server(max_batch=3)
    r = post_batch(s, [make_item(str(i)) for i in range(4)])
    assert r.status_code == 413
    assert r.json()["type"] == "urn:framework:ingest:batch-too-large"
    assert s.rows() == []
    assert post_batch(s, [make_item(str(i)) for i in range(3)]).status_code == 200
    assert len(s.rows()) == 3


def _fail_on_source_id(s: IngestServer, source_id: str) -> None:
    """A real database fault: a trigger that aborts the insert of one item."""
    if s.store.backend.dialect == "sqlite":
        with s.store.backend.transaction() as tx:
            tx.execute(
                "CREATE TRIGGER test_boom BEFORE INSERT ON items "
                f"WHEN NEW.source_id = '{source_id}' BEGIN SELECT RAISE(ABORT, 'boom'); END"
            )
    else:
        with psycopg.connect(s.db_url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.source_id = '{source_id}' THEN RAISE EXCEPTION 'boom'; END IF; "
                "RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER test_boom BEFORE INSERT ON items "
                "FOR EACH ROW EXECUTE FUNCTION test_boom()"
            )


def test_a_batch_is_one_transaction(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    _fail_on_source_id(s, "boom")
    r = post_batch(s, [make_item("1"), make_item("2"), make_item("boom"), make_item("3")])
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/problem+json"
    assert "boom" not in r.text  # internals stay in the server log
    assert s.rows() == []
    assert post_batch(s, [make_item("1"), make_item("2")]).status_code == 200
    assert len(s.rows()) == 2


@pytest.mark.parametrize("route", ["/v1/items", "/v1/items/batch"])
def test_data_round_trips_unicode_and_nul(ingest_server: IngestServer, route: str) -> None:
    data = {
        "name": "Z\u00fcrich \u2013 \u6771\u4eac",
        "nul": "a\u0000b",
        "nested": {"n": None, "f": 1.5},
    }
    item = make_item("u", data)
    body: Any = item if route == "/v1/items" else [item]
    r = requests.post(f"{ingest_server.url}{route}", json=body, timeout=10)
    assert r.status_code in (200, 201)
    assert ingest_server.row("test:u")["data"] == data  # type: ignore[index]


def test_sqlite_locked_by_another_process_is_503_with_retry_after(
    make_ingest_server: Callable[..., IngestServer], make_ingest_db_url: Callable[[str], str]
) -> None:
    url = make_ingest_db_url("sqlite") + "?busy_timeout=200"
    s = make_ingest_server(db_url=url)
    other = sqlite3.connect(url[len("sqlite:///") :].partition("?")[0], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the database
    try:
        for route, body in (("/v1/items", make_item("1")), ("/v1/items/batch", [make_item("2")])):
            r = requests.post(f"{s.url}{route}", json=body, timeout=30)
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1"
            assert r.json()["type"] == "urn:framework:ingest:unavailable"
        assert s.rows() == []
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert post(s, make_item("1")).status_code == 201
