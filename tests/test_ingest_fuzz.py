"""Fuzz the real server from its own OpenAPI description (schemathesis, bounded and
derandomized): no 5xx, and every answer conforms to the documented statuses, media
types and schemas. Valid-looking and invalid bodies, with and without auth."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.ingest import IngestServer

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("token", [None, "fuzz-token"])
def test_fuzz_from_openapi(
    make_ingest_server: Callable[..., IngestServer], mode: GenerationMode, token: str | None
) -> None:
    s = make_ingest_server(token=token)
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
    @given(case=schema.as_strategy(generation_mode=mode).map(_consistent_keys))
    def run(case: schemathesis.Case) -> None:
        nonlocal calls
        calls += 1
        response = case.call_and_validate(base_url=s.url, headers=headers, checks=CHECKS)
        statuses.add(response.status_code)

    run()
    assert calls >= 30  # the run did exercise the API
    if mode is GenerationMode.POSITIVE:
        assert 201 in statuses  # the fuzzer got past validation and stored items
    else:
        assert statuses & {400, 422}


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
