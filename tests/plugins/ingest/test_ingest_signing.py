"""Signed deliveries (``X-Framework-Signature: t=<unix>,v1=<hex>``, HMAC-SHA256 over
``f"{t}."`` + the exact body): unsigned, tampered, stale and replayed writes are refused
with a 401 problem and write nothing; both secrets of a rotation are accepted; the
replay memory is in the database, so a second server process refuses a replay too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from framework_ingest.signing import HEADER, sign

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item, signed_headers

FRAMEWORK = str(Path(sys.executable).parent / "framework")
OLD, NEW = "old-secret-0123456789", "new-secret-9876543210"


@pytest.fixture
def signed_server(
    make_ingest_server: Callable[..., IngestServer], ingest_backend: str
) -> IngestServer:
    return make_ingest_server(backend=ingest_backend, signing_secrets=(OLD, NEW))


def _body(source_id: str = "1", data: dict[str, object] | None = None) -> bytes:
    return json.dumps(make_item(source_id, data)).encode()


def _post(
    s: IngestServer, body: bytes, headers: dict[str, str], route: str = "/v1/items"
) -> requests.Response:
    return requests.post(f"{s.url}{route}", data=body, headers=headers, timeout=10)


def _refused(r: requests.Response, slug: str) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.json()["type"] == f"urn:framework:ingest:{slug}"
    assert "Signature" in r.headers["WWW-Authenticate"]
    assert OLD not in r.text
    assert NEW not in r.text


def _nothing_written(s: IngestServer) -> None:
    assert s.rows() == []
    assert s.events() == []


@pytest.mark.parametrize("route", ["/v1/items", "/v1/items/batch"])
def test_unsigned_and_malformed_are_refused(signed_server: IngestServer, route: str) -> None:
    s = signed_server
    body = _body() if route == "/v1/items" else b"[" + _body() + b"]"
    _refused(_post(s, body, {"Content-Type": "application/json"}), "signature-required")
    now = int(time.time())
    for bad in (
        "v1=" + sign(OLD, body, now),  # no t
        f"t={now}",  # no v1
        f"t=soon,v1={sign(OLD, body, now)}",
        f"t={now},t={now},v1={sign(OLD, body, now)}",
        "garbage",
    ):
        _refused(_post(s, body, {HEADER: bad}), "signature-invalid")
    _nothing_written(s)


def test_tampered_body_or_wrong_secret_is_refused(signed_server: IngestServer) -> None:
    s = signed_server
    body = _body("1", {"amount": 100})
    headers = signed_headers(OLD, body)
    tampered = body.replace(b"100", b"900")
    _refused(_post(s, tampered, headers), "signature-invalid")
    _refused(_post(s, body + b" ", headers), "signature-invalid")  # not even whitespace
    _refused(_post(s, body, signed_headers("someone-else", body)), "signature-invalid")
    _nothing_written(s)


@pytest.mark.parametrize("offset", [-400, 400, -100_000])  # far from the 300 s edge
def test_a_signature_outside_the_skew_is_refused(signed_server: IngestServer, offset: int) -> None:
    s = signed_server
    body = _body()
    r = _post(s, body, signed_headers(NEW, body, int(time.time()) + offset))
    _refused(r, "signature-expired")
    _nothing_written(s)


def test_a_replay_is_refused_by_every_server_process(
    signed_server: IngestServer, make_ingest_server: Callable[..., IngestServer]
) -> None:
    s = signed_server
    body = _body()
    t0 = int(time.time())
    headers = signed_headers(OLD, body, t0)
    assert _post(s, body, headers).status_code == 201
    _refused(_post(s, body, headers), "signature-replayed")
    other = make_ingest_server(db_url=s.db_url, signing_secrets=(OLD, NEW))  # same database
    _refused(_post(other, body, headers), "signature-replayed")
    # the same body signed anew (another t) is a fresh request: a duplicate, not a refusal
    again = signed_headers(OLD, body, t0 - 5)
    r = _post(other, body, again)
    assert (r.status_code, r.json()["status"]) == (200, "duplicate")
    assert [e["type"] for e in s.events()] == ["accepted"]


def test_both_secrets_of_a_rotation_are_accepted(signed_server: IngestServer) -> None:
    s = signed_server
    b1, b2, b3 = _body("1"), _body("2"), _body("3")
    assert _post(s, b1, signed_headers(OLD, b1)).status_code == 201
    assert _post(s, b2, signed_headers(NEW, b2)).status_code == 201
    t = int(time.time())
    both = {HEADER: f"t={t},v1={sign(OLD, b3, t)},v1={sign(NEW, b3, t)}"}
    assert _post(s, b3, both).status_code == 201
    # each v1 of that header is spent: replaying just one of them is still a replay
    _refused(_post(s, b3, {HEADER: f"t={t},v1={sign(NEW, b3, t)}"}), "signature-replayed")
    # an unknown entry beside a valid one is ignored (a future scheme, a retired secret)
    b4 = _body("4")
    mixed = {HEADER: f"t={t},v0=abc,v1={'0' * 64},v1={sign(NEW, b4, t)}"}
    assert _post(s, b4, mixed).status_code == 201
    batch = json.dumps([make_item("5")]).encode()
    r = _post(s, batch, signed_headers(NEW, batch), "/v1/items/batch")
    assert r.json()["results"][0]["status"] == "accepted"
    assert len(s.rows()) == 5


def test_signing_and_a_bearer_token_together(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    s = make_ingest_server(token="tok", signing_secrets=(NEW,))
    body = _body()
    r = _post(s, body, signed_headers(NEW, body))  # signed, but no token: the token first
    assert (r.status_code, r.json()["type"]) == (401, "urn:framework:ingest:unauthorized")
    r = _post(s, body, {**signed_headers(NEW, body), "Authorization": "Bearer tok"})
    assert r.status_code == 201
    # reads are not signed (there is no body to sign); the token guards them
    assert requests.get(f"{s.url}/v1/items/test:1", headers=s.auth_headers(), timeout=10).ok


def test_the_openapi_document_describes_the_signature(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    s = make_ingest_server(signing_secrets=(NEW,))
    doc = requests.get(f"{s.url}/openapi.json", timeout=10).json()
    names = [p["name"] for p in doc["paths"]["/v1/items"]["post"]["parameters"]]
    assert HEADER in names
    assert doc["paths"]["/v1/items/batch"]["post"]["parameters"][0]["name"] == HEADER


@pytest.mark.kill
def test_serve_reads_the_secrets_from_the_environment_and_never_prints_them(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "FRAMEWORK_INGEST_SIGNING_SECRETS": f"{OLD}, {NEW}"}
    proc = procs.popen(
        [FRAMEWORK, "ingest", "serve", "--db", f"sqlite:///{tmp_path / 'i.db'}", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", first)
        assert match, first
        assert "signing 2 secret(s)" in first
        url = match.group(1)
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{url}/healthz", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        body = _body()
        r = requests.post(f"{url}/v1/items", data=body, timeout=10)
        assert r.status_code == 401
        r = requests.post(
            f"{url}/v1/items", data=body, headers=signed_headers(NEW, body), timeout=10
        )
        assert r.status_code == 201
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    for secret in (OLD, NEW):
        assert secret not in first + out + err


def test_used_signatures_are_forgotten_once_outside_the_window(
    signed_server: IngestServer,
) -> None:
    from datetime import UTC, datetime, timedelta

    from framework_ingest import retention

    s = signed_server
    now = int(time.time())
    old, young = _body("1"), _body("2")
    assert _post(s, old, signed_headers(OLD, old, now - 250)).status_code == 201
    assert _post(s, young, signed_headers(OLD, young, now)).status_code == 201
    backend = s.store.backend
    assert retention.purge_signatures(backend) == 0  # both still inside their window
    later = datetime.fromtimestamp(now, UTC) + timedelta(seconds=100)  # old's t + 350 s
    assert retention.purge_signatures(backend, now=later) == 1
    with backend.transaction(write=False) as tx:
        assert int(tx.execute("SELECT COUNT(*) FROM used_signatures")[0][0]) == 1
