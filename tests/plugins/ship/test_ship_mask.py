"""framework_ship.mask: secrets and credential-shaped text out of what the ship step
stores or prints (the end-to-end case, a server quoting the token back through every
channel, is in tests/plugins/ship/test_ship_faults.py)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from framework_ship.mask import REDACTED, Masker

TOKEN = 'tok-9Zq/x+y="quoted"'  # characters JSON and URLs spell differently


@pytest.mark.parametrize(
    "spelling",
    [
        TOKEN,
        json.dumps(TOKEN)[1:-1],  # inside a JSON string
        quote(TOKEN, safe=""),  # percent-encoded in a URL
    ],
)
def test_the_literal_secret_in_any_spelling(spelling: str) -> None:
    masked = Masker([TOKEN])(f"the server said: {spelling}!")
    assert masked == f"the server said: {REDACTED}!"


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("header Authorization: Bearer abc.def-123 refused", "abc.def-123"),
        ('{"authorization": "Basic dXNlcjpodW50ZXIy", "x": 1}', "dXNlcjpodW50ZXIy"),
        ("proxy said Proxy-Authorization=Basic Zm9vOmJhcg==", "Zm9vOmJhcg=="),
        ("bearer someone.elses.jwt", "someone.elses.jwt"),
        ("use Basic dXNlcjpodW50ZXIy next time", "dXNlcjpodW50ZXIy"),
        ("GET /cb?api_key=k3y-123&x=1", "k3y-123"),
        ('{"password": "hunter2"}', "hunter2"),
        ("access_token=ya29.a0Af", "ya29.a0Af"),
        ("Cookie: session=abc123; other=1", "abc123"),
        ("X-Framework-Signature: t=1,v1=deadbeef", "deadbeef"),
    ],
)
def test_credential_shaped_text_whoever_it_belongs_to(text: str, gone: str) -> None:
    masked = Masker()(text)
    assert gone not in masked
    assert REDACTED in masked


@pytest.mark.parametrize(
    "text",
    [
        "data.title: field required",
        "basic validation failed for field amount",
        "this Idempotency-Key was first used with a different body",
        "connect: connection refused",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Masker([TOKEN])(text) == text


def test_no_secret_given_and_none_passes_through() -> None:
    masker = Masker([None, ""])
    assert masker("plain words") == "plain words"
    assert masker.optional(None) is None
    assert masker.optional("Bearer x1y2z3") == f"Bearer {REDACTED}"
