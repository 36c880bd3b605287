"""Bad input and security: every case answers its status as problem+json and writes nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from tests.fixtures.ingest import IngestServer, make_item

MAX_BODY = 4096


def assert_nothing_written(s: IngestServer) -> None:
    assert s.rows() == []
    assert s.history_count() == 0
    assert s.idempotency_keys() == {}


def assert_problem(r: requests.Response, status: int, slug: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert (body["status"], body["type"]) == (status, f"urn:framework:ingest:{slug}")
    return body


@pytest.fixture
def small_server(make_ingest_server: Callable[..., IngestServer]) -> IngestServer:
    return make_ingest_server(max_body=MAX_BODY)


def _item_with(**changes: Any) -> dict[str, Any]:
    item = make_item("1")
    for key, value in changes.items():
        if value is _DROP:
            del item[key]
        else:
            item[key] = value
    return item


_DROP = object()

MALFORMED: list[tuple[str, bytes]] = [
    ("syntax", b'{"dedupe_key": '),
    ("empty", b""),
    ("nan", json.dumps(make_item("1")).replace('"title": "item 1"', '"title": NaN').encode()),
    ("infinity", b'{"data": {"x": -Infinity}}'),
    ("bad-utf8", b'{"dedupe_key": "\xff\xfe"}'),
]

TOO_DEEP = b"[" * 100_000 + b"]" * 100_000  # far past what the JSON parser recurses into


@pytest.mark.parametrize("route", ["/v1/items", "/v1/items/batch"])
@pytest.mark.parametrize(("name", "body"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_json_is_400(
    make_ingest_server: Callable[..., IngestServer], route: str, name: str, body: bytes
) -> None:
    s = make_ingest_server()
    r = requests.post(
        f"{s.url}{route}", data=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert_problem(r, 400, "malformed-json")
    assert_nothing_written(s)


def test_nesting_too_deep_to_parse_is_422_like_any_too_deep_value(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    """However deep, nesting past 64 levels is the value's 422 (in a batch, the
    element's), never a 400 whose boundary would depend on the parser's stack."""
    s = make_ingest_server()
    headers = {"Content-Type": "application/json"}
    r = requests.post(f"{s.url}/v1/items", data=TOO_DEEP, headers=headers, timeout=10)
    body = assert_problem(r, 422, "validation")
    assert body["errors"] == [{"field": "", "message": "nests deeper than 64 levels"}]
    r = requests.post(f"{s.url}/v1/items/batch", data=TOO_DEEP, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert [x["status_code"] for x in r.json()["results"]] == [422]
    assert_nothing_written(s)


INVALID: list[tuple[str, Any, str]] = [
    ("missing-field", _item_with(content_hash=_DROP), "content_hash"),
    ("unknown-field", _item_with(extra="x"), "extra"),
    ("data-not-object", _item_with(data=[1, 2]), "data"),
    ("hash-wrong-type", _item_with(content_hash=123), "content_hash"),
    ("source-type-colon", _item_with(source_type="a:b", dedupe_key="a:b:1"), "source_type"),
    ("naive-time", _item_with(scraped_at="2026-01-01T00:00:00"), "scraped_at"),
    ("not-a-time", _item_with(scraped_at="yesterday"), "scraped_at"),
    ("key-mismatch", _item_with(dedupe_key="test:2"), "dedupe_key"),
    ("empty-source-id", _item_with(source_id="", dedupe_key="test:"), "source_id"),
    ("nul-in-key", _item_with(source_id="a\u0000", dedupe_key="test:a\u0000"), "source_id"),
    ("surrogate", _item_with(source_id="a\ud800", dedupe_key="test:a\ud800"), "source_id"),
    ("huge-number", None, "data"),
    ("array-body", [make_item("1")], ""),
    ("null-body", None, ""),
]


@pytest.mark.parametrize(("name", "body", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_item_is_422_naming_the_field(
    small_server: IngestServer, name: str, body: Any, field: str
) -> None:
    s = small_server
    raw = json.dumps(body)
    if name == "huge-number":
        raw = json.dumps(make_item("1")).replace('"title": "item 1"', '"big": 1e999')
    r = requests.post(f"{s.url}/v1/items", data=raw.encode(), timeout=10)
    problem = assert_problem(r, 422, "validation")
    assert field in [e["field"] for e in problem["errors"]], problem
    assert "detail" in problem
    assert_nothing_written(s)


def test_batch_elements_invalid_for_the_same_reasons_write_nothing(
    small_server: IngestServer,
) -> None:
    s = small_server
    bodies = [c[1] for c in INVALID if c[0] not in ("huge-number", "array-body")]
    r = requests.post(f"{s.url}/v1/items/batch", json=bodies, timeout=10)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["invalid"] * len(bodies)
    assert [x["problem"]["errors"][0]["field"] for x in results][:3] == [
        "content_hash",
        "extra",
        "data",
    ]
    assert_nothing_written(s)


@pytest.mark.parametrize("body", [{"items": []}, "text", 3, None])
def test_batch_body_must_be_an_array(small_server: IngestServer, body: Any) -> None:
    r = requests.post(f"{small_server.url}/v1/items/batch", data=json.dumps(body), timeout=10)
    assert_problem(r, 422, "validation")
    assert_nothing_written(small_server)


@pytest.mark.parametrize("key", ["has space", "x" * 256, "tab\tkey"])
def test_bad_idempotency_key_header_is_422(small_server: IngestServer, key: str) -> None:
    r = requests.post(
        f"{small_server.url}/v1/items",
        json=make_item("1"),
        headers={"Idempotency-Key": key},
        timeout=10,
    )
    body = assert_problem(r, 422, "validation")
    assert body["errors"][0]["field"] == "Idempotency-Key"
    assert_nothing_written(small_server)


@pytest.mark.parametrize("route", ["/v1/items", "/v1/items/batch"])
def test_body_over_the_limit_is_413(small_server: IngestServer, route: str) -> None:
    item = make_item("1", {"blob": "x" * MAX_BODY})
    body: Any = item if route == "/v1/items" else [item]
    r = requests.post(f"{small_server.url}{route}", json=body, timeout=10)
    assert_problem(r, 413, "too-large")
    assert_nothing_written(small_server)


def test_chunked_body_over_the_limit_is_413(small_server: IngestServer) -> None:
    payload = json.dumps(make_item("1", {"blob": "x" * MAX_BODY})).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server must count
        for start in range(0, len(payload), 1000):
            yield payload[start : start + 1000]

    r = requests.post(f"{small_server.url}/v1/items", data=chunks(), timeout=10)
    assert_problem(r, 413, "too-large")
    assert_nothing_written(small_server)


def test_body_just_under_the_limit_is_stored(small_server: IngestServer) -> None:
    item = make_item("1", {"blob": ""})
    room = MAX_BODY - len(json.dumps(item).encode())
    item = make_item("1", {"blob": "x" * room})
    assert len(json.dumps(item).encode()) == MAX_BODY
    r = requests.post(f"{small_server.url}/v1/items", data=json.dumps(item), timeout=10)
    assert r.status_code == 201
    assert len(small_server.rows()) == 1


TOKEN = "s3cret-token-which-must-never-leak"


@pytest.fixture
def token_server(
    make_ingest_server: Callable[..., IngestServer], caplog: pytest.LogCaptureFixture
) -> Iterator[IngestServer]:
    # uvicorn's loggers do not propagate; hand them the capture handler directly.
    names = ["uvicorn", "uvicorn.error", "uvicorn.access", "framework_ingest"]
    for name in names:
        logging.getLogger(name).addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG)
    try:
        yield make_ingest_server(token=TOKEN, access_log=True)
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(caplog.handler)


def test_auth_401_403_and_the_token_never_leaks(
    token_server: IngestServer, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    s = token_server
    url = f"{s.url}/v1/items"
    answers: list[requests.Response] = []
    wrong = TOKEN + "x"

    for headers in ({}, {"Authorization": "Basic " + TOKEN}, {"Authorization": "Bearer "}):
        r = requests.post(url, json=make_item("1"), headers=headers, timeout=10)
        assert_problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        answers.append(r)
    for path, method in (
        ("/v1/items", "post"),
        ("/v1/items/batch", "post"),
        ("/v1/items/test:1", "get"),
        ("/v1/stats", "get"),
    ):
        r = requests.request(
            method,
            f"{s.url}{path}",
            json=make_item("1"),
            headers={"Authorization": f"Bearer {wrong}"},
            timeout=10,
        )
        assert_problem(r, 403, "forbidden")
        answers.append(r)
    assert_nothing_written(s)

    assert requests.get(f"{s.url}/healthz", timeout=10).status_code == 200
    r = requests.post(url, json=make_item("1"), headers=s.auth_headers(), timeout=10)
    assert r.status_code == 201
    answers.append(r)
    r = requests.get(f"{s.url}/v1/stats", headers={"authorization": f"bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 200
    answers.append(r)

    for r in answers:
        assert TOKEN not in r.text
        assert all(TOKEN not in v for v in r.headers.values())
    logged = "\n".join(rec.getMessage() + repr(rec.args) for rec in caplog.records)
    assert "POST /v1/items" in logged  # the access log did run and was captured
    out, err = capfd.readouterr()
    for text in (logged, out, err, caplog.text):
        assert TOKEN not in text
        assert wrong not in text
    assert TOKEN not in repr(s.app.state.ingest.auth)


def test_token_env_must_name_a_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.cli import main

    monkeypatch.delenv("INGEST_TEST_TOKEN_UNSET", raising=False)
    assert (
        main(
            [
                "ingest",
                "serve",
                "--db",
                "sqlite:///unused.db",
                "--token-env",
                "INGEST_TEST_TOKEN_UNSET",
            ]
        )
        == 2
    )


def test_unsupported_database_url_is_a_usage_error() -> None:
    from framework.cli import main

    assert main(["ingest", "stats", "--db", "mysql://root:pw@localhost/x"]) == 2
