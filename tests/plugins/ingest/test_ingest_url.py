"""The item's optional ``url`` (the page it came from) through the real server: stored
with each new version, checked like every other field, and never a new version by
itself (it is not part of ``content_hash``)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.fixtures.ingest import IngestServer, make_item

PAGE = "https://cases.example.org/cases/42?tab=main"


def post(server: IngestServer, item: Any, **headers: str) -> requests.Response:
    return requests.post(f"{server.url}/v1/items", json=item, headers=headers, timeout=30)


def test_url_is_stored_with_the_version_and_a_moved_page_is_a_duplicate(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    first = {**make_item("42", {"title": "first"}), "url": PAGE}
    r = post(s, first)
    assert (r.status_code, r.json()["status"]) == (201, "accepted")
    got = requests.get(f"{s.url}/v1/items/test:42", timeout=30).json()
    assert got["url"] == PAGE
    assert got["data"] == {"title": "first"}  # the URL is beside the data, not in it

    # the same content from a page that moved: nothing is written, the URL stays
    moved = {**first, "url": "https://cases.example.org/archive/42"}
    r = post(s, moved)
    assert (r.status_code, r.json()["status"], r.json()["version"]) == (200, "duplicate", 1)
    assert s.row("test:42")["url"] == PAGE  # type: ignore[index]

    # new content: the new version carries its own page's URL
    second = {**make_item("42", {"title": "second"}), "url": moved["url"]}
    r = post(s, second)
    assert (r.status_code, r.json()["status"], r.json()["version"]) == (200, "updated", 2)
    assert s.row("test:42")["url"] == moved["url"]  # type: ignore[index]

    # an item without one stores none (a version that says nothing of its page)
    third = make_item("42", {"title": "third"})
    assert post(s, third).json()["status"] == "updated"
    assert s.row("test:42")["url"] is None  # type: ignore[index]


def test_a_batch_carries_urls_per_element(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    items = [
        {**make_item("1"), "url": "http://site.test/a/1"},
        make_item("2"),
        {**make_item("3"), "url": "ftp://site.test/a/3"},  # refused: its own 422 only
    ]
    r = requests.post(f"{s.url}/v1/items/batch", json=items, timeout=30)
    assert r.status_code == 200
    assert [x["status"] for x in r.json()["results"]] == ["accepted", "accepted", "invalid"]
    assert r.json()["results"][2]["problem"]["errors"][0]["field"] == "url"
    assert {row["dedupe_key"]: row["url"] for row in s.rows()} == {
        "test:1": "http://site.test/a/1",
        "test:2": None,
    }


@pytest.mark.parametrize(
    "url",
    [
        "ftp://site.test/x",  # not http(s)
        "javascript:alert(1)",
        "/cases/42",  # relative: the receiver could not open it
        "http://site.test/a b",  # whitespace inside
        "http://site.test/\x00",
        "http://site.test/\u2028",
        "http://site.test/" + "x" * 8192,  # over 8 KiB
        "",
        42,
        ["http://site.test/"],
    ],
)
def test_a_bad_url_is_a_422_naming_the_field_and_nothing_is_written(
    ingest_server: IngestServer, url: Any
) -> None:
    r = post(ingest_server, {**make_item("9"), "url": url})
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == ["url"]
    assert ingest_server.rows() == []


def test_a_lone_surrogate_in_the_url_is_refused(ingest_server: IngestServer) -> None:
    body = '{"dedupe_key": "test:9", "source_type": "test", "source_id": "9",'
    body += ' "content_hash": "h", "scraped_at": "2026-01-01T00:00:00Z", "data": {},'
    body += ' "url": "http://site.test/\\ud800"}'
    r = requests.post(
        f"{ingest_server.url}/v1/items",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422, r.text
    # (the field's pattern cannot read it: neither database could store it)
    assert [e["field"] for e in r.json()["errors"]] == ["url"]
    assert ingest_server.rows() == []


def test_an_idempotency_key_replays_with_its_url_and_refuses_another(
    ingest_server: IngestServer,
) -> None:
    item = {**make_item("5"), "url": PAGE}
    key = f"{item['dedupe_key']}@{item['content_hash']}"
    assert post(ingest_server, item, **{"Idempotency-Key": key}).status_code == 201
    again = post(ingest_server, item, **{"Idempotency-Key": key})
    assert (again.status_code, again.headers.get("idempotent-replayed")) == (201, "true")
    # the URL is part of the payload the key names: another one under it is a reuse
    other = post(ingest_server, {**item, "url": PAGE + "&x=1"}, **{"Idempotency-Key": key})
    assert other.status_code == 422
    assert other.json()["type"].endswith("idempotency-key-reused")
