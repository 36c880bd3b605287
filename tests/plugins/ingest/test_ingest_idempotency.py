"""The Idempotency-Key header (and the per-element key of batches), on both backends."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from framework_ingest.db import utcnow
from framework_ingest.validate import prepare

from tests.fixtures.ingest import IngestServer, make_item


def post(s: IngestServer, item: Any, key: str | None = None) -> requests.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return requests.post(f"{s.url}/v1/items", json=item, headers=headers, timeout=30)


def test_key_is_stored_and_a_replay_answers_the_stored_response(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    item = make_item("1")
    key = f"{item['dedupe_key']}@{item['content_hash']}"
    first = post(s, item, key)
    assert first.status_code == 201
    assert "idempotent-replayed" not in first.headers
    assert s.idempotency_keys() == {key: 201}

    again = post(s, dict(reversed(list(item.items()))), key)  # key order does not count
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert len(s.rows()) == 1


def test_same_key_with_a_different_body_is_422_and_writes_nothing(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    assert post(s, make_item("1", {"v": 1}), "k-1").status_code == 201
    before = s.rows()
    r = post(s, make_item("1", {"v": 2}), "k-1")
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "urn:framework:ingest:idempotency-key-reused"
    assert s.rows() == before
    assert s.history_count() == 0


def test_same_key_in_flight_is_409(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    entered, release = threading.Event(), threading.Event()

    def hold(key: str) -> None:  # the first request parks here, its key registered
        entered.set()
        assert release.wait(30)

    item = make_item("1")
    s.store.on_in_flight = hold
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, s, item, "k-in-flight")
        assert entered.wait(30)
        s.store.on_in_flight = None
        second = post(s, item, "k-in-flight")
        assert second.status_code == 409
        assert second.json()["type"] == "urn:framework:ingest:idempotency-key-in-flight"
        assert s.rows() == []
        assert s.idempotency_keys() == {"k-in-flight": None}
        other_body = post(s, make_item("1", {"other": True}), "k-in-flight")
        assert other_body.status_code == 422
        release.set()
        assert first.result().status_code == 201
    third = post(s, item, "k-in-flight")
    assert (third.status_code, third.headers["idempotent-replayed"]) == (201, "true")
    assert len(s.rows()) == 1


def test_a_key_left_in_flight_by_a_crash_is_taken_over_after_the_timeout(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    item = make_item("1")
    fingerprint = prepare(item).fingerprint()
    with s.store.backend.transaction() as tx:  # what a server killed mid-request leaves
        tx.execute(
            "INSERT INTO idempotency_keys (key, fingerprint, dedupe_key, created_at) "
            "VALUES (?, ?, ?, ?)",
            ("k-crashed", fingerprint, "test:1", utcnow()),
        )
    s.store.in_flight_timeout = 3600
    assert post(s, item, "k-crashed").status_code == 409  # young: maybe still running
    s.store.in_flight_timeout = 0
    assert post(s, make_item("1", {"other": 1}), "k-crashed").status_code == 422  # never
    assert s.rows() == []
    r = post(s, item, "k-crashed")  # stale and the same payload: this request takes it over
    assert (r.status_code, r.json()["status"]) == (201, "accepted")
    assert s.idempotency_keys() == {"k-crashed": 201}


def test_a_failed_write_releases_its_key(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    with s.store.backend.transaction() as tx:
        tx.execute("ALTER TABLE items RENAME TO items_away")
    r = post(s, make_item("1"), "k-fail")
    assert r.status_code == 500
    assert s.idempotency_keys() == {}
    with s.store.backend.transaction() as tx:
        tx.execute("ALTER TABLE items_away RENAME TO items")
    assert post(s, make_item("1"), "k-fail").status_code == 201


def test_batch_elements_carry_their_own_keys(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    a, b = make_item("a"), make_item("b")
    assert post(s, a, "key-a").status_code == 201
    batch = [
        {**a, "idempotency_key": "key-a"},  # replay of the single-item delivery
        {**b, "idempotency_key": "key-b"},
        {**b, "idempotency_key": "key-b"},  # replay inside the same batch
        {**make_item("b", {"other": 1}), "idempotency_key": "key-b"},  # reused: invalid
        {**make_item("c"), "idempotency_key": "has space"},  # bad key: invalid element
    ]
    r = requests.post(f"{s.url}/v1/items/batch", json=batch, timeout=30)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [(x["status"], x["status_code"]) for x in results] == [
        ("accepted", 201),
        ("accepted", 201),
        ("accepted", 201),
        ("invalid", 422),
        ("invalid", 422),
    ]
    assert [x.get("replayed") for x in results] == [True, None, True, None, None]
    assert results[3]["problem"]["type"] == "urn:framework:ingest:idempotency-key-reused"
    assert results[4]["problem"]["errors"][0]["field"] == "idempotency_key"
    assert [r["dedupe_key"] for r in s.rows()] == ["test:a", "test:b"]
    assert s.idempotency_keys() == {"key-a": 201, "key-b": 201}
