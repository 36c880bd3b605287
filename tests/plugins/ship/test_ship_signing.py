"""Signed deliveries, the client half: ``X-Framework-Signature: t=<unix>,v1=<hex>`` over
the exact body bytes, checked here with an independent HMAC computation against what the
fault endpoint received; re-signed on every attempt; the secret from the environment
variable ``--signing-secret-env`` names (default ``FRAMEWORK_SHIP_SIGNING_SECRET``),
never written or printed; and end to end against the real ingest server verifying it."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from framework_ship.client import IngestClient
from framework_ship.deliver import item_body
from framework_ship.policy import RetryPolicy
from framework_ship.run import ShipOptions, Shipper

from framework.cli import main
from framework.workspace import Workspace
from tests.fixtures.ship import FakeTime, Fault, FaultEndpoint, Seen

SECRET = "whsec-3b9f-a-shared-secret"
POLICY = RetryPolicy(max_attempts=4, initial_wait=1, jitter=0, retry_after_cap=300)
_HEADER = re.compile(r"^t=(\d+),v1=([0-9a-f]{64})$")


def verify(seen: Seen, secret: str = SECRET) -> int:
    """The t of a request whose signature is right for its exact body bytes."""
    match = _HEADER.match(seen.headers["X-Framework-Signature"])
    assert match, seen.headers["X-Framework-Signature"]
    t = int(match.group(1))
    expected = hmac.new(secret.encode(), f"{t}.".encode() + seen.raw, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(match.group(2), expected)
    return t


def ship(ws: Workspace, endpoint: FaultEndpoint, fake: FakeTime, **options: Any) -> None:
    options.setdefault("policy", POLICY)
    Shipper(
        ws,
        ShipOptions(endpoint=endpoint.url, **options),
        echo=lambda line: None,
        notice=lambda line: None,
        sleep=fake.sleep,
        clock=fake.clock,
        signing_secret=SECRET,
    ).run()


@pytest.mark.parametrize("batch_size", [1, 3])
def test_every_attempt_is_signed_anew_over_its_exact_body(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    batch_size: int,
) -> None:
    ws = make_ship_workspace(3)
    fake = FakeTime()
    path = "/v1/items" if batch_size == 1 else "/v1/items/batch"
    fault_endpoint.script(path, Fault(status=503, headers={"Retry-After": "7"}))
    ship(ws, fault_endpoint, fake, batch_size=batch_size)
    seen = fault_endpoint.requests
    assert len(seen) == (4 if batch_size == 1 else 2)
    stamps = [verify(r) for r in seen]
    start = int(FakeTime().now)
    # The retry went out 7 s later with a signature of its own, at its own time.
    assert stamps[:2] == [start, start + 7]
    assert seen[0].raw == seen[1].raw
    assert seen[0].headers["X-Framework-Signature"] != seen[1].headers["X-Framework-Signature"]
    # A signature does not fit another body (here: the next item's, or a tampered one).
    if batch_size == 1:
        other = Seen(seen[2].method, seen[2].path, seen[0].headers, seen[2].body, seen[2].raw)
        with pytest.raises(AssertionError):
            verify(other)
    tampered = Seen("POST", path, seen[1].headers, None, seen[1].raw.replace(b"case", b"Case"))
    with pytest.raises(AssertionError):
        verify(tampered)
    with pytest.raises(AssertionError):
        verify(seen[1], secret="another-secret")


def test_the_same_body_twice_in_one_second_gets_two_signatures(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    """The server accepts a signature once. A redelivery (the same body under another
    Idempotency-Key header) goes out at once: it must not repeat the signature."""
    ws = make_ship_workspace(1)
    client = IngestClient(fault_endpoint.url, signing_secret=SECRET, clock=lambda: 1_900_000_000.4)
    body = item_body(next(iter(ws.store.iter_items())))
    client.post_item(body, "k@1")
    client.post_item(body, "k@1@2")
    first, second = fault_endpoint.requests
    assert first.raw == second.raw
    assert [verify(first), verify(second)] == [1_900_000_000, 1_900_000_001]


def _cli(ws: Workspace, url: str, *extra: str) -> int:
    return main(["ship", "job", "--workspace", str(ws.path), "--endpoint", url, *extra])


def test_the_secret_comes_from_the_environment_and_is_never_written_or_printed(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FRAMEWORK_SHIP_SIGNING_SECRET", raising=False)
    ws = make_ship_workspace(4)
    # Unset: unsigned.
    assert _cli(ws, fault_endpoint.url, "--only", "test:000000") == 0
    assert "X-Framework-Signature" not in fault_endpoint.requests[-1].headers
    # The default variable set: signed.
    monkeypatch.setenv("FRAMEWORK_SHIP_SIGNING_SECRET", SECRET)
    assert _cli(ws, fault_endpoint.url, "--only", "test:000001") == 0
    verify(fault_endpoint.requests[-1])
    # Another variable, named on purpose.
    monkeypatch.setenv("MY_SHIP_SECRET", "rotated-" + SECRET)
    assert _cli(ws, fault_endpoint.url, "--signing-secret-env", "MY_SHIP_SECRET") == 0
    for seen in fault_endpoint.requests[2:]:
        verify(seen, secret="rotated-" + SECRET)
    sent = len(fault_endpoint.requests)
    # A variable named on purpose but unset, or set but empty: a usage error, nothing sent.
    assert _cli(ws, fault_endpoint.url, "--signing-secret-env", "NO_SUCH_SECRET_VAR") == 2
    monkeypatch.setenv("FRAMEWORK_SHIP_SIGNING_SECRET", "")
    assert _cli(ws, fault_endpoint.url) == 2
    assert len(fault_endpoint.requests) == sent
    captured = capsys.readouterr()
    assert "NO_SUCH_SECRET_VAR" in captured.err
    for text in (captured.out, captured.err):
        assert SECRET not in text
    for path in ws.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path.name


def test_end_to_end_against_the_real_server_verifying_signatures(
    make_ship_workspace: Callable[..., Workspace],
    make_ingest_server: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real server with two secrets (a rotation): the shipper signing with either
    is accepted, one by one and in batches; an unsigned or wrongly signed shipper is
    refused (401: exit 4) and nothing is written."""
    server = make_ingest_server(signing_secrets=("old-" + SECRET, SECRET))
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FRAMEWORK_SHIP_SIGNING_SECRET", raising=False)
    ws = make_ship_workspace(6)
    assert _cli(ws, server.url, "--only", "test:000000") == 4  # unsigned
    monkeypatch.setenv("FRAMEWORK_SHIP_SIGNING_SECRET", "not-" + SECRET)
    assert _cli(ws, server.url, "--only", "test:000000") == 4  # the wrong secret
    assert server.rows() == []
    monkeypatch.setenv("FRAMEWORK_SHIP_SIGNING_SECRET", "old-" + SECRET)
    assert _cli(ws, server.url, "--batch-size", "1", "--only", "test:000000",
                "--only", "test:000001") == 0  # fmt: skip
    monkeypatch.setenv("FRAMEWORK_SHIP_SIGNING_SECRET", SECRET)
    assert _cli(ws, server.url, "--batch-size", "2") == 0
    assert len(server.rows()) == 6
    # Re-shipping after the log is gone: the same bodies again, each signed anew (a
    # repeated signature would be refused as a replay), answered as stored before.
    (ws.path / "ship-log.jsonl").unlink()
    (ws.path / "ship-index.sqlite").unlink()
    assert _cli(ws, server.url, "--batch-size", "1") == 0
    outcomes = [json.loads(x)["outcome"] for x in (ws.path / "ship-log.jsonl").open()]
    assert outcomes == ["accepted"] * 6  # the stored answers to their Idempotency-Keys
    assert len(server.rows()) == 6
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
