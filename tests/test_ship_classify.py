"""framework_ship.classify: status codes and network errors -> verdicts and outcomes."""

from __future__ import annotations

import pytest
import requests
from framework_ship.classify import (
    Outcome,
    Verdict,
    classify_exception,
    classify_status,
    success_outcome,
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
    assert success_outcome(201, {"status": "accepted"}) is Outcome.ACCEPTED
    assert success_outcome(200, {"status": "duplicate"}) is Outcome.DUPLICATE
    assert success_outcome(200, {"status": "updated"}) is Outcome.UPDATED
    assert success_outcome(201, None) is Outcome.ACCEPTED
    assert success_outcome(200, {"outcome": "UPDATED"}) is Outcome.UPDATED
    assert {o for o in Outcome if o.success} == {"accepted", "updated", "duplicate"}
