"""Retry policy of the shipper: plain numbers in, tenacity strategies out.

Owns *when* to try again and for how long: exponential backoff with jitter between
attempts, bounded by attempts and by total time, and ``Retry-After`` (RFC 9110
delta-seconds or HTTP-date) honoured up to a cap. The policy is kept as plain numbers
(:class:`RetryPolicy`) because tenacity objects do not pickle and settings should not
hold behaviour; :func:`build_retrying` composes the tenacity objects per delivery.
It knows nothing of HTTP status codes (that is :mod:`framework_ship.classify`) and
never sleeps by itself: ``sleep`` is injected so tests never wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from framework.http_dates import parse_retry_after as parse_retry_after  # the one reader

DEFAULT_RETRY_AFTER_CAP = 300.0


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one delivery (one item or one batch) is tried before it counts as
    ``error`` for this run. Seconds everywhere."""

    max_attempts: int = 5
    max_delay: float = 120.0  # total time budget of one delivery, sleeps included
    initial_wait: float = 0.5  # first backoff; doubles each attempt
    max_wait: float = 30.0  # one backoff never exceeds this (Retry-After may)
    jitter: float = 0.5  # uniform [0, jitter) added to each backoff
    retry_after_cap: float = DEFAULT_RETRY_AFTER_CAP  # a longer demand is a checkpoint

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        for name in ("max_delay", "initial_wait", "max_wait", "jitter", "retry_after_cap"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


class HasRetryAfter(Protocol):
    """What a delivery attempt returns: whether something is left to retry, and the
    server's Retry-After demand (seconds) if it gave one."""

    @property
    def retry_wanted(self) -> bool: ...

    @property
    def retry_after(self) -> float | None: ...


class wait_backoff_or_retry_after(wait_base):
    """Exponential backoff with jitter, but never shorter than the server asked."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._backoff = wait_exponential_jitter(
            multiplier=policy.initial_wait, max=policy.max_wait, jitter=policy.jitter
        )

    def __call__(self, retry_state: RetryCallState) -> float:
        backoff = float(self._backoff(retry_state))
        outcome = retry_state.outcome
        if outcome is None or outcome.failed:
            return backoff
        demanded = getattr(outcome.result(), "retry_after", None)
        if demanded is None:
            return backoff
        return max(backoff, float(demanded))


class stop_after_idle(stop_base):
    """Stop once the sleeps already requested reach ``max_delay``.

    Complements ``stop_after_delay`` (wall clock): with an injected sleep no wall time
    passes, and this still bounds a delivery by the time it *would* have taken.
    """

    def __init__(self, max_delay: float) -> None:
        self.max_delay = max_delay

    def __call__(self, retry_state: RetryCallState) -> bool:
        return retry_state.idle_for >= self.max_delay


def build_retrying(
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> Retrying:
    """A tenacity ``Retrying`` that calls an attempt function returning a
    :class:`HasRetryAfter`, retries while ``retry_wanted``, and hands back the last
    result when attempts or time run out (the caller marks what is left ``error``).
    Exceptions raised by the attempt function (a checkpoint, a halt) are not retried."""
    return Retrying(
        sleep=sleep,
        stop=(
            stop_after_attempt(policy.max_attempts)
            | stop_after_delay(policy.max_delay)
            | stop_after_idle(policy.max_delay)
        ),
        wait=wait_backoff_or_retry_after(policy),
        retry=retry_if_result(lambda result: bool(result.retry_wanted)),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
    )
