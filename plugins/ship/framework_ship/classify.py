"""Failure classes of one delivery: what an HTTP answer or a network error means.

Owns the mapping from a status code or an exception to a :class:`Verdict` and, for
successes, to the per-item outcome word of the contract (``accepted`` / ``updated`` /
``duplicate``). It never retries, sleeps or logs: :mod:`framework_ship.policy` decides
when, :mod:`framework_ship.run` decides what to do with a verdict.

    success    2xx                                   -> accepted | updated | duplicate
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


def success_outcome(status: int, body: Any) -> Outcome:
    """The contract: 201 accepted; 200 duplicate (same key and hash) or updated (new
    hash), said by the body's ``outcome`` (or ``status``/``result``) word."""
    word = _outcome_word(body)
    if word is not None:
        try:
            outcome = Outcome(word)
        except ValueError:
            outcome = None
        if outcome is not None and outcome.success:
            return outcome
    if status == 201 or word == "created":
        return Outcome.ACCEPTED
    # A 200 that does not say which: the server already held a version of this key.
    return Outcome.DUPLICATE


def _outcome_word(body: Any) -> str | None:
    if not isinstance(body, Mapping):
        return None
    for name in ("outcome", "result", "status"):
        value = body.get(name)
        if isinstance(value, str):
            return value.lower()
    return None
