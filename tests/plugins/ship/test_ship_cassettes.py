"""The shipping client against betamax cassettes recorded from the REAL reference
ingest server: accepted, duplicate, updated, a 422 rejection, a 401, and a batch.

Replay (the default, and CI) needs no server: record mode ``none``, any request not in
the cassette fails. Re-record against a freshly started reference server with::

    FRAMEWORK_RECORD_CASSETTES=1 .venv/bin/pytest tests/plugins/ship/test_ship_cassettes.py

Cassettes are port- and token-free: the server's base URL is stored as
``http://ingest.test`` and the token as ``<INGEST_TOKEN>`` (betamax placeholders), and
requests match on method, path and the (dedupe key, content hash) pairs they carry, not
on the body bytes or the host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from betamax import BaseMatcher, Betamax
from framework_ship.classify import Outcome, Verdict, classify_status, contract_outcome
from framework_ship.client import IngestClient, Reply, redelivery_key
from framework_ship.deliver import batch_verdicts, key_reused

from framework.workspace import StoredItem
from tests.paths import TESTS

CASSETTES = TESTS / "cassettes"
RECORD = os.environ.get("FRAMEWORK_RECORD_CASSETTES") == "1"
PLACEHOLDER_BASE = "http://ingest.test"
TOKEN_PLACEHOLDER = "<INGEST_TOKEN>"
RECORD_TOKEN = "cassette-recording-token-7f3a"  # only ever sent to a local test server
REPLAY_TOKEN = "replay-token"
USE_RECORD_TOKEN = "<the recording token>"


def _deliveries(body: Any, header_key: str | None) -> list[tuple[str, ...]]:
    """(dedupe key, content hash, scraped_at, idempotency key) of each item a request
    carries: what makes one delivery differ from another."""
    try:
        value = json.loads(body) if isinstance(body, str | bytes) else body
    except ValueError:
        return []
    entries = value if isinstance(value, list) else [value]
    return [
        (str(e.get("dedupe_key")), str(e.get("content_hash")), str(e.get("scraped_at")),
         str(e.get("idempotency_key", header_key)))
        for e in entries
        if isinstance(e, dict)
    ]  # fmt: skip


def _header(headers: Any, name: str) -> str | None:
    for key, value in dict(headers or {}).items():
        if key.lower() == name.lower():
            return str(value[0] if isinstance(value, list) else value)
    return None


class ShipItemsMatcher(BaseMatcher):
    """Same path, same deliveries (key, content hash, idempotency key) in order."""

    name = "ship-items"

    def match(self, request: requests.PreparedRequest, recorded_request: dict[str, Any]) -> bool:
        if urlsplit(request.url or "").path != urlsplit(recorded_request["uri"]).path:
            return False
        recorded = recorded_request.get("body") or {}
        raw = recorded.get("string", "") if isinstance(recorded, dict) else recorded
        ours = _deliveries(request.body or b"", _header(request.headers, "Idempotency-Key"))
        theirs = _deliveries(raw, _header(recorded_request.get("headers"), "Idempotency-Key"))
        return ours == theirs


Betamax.register_request_matcher(ShipItemsMatcher)


def body(source_id: str, version: int = 1, source_id_in_key: str | None = None) -> dict[str, Any]:
    data = {"title": f"case {source_id}", "version": version}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib

    key_id = source_id_in_key if source_id_in_key is not None else source_id
    return {
        "dedupe_key": f"cassette:{key_id}",
        "source_type": "cassette",
        "source_id": source_id,
        "content_hash": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest(),
        "scraped_at": "2026-11-29T12:00:00+00:00",
        "data": data,
    }


@pytest.fixture
def cassette_client(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[str, str | None], IngestClient]]:
    """``make(cassette_name, token)`` -> an IngestClient whose one session records
    (FRAMEWORK_RECORD_CASSETTES=1, against a real server) or replays."""
    recorders: list[Betamax] = []
    server_url = PLACEHOLDER_BASE
    if RECORD:
        make_server = request.getfixturevalue("make_ingest_server")
        server_url = make_server(token=RECORD_TOKEN).url

    def make(name: str, token: str | None = USE_RECORD_TOKEN) -> IngestClient:
        session = requests.Session()
        recorder = Betamax(session, cassette_library_dir=str(CASSETTES))
        if RECORD:
            # new_episodes on an empty cassette records every request, repeats included
            # (mode "all" would overwrite an earlier identical one).
            (CASSETTES / f"{name}.json").unlink(missing_ok=True)
        real_token = RECORD_TOKEN if RECORD else REPLAY_TOKEN
        recorder.use_cassette(
            name,
            record="new_episodes" if RECORD else "none",
            match_requests_on=["method", "ship-items"],
            # An identical repeat of a delivery gets the recorded answer again, which is
            # what the server does for a repeated Idempotency-Key with the same body.
            allow_playback_repeats=True,
            serialize_with="json",
            placeholders=[
                {"placeholder": TOKEN_PLACEHOLDER, "replace": real_token},
                {"placeholder": PLACEHOLDER_BASE, "replace": server_url},
            ],
        )
        recorder.start()
        recorders.append(recorder)
        chosen = real_token if token is USE_RECORD_TOKEN else token
        return IngestClient(server_url, chosen, session_factory=lambda: session)

    yield make
    for recorder in recorders:
        recorder.stop()
    if RECORD:
        for path in CASSETTES.glob("*.json"):
            text = path.read_text()
            assert RECORD_TOKEN not in text, f"token leaked into {path.name}"


def outcome_of(reply: Reply, sent: dict[str, Any]) -> Outcome | Verdict | None:
    """The outcome of a success (None: not the contract's answer), else the verdict."""
    assert reply.status is not None
    verdict = classify_status(reply.status)
    if verdict is not Verdict.SUCCESS:
        return verdict
    return contract_outcome(reply.status, reply.body, sent["dedupe_key"], sent["content_hash"])


def test_accepted_replayed_updated_and_a_reverted_version(
    cassette_client: Callable[..., IngestClient],
) -> None:
    client = cassette_client("ship_single")
    first = client.post_item(body("1"))
    assert (first.status, outcome_of(first, body("1"))) == (201, Outcome.ACCEPTED)
    # The same delivery again (a kill -9 lost the answer): the server replays it.
    replay = client.post_item(body("1"))
    assert (replay.status, outcome_of(replay, body("1"))) == (201, Outcome.ACCEPTED)
    # The real server's answer is the contract's: another item's key is not a success.
    assert contract_outcome(201, replay.body, "cassette:2") is None
    v2 = body("1", version=2)
    updated = client.post_item(v2)
    assert (updated.status, outcome_of(updated, v2)) == (200, Outcome.UPDATED)
    # The content goes back to version 1, re-scraped later: reusing the first key with
    # a different payload is refused, and the redelivery key gets it stored.
    back = body("1", version=1)
    back["scraped_at"] = "2026-11-29T18:00:00+00:00"
    refused = client.post_item(back)
    assert refused.status == 422
    assert key_reused(refused.body)
    redelivered = client.post_item(back, redelivery_key(back))
    assert (redelivered.status, outcome_of(redelivered, back)) == (200, Outcome.UPDATED)


def test_duplicate(cassette_client: Callable[..., IngestClient]) -> None:
    client = cassette_client("ship_duplicate")
    assert outcome_of(client.post_item(body("2")), body("2")) is Outcome.ACCEPTED
    # Same key, same content, another delivery (another key): a duplicate, no change.
    again = body("2")
    again["scraped_at"] = "2026-11-29T13:00:00+00:00"
    reply = client.post_item(again, redelivery_key(again))
    assert (reply.status, outcome_of(reply, again)) == (200, Outcome.DUPLICATE)


def test_422_rejection_carries_the_servers_detail(
    cassette_client: Callable[..., IngestClient],
) -> None:
    client = cassette_client("ship_rejected")
    sent = body("3", source_id_in_key="not-3")
    reply = client.post_item(sent)
    assert reply.status == 422
    assert outcome_of(reply, sent) is Verdict.REJECTED
    assert reply.detail is not None
    assert "dedupe_key" in reply.detail


def test_401_and_403_are_auth(cassette_client: Callable[..., IngestClient]) -> None:
    missing = cassette_client("ship_unauthorized", token=None).post_item(body("4"))
    assert missing.status == 401
    assert outcome_of(missing, body("4")) is Verdict.AUTH
    wrong = cassette_client("ship_forbidden", token="not-the-token").post_item(body("4"))
    assert wrong.status == 403
    assert outcome_of(wrong, body("4")) is Verdict.AUTH


def test_batch_answers_one_result_per_item(cassette_client: Callable[..., IngestClient]) -> None:
    client = cassette_client("ship_batch")
    earlier = body("b2")
    earlier["scraped_at"] = "2026-11-29T06:00:00+00:00"
    assert outcome_of(client.post_item(earlier), earlier) is Outcome.ACCEPTED
    items = [body("b1"), body("b2"), body("b3", version=2), body("b4", source_id_in_key="x")]
    # b2 again, a new scrape of the same content: a new delivery, so a new key.
    reply = client.post_batch(items, [None, redelivery_key(items[1]), None, None])
    assert reply.status == 200
    stored = [_stored(b) for b in items]
    verdicts = batch_verdicts(reply.body, stored)
    assert verdicts is not None  # the real server's answer is one valid result per item
    outcomes = [verdict[1] for _entry, verdict in verdicts]
    assert outcomes == [Outcome.ACCEPTED, Outcome.DUPLICATE, Outcome.ACCEPTED, Outcome.REJECTED]
    # The same answer for the items in another order is not theirs.
    assert batch_verdicts(reply.body, [stored[1], stored[0], *stored[2:]]) is None


def _stored(b: dict[str, Any]) -> StoredItem:
    return StoredItem(
        dedupe_key=b["dedupe_key"],
        source_type=b["source_type"],
        source_id=b["source_id"],
        data=b["data"],
        content_hash=b["content_hash"],
        first_scraped=b["scraped_at"],
        last_scraped=b["scraped_at"],
        complete=True,
        row_id=None,
    )


def test_cassettes_hold_no_token_and_no_port() -> None:
    names = sorted(p.name for p in CASSETTES.glob("*.json"))
    assert names == [
        "ship_batch.json",
        "ship_duplicate.json",
        "ship_forbidden.json",
        "ship_rejected.json",
        "ship_single.json",
        "ship_unauthorized.json",
    ]
    for name in names:
        text = (CASSETTES / name).read_text()
        assert RECORD_TOKEN not in text
        assert "127.0.0.1" not in text
        recorded = json.loads(text)
        for interaction in recorded["http_interactions"]:
            assert interaction["request"]["uri"].startswith(PLACEHOLDER_BASE)
            auth = interaction["request"]["headers"].get("Authorization", [""])
            assert all(a in ("", f"Bearer {TOKEN_PLACEHOLDER}") or "not-the-token" in a
                       for a in auth)  # fmt: skip
