"""Failure classes of one delivery: what an HTTP answer or a network error means.

Owns the mapping from a status code or an exception to a :class:`Verdict` and, for
successes, to the per-item outcome word of the contract (``accepted`` / ``updated`` /
``duplicate``). It never retries, sleeps or logs: :mod:`framework_ship.policy` decides
when, :mod:`framework_ship.run` decides what to do with a verdict.

    success    2xx                                   -> accepted | updated | duplicate,
               only with the contract's answer (:func:`contract_outcome`), else transient
    transient  connect errors, timeouts, resets, 5xx, 408, 409, 425, 429 -> try again
    rejected   400, 413 (single item), 422 and any other 4xx -> needs review, move on
    auth       401, 403                              -> halt the run (exit 4)
    moved      404, 405                              -> the endpoint moved: fallback path
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import requests


class Verdict(StrEnum):
    SUCCESS = "success"
    TRANSIENT = "transient"
    REJECTED = "rejected"
    AUTH = "auth"
    MOVED = "moved"


class Outcome(StrEnum):
    """Per-item outcome words of the contract (DESIGN.md, "Ship outcomes")."""

    ACCEPTED = "accepted"
    UPDATED = "updated"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    ERROR = "error"
    SKIPPED = "skipped"

    @property
    def success(self) -> bool:
        return self in SUCCESS_OUTCOMES


SUCCESS_OUTCOMES = frozenset({Outcome.ACCEPTED, Outcome.UPDATED, Outcome.DUPLICATE})

_TRANSIENT_4XX = frozenset({408, 409, 425, 429})


def classify_status(status: int) -> Verdict:
    if 200 <= status < 300:
        return Verdict.SUCCESS
    if status in (401, 403):
        return Verdict.AUTH
    if status in (404, 405):
        return Verdict.MOVED
    if status in _TRANSIENT_4XX or status >= 500:
        return Verdict.TRANSIENT
    # 400, 413, 422, other 4xx and unexpected 1xx/3xx: asking again will not help.
    return Verdict.REJECTED


def classify_exception(exc: BaseException) -> tuple[Verdict, str]:
    """A network failure -> (verdict, error class). Only transport errors are
    transient; anything else is a bug and must not be swallowed as a retry."""
    if isinstance(exc, requests.exceptions.Timeout):
        return Verdict.TRANSIENT, "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        text = repr(exc).lower()
        if "reset" in text or "aborted" in text or "remotedisconnected" in text:
            return Verdict.TRANSIENT, "reset"
        return Verdict.TRANSIENT, "connect"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError | ConnectionError):
        return Verdict.TRANSIENT, "reset"
    raise exc


def error_class_for_status(status: int) -> str | None:
    if 200 <= status < 300:
        return None
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "http_5xx"
    return f"http_{status}"


def contract_outcome(
    status: int, body: Any, dedupe_key: str, content_hash: str | None = None
) -> Outcome | None:
    """The success outcome of a 2xx answer, or None when it is not the contract's answer.

    The contract (docs/ingest-contract.md) answers ``201 {"status": "accepted",
    "dedupe_key", "content_hash", "version"}`` or ``200 {"status": "duplicate" |
    "updated", ...}``. Anything else under a 2xx (an HTML page from a proxy, an empty
    body, a 204, another item's answer) proves nothing was stored: the caller treats it
    as a transient failure, never as a delivery. ``dedupe_key`` must be the item's own;
    ``content_hash``, when the answer carries one, too."""
    if not isinstance(body, Mapping):
        return None
    word = body.get("status")
    if not isinstance(word, str):
        return None
    expected = _SUCCESS_BY_CODE.get(status)
    if expected is None or word not in expected:
        return None
    if body.get("dedupe_key") != dedupe_key:
        return None
    answered_hash = body.get("content_hash")
    if content_hash is not None and answered_hash is not None and answered_hash != content_hash:
        return None
    return expected[word]


# The only success codes of the contract, and the words each may carry.
_SUCCESS_BY_CODE: dict[int, dict[str, Outcome]] = {
    201: {"accepted": Outcome.ACCEPTED},
    200: {"duplicate": Outcome.DUPLICATE, "updated": Outcome.UPDATED},
}
