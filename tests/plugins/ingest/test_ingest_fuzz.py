"""Fuzz the real server from its own OpenAPI description (schemathesis, bounded and
derandomized), on SQLite and on PostgreSQL: no 5xx, and every answer conforms to the
documented statuses, media types and schemas. Valid-looking and invalid bodies, with and
without auth; some cases get a NUL put into a key, a field or the data (PostgreSQL text
cannot hold one), some a non-JSON body and Content-Type."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

# imported here, before any server thread runs: from_url imports it lazily, and CPython
# 3.11's AST builder keeps its recursion depth per interpreter, so pytest rewriting this
# schemathesis module while a server thread parses too fails with "AST constructor
# recursion depth mismatch" (seen once in the parallel suite)
from schemathesis.specs.openapi import schemas as _schemas  # noqa: F401
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.ingest import IngestServer, make_item

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("token", [None, "fuzz-token"])
def test_fuzz_from_openapi(
    make_ingest_server: Callable[..., IngestServer],
    ingest_backend: str,
    mode: GenerationMode,
    token: str | None,
) -> None:
    s = make_ingest_server(token=token, backend=ingest_backend, poll_interval=0.05)
    schema = schemathesis.openapi.from_url(f"{s.url}/openapi.json")
    headers = s.auth_headers()
    calls = 0
    statuses: set[int] = set()

    @settings(
        max_examples=60,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=schema.as_strategy(generation_mode=mode).map(_consistent_keys),
        twist=st.sampled_from(["none", "none", "nul", "nul", "text"]),
    )
    def run(case: schemathesis.Case, twist: str) -> None:
        nonlocal calls
        calls += 1
        twisted = _twist(case, twist)
        # an event stream never ends: read it for a moment only
        timeout = 1 if case.operation.path == "/v1/events/stream" else 30
        response = case.call_and_validate(
            base_url=s.url, headers=headers, checks=CHECKS, timeout=timeout
        )
        statuses.add(response.status_code)
        if twisted == "text":
            assert response.status_code in (401, 415), response.text
        if twisted == "nul" and response.status_code == 200:  # a batch: its element fails
            assert response.json()["results"][0]["status"] == "invalid", response.text
        elif twisted == "nul":
            # a batch over the cap is refused for its size before its elements are read
            assert response.status_code in (401, 404, 413, 415, 422), response.text

    run()
    assert calls >= 30  # the run did exercise the API
    if mode is GenerationMode.POSITIVE:
        assert 201 in statuses  # the fuzzer got past validation and stored items
    else:
        assert statuses & {400, 422}
    # (each non-JSON case was checked above; test_non_json_bodies_are_415... covers them
    # deterministically, as the mix of operations the fuzzer picks varies)
    assert all("\x00" not in r["dedupe_key"] for r in s.rows())


def _twist(case: schemathesis.Case, twist: str) -> str:
    """Put a NUL into the case or make its body non-JSON; return what was done."""
    if twist == "nul":
        if "dedupe_key" in (case.path_parameters or {}):
            case.path_parameters = {"dedupe_key": "a\x00" + str(case.path_parameters["dedupe_key"])}
            return "nul"
        body = case.body
        element = body[0] if isinstance(body, list) and body else body
        if isinstance(element, dict) and isinstance(element.get("source_id"), str):
            element["source_id"] += "\x00"
            _fix(element)  # the key says the same, NUL and all: only the NUL is wrong
            return "nul"
    if twist == "text" and case.method.upper() == "POST":
        case.media_type = "text/plain"
        case.body = json.dumps(case.body, default=str)  # JSON text, but not declared as JSON
        return "text"
    return "none"


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    body=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode)),
    content_type=st.sampled_from(
        [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/xml",
            "application/octet-stream",
            "application/json; charset=latin-1",
            "text/json",
        ]
    ),
    route=st.sampled_from(["/v1/items", "/v1/items/batch"]),
)
def _non_json_bodies(s: IngestServer, body: bytes, content_type: str, route: str) -> None:
    r = requests.post(
        f"{s.url}{route}", data=body, headers={"Content-Type": content_type}, timeout=30
    )
    assert r.status_code == 415, r.text
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.json()["type"] == "urn:framework:ingest:unsupported-media-type"


def test_non_json_bodies_are_415_and_write_nothing(any_ingest_server: IngestServer) -> None:
    _non_json_bodies(any_ingest_server)
    assert any_ingest_server.rows() == []


NUL_PATHS = ["/v1/items/%00", "/v1/items/t:%00", "/v1/items/a%00b", "/v1/items/%00/x"]


@pytest.mark.parametrize("path", NUL_PATHS)
def test_nul_in_a_key_is_404_before_the_database(
    any_ingest_server: IngestServer, path: str
) -> None:
    r = requests.get(f"{any_ingest_server.url}{path}", timeout=10)
    assert r.status_code == 404, r.text
    assert r.json()["type"] == "urn:framework:ingest:not-found"


@pytest.mark.parametrize("field", ["source_type", "source_id", "dedupe_key", "content_hash"])
def test_nul_in_a_key_field_is_422_on_both_routes(
    any_ingest_server: IngestServer, field: str
) -> None:
    s = any_ingest_server
    item = make_item("1")
    item[field] += "\x00"
    if field in ("source_type", "source_id"):
        item["dedupe_key"] = f"{item['source_type']}:{item['source_id']}"
    r = requests.post(f"{s.url}/v1/items", json=item, timeout=10)
    assert r.status_code == 422, r.text
    assert field in {e["field"] for e in r.json()["errors"]}
    r = requests.post(f"{s.url}/v1/items/batch", json=[item], timeout=10)
    assert r.status_code == 200
    assert r.json()["results"][0]["status"] == "invalid"
    element = {**make_item("2"), "idempotency_key": "k\x00"}
    r = requests.post(f"{s.url}/v1/items/batch", json=[element], timeout=10)
    assert r.json()["results"][0]["problem"]["errors"][0]["field"] == "idempotency_key"
    assert s.rows() == []


def test_nul_inside_data_round_trips_escaped_on_both_databases(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    data = {"a\x00key": "x\x00y", "list": ["\x00", {"\x00": "\x00\x00"}]}
    item = make_item("nul", data)
    r = requests.post(f"{s.url}/v1/items", json=item, timeout=10)
    assert r.status_code == 201, r.text
    r = requests.post(f"{s.url}/v1/items", json=item, timeout=10)
    assert r.json()["status"] == "duplicate"
    got = requests.get(f"{s.url}/v1/items/test:nul", timeout=10).json()
    assert got["data"] == data  # stored as the JSON escape \u0000, read back as NUL


def _fix(element: object) -> None:
    if not isinstance(element, dict):
        return
    source_type, source_id = element.get("source_type"), element.get("source_id")
    if isinstance(source_type, str) and isinstance(source_id, str):
        element["dedupe_key"] = f"{source_type}:{source_id}"


def _consistent_keys(case: schemathesis.Case) -> schemathesis.Case:
    """Make most generated items pass the rule JSON Schema cannot say (the key is
    ``source_type:source_id``), so the fuzzer reaches storage, not only validation."""
    body = case.body
    if isinstance(body, list):
        for element in body[1:]:  # leave the first as generated: it may stay invalid
            _fix(element)
    elif isinstance(body, dict) and len(str(body)) % 4:
        _fix(body)
    return case
