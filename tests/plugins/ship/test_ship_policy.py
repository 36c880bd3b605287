"""framework_ship.policy: Retry-After parsing, the composed tenacity retrying."""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import formatdate

import pytest
from framework_ship.policy import RetryPolicy, build_retrying, parse_retry_after

NOW = 1_900_000_000.0


def test_retry_after_delta_seconds() -> None:
    assert parse_retry_after("120", NOW) == 120.0
    assert parse_retry_after(" 0 ", NOW) == 0.0


def test_retry_after_imf_fixdate() -> None:
    assert parse_retry_after(formatdate(NOW + 90, usegmt=True), NOW) == pytest.approx(90.0)


def test_retry_after_obsolete_forms() -> None:
    # RFC 9110 5.6.7: recipients must accept RFC 850 and asctime dates too.
    # 1_900_000_000 is Tue, 17 Mar 2030 17:46:40 GMT.
    assert parse_retry_after("Tuesday, 17-Mar-30 17:47:40 GMT", NOW) == pytest.approx(60.0)
    assert parse_retry_after("Tue Mar 17 17:48:40 2030", NOW) == pytest.approx(120.0)


def test_retry_after_past_date_is_now_and_junk_is_none() -> None:
    assert parse_retry_after(formatdate(NOW - 500, usegmt=True), NOW) == 0.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after("-5", NOW) is None
    assert parse_retry_after(None, NOW) is None


@dataclass
class Result:
    retry_wanted: bool
    retry_after: float | None = None


def test_backoff_doubles_without_jitter_and_stops_after_attempts() -> None:
    sleeps: list[float] = []
    calls = []

    def attempt() -> Result:
        calls.append(1)
        return Result(True)

    policy = RetryPolicy(max_attempts=4, initial_wait=1, jitter=0, max_wait=100)
    last = build_retrying(policy, sleeps.append)(attempt)
    assert len(calls) == 4
    assert sleeps == [1, 2, 4]
    assert last.retry_wanted  # exhausted: the caller marks the rest `error`


def test_retry_after_overrides_a_shorter_backoff() -> None:
    sleeps: list[float] = []
    answers = iter([Result(True, 7.0), Result(True, None), Result(False)])
    policy = RetryPolicy(max_attempts=5, initial_wait=1, jitter=0)
    last = build_retrying(policy, sleeps.append)(lambda: next(answers))
    assert sleeps == [7.0, 2]
    assert not last.retry_wanted


def test_jitter_stays_within_bounds() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=6, initial_wait=0.5, jitter=0.5, max_wait=3)
    build_retrying(policy, sleeps.append)(lambda: Result(True))
    assert len(sleeps) == 5  # six attempts, five waits between them
    for n, slept in enumerate(sleeps):
        assert min(0.5 * 2**n, 3) <= slept <= min(0.5 * 2**n + 0.5, 3)


def test_total_delay_bounds_the_retries() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=100, max_delay=10, initial_wait=1, jitter=0)
    build_retrying(policy, sleeps.append)(lambda: Result(True))
    assert sleeps == [1, 2, 4, 8]  # 15 s requested >= 10: no fifth sleep


def test_exceptions_are_not_retried() -> None:
    sleeps: list[float] = []

    def attempt() -> Result:
        raise RuntimeError("a halt")

    with pytest.raises(RuntimeError):
        build_retrying(RetryPolicy(), sleeps.append)(attempt)
    assert sleeps == []


def test_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=-1)
