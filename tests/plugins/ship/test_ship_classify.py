"""framework_ship.classify: status codes and network errors -> verdicts and outcomes."""

from __future__ import annotations

import pytest
import requests
from framework_ship.classify import (
    Outcome,
    Verdict,
    classify_exception,
    classify_status,
    contract_outcome,
)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.SUCCESS),
        (201, Verdict.SUCCESS),
        (400, Verdict.REJECTED),
        (413, Verdict.REJECTED),
        (422, Verdict.REJECTED),
        (401, Verdict.AUTH),
        (403, Verdict.AUTH),
        (404, Verdict.MOVED),
        (405, Verdict.MOVED),
        (408, Verdict.TRANSIENT),
        (409, Verdict.TRANSIENT),
        (429, Verdict.TRANSIENT),
        (500, Verdict.TRANSIENT),
        (502, Verdict.TRANSIENT),
        (503, Verdict.TRANSIENT),
        (302, Verdict.REJECTED),
    ],
)
def test_status_verdicts(status: int, verdict: Verdict) -> None:
    assert classify_status(status) is verdict


def test_transport_errors_are_transient_with_a_class() -> None:
    assert classify_exception(requests.exceptions.ConnectTimeout()) == (
        Verdict.TRANSIENT,
        "timeout",
    )
    assert classify_exception(requests.exceptions.ReadTimeout()) == (Verdict.TRANSIENT, "timeout")
    reset = requests.exceptions.ConnectionError(ConnectionResetError(104, "Connection reset"))
    assert classify_exception(reset) == (Verdict.TRANSIENT, "reset")
    refused = requests.exceptions.ConnectionError("Failed to establish a new connection")
    assert classify_exception(refused) == (Verdict.TRANSIENT, "connect")


def test_a_bug_is_not_a_retry() -> None:
    with pytest.raises(KeyError):
        classify_exception(KeyError("oops"))


def test_success_words() -> None:
    def answer(word: str, key: str = "a:1", **more: str) -> dict[str, str]:
        return {"status": word, "dedupe_key": key, **more}

    assert contract_outcome(201, answer("accepted"), "a:1") is Outcome.ACCEPTED
    assert contract_outcome(200, answer("duplicate"), "a:1") is Outcome.DUPLICATE
    assert contract_outcome(200, answer("updated"), "a:1", "h") is Outcome.UPDATED
    assert contract_outcome(200, answer("updated", content_hash="h"), "a:1", "h") is Outcome.UPDATED
    assert {o for o in Outcome if o.success} == {"accepted", "updated", "duplicate"}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (201, None),  # no body, or one that is not JSON (a proxy's HTML page)
        (200, "<html>ok</html>"),
        (200, ["duplicate"]),
        (200, {"status": "accepted", "dedupe_key": "a:1"}),  # 200 never means accepted
        (201, {"status": "duplicate", "dedupe_key": "a:1"}),
        (200, {"status": "DUPLICATE", "dedupe_key": "a:1"}),
        (200, {"outcome": "duplicate", "dedupe_key": "a:1"}),
        (200, {"status": "duplicate"}),  # whose answer?
        (200, {"status": "duplicate", "dedupe_key": "a:2"}),
        (200, {"status": "duplicate", "dedupe_key": "a:1", "content_hash": "other"}),
        (202, {"status": "accepted", "dedupe_key": "a:1"}),
        (204, None),
    ],
)
def test_anything_but_the_contracts_answer_is_no_success(status: int, body: object) -> None:
    assert contract_outcome(status, body, "a:1", "h") is None


def test_a_network_failure_is_told_by_its_innermost_cause() -> None:
    """requests wraps urllib3 wraps the socket's error, each wrapper's text first: cut
    at 200 characters, "Connection refused" was lost from the ship log's detail."""
    import errno
    import socket

    from framework_ship.client import _short

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(requests.exceptions.ConnectionError) as refused:
            requests.post(f"http://127.0.0.1:{port}/v1/items/batch" + "/x" * 80, timeout=5)
    assert _short(refused.value) == (
        f"ConnectionError: [Errno {errno.ECONNREFUSED}] Connection refused"
    )
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(requests.exceptions.ReadTimeout) as silent:
            requests.post(f"http://127.0.0.1:{port}/v1/items", timeout=0.2)
    assert _short(silent.value) == "ReadTimeout: timed out"
    # an error with no cause is told as it is, within 200 characters
    assert _short(ValueError("x" * 500)) == "ValueError: " + "x" * 188
