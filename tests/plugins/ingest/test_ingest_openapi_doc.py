"""The OpenAPI copy in docs/ingest-contract.md is the app's current description."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import requests
from framework_ingest.openapi import build_openapi

from tests.fixtures.ingest import IngestServer
from tests.paths import REPO

DOC = REPO / "docs" / "ingest-contract.md"


def _documented() -> dict[str, object]:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- openapi:begin -->\s*```json\n(.*?)\n```\s*<!-- openapi:end -->", text, re.S
    )
    assert match, "docs/ingest-contract.md lost its openapi:begin/end block"
    loaded: dict[str, object] = json.loads(match.group(1))
    return loaded


def test_docs_copy_matches_what_the_server_serves(ingest_server: IngestServer) -> None:
    served = requests.get(f"{ingest_server.url}/openapi.json", timeout=10).json()
    assert _documented() == served, (
        "regenerate the block with: framework ingest openapi (see docs/ingest-contract.md)"
    )


def test_docs_copy_matches_the_default_build() -> None:
    assert _documented() == build_openapi(auth=False)


def test_a_token_server_describes_its_security(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    s = make_ingest_server(token="t")
    served = requests.get(f"{s.url}/openapi.json", timeout=10).json()
    assert served["paths"]["/v1/items"]["post"]["security"] == [{"bearer": []}]
    assert served["paths"]["/healthz"]["get"]["security"] == []
