"""Injected faults of the demo site: error answers with ``Retry-After``, on purpose.

Owns the fault rules and their hit bookkeeping. A rule matches request targets
(``path?query``) with a shell pattern and answers ``status`` instead of the page: on
the first ``times`` hits of *each* matching target, or always when ``times`` is None.
``Retry-After`` comes as delta-seconds or as an HTTP-date (RFC 9110 allows both). It
knows nothing of sockets; the caller serialises access (one lock in :mod:`.site`).

Command-line form (``--fault``, repeatable)::

    PATTERN@STATUS[*TIMES][,ra=SECONDS|,ra-date=SECONDS]

    /cases?page=3@429*2,ra=1            first 2 hits answer 429, Retry-After: 1
    /cases/*@503*1,ra-date=2            every detail page's first hit: 503 with a date
    /cases/C2024-0005/tab/rulings@500   always 500
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from framework.demo.pages import Page


@dataclass(frozen=True)
class Fault:
    pattern: str  # shell pattern over the request target, e.g. "/cases/*/tab/rulings"
    status: int = 503
    times: int | None = None  # None: always
    retry_after: int | None = None  # seconds
    retry_after_date: bool = False  # send Retry-After as an HTTP-date instead of seconds
    method: str | None = None  # only this method (GET/POST); None: any

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"a fault answers an error status (400-599), not {self.status}")
        if self.times is not None and self.times < 1:
            raise ValueError("a fault's times is at least 1 (omit it for always)")

    @property
    def permanent(self) -> bool:
        return self.times is None

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Read the command-line form (see the module docstring)."""
        pattern, sep, rest = text.rpartition("@")
        if not sep or not pattern:
            raise ValueError(f"fault {text!r}: expected PATTERN@STATUS[*TIMES][,ra=N|,ra-date=N]")
        head, *options = rest.split(",")
        status_s, _, times_s = head.partition("*")
        kwargs: dict[str, Any] = {"pattern": pattern, "status": int(status_s)}
        if times_s:
            kwargs["times"] = int(times_s)
        for option in options:
            key, _, value = option.partition("=")
            if key == "ra":
                kwargs["retry_after"] = int(value)
            elif key == "ra-date":
                kwargs["retry_after"] = int(value)
                kwargs["retry_after_date"] = True
            else:
                raise ValueError(f"fault {text!r}: unknown option {key!r} (ra, ra-date)")
        return cls(**kwargs)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Fault:
        return cls(**dict(value))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class FaultState:
    """The active rules, and how often each rule has fired on each target."""

    def __init__(
        self, faults: tuple[Fault, ...] = (), clock: Callable[[], float] = time.time
    ) -> None:
        self.faults = tuple(faults)
        self._fired: dict[tuple[int, str], int] = {}
        self._clock = clock

    def replace(self, faults: tuple[Fault, ...]) -> None:
        self.faults = tuple(faults)
        self._fired.clear()

    def answer(self, method: str, target: str) -> tuple[Page, tuple[tuple[str, str], ...]] | None:
        """The error page (and extra headers) this request gets, or None for the real page."""
        for n, fault in enumerate(self.faults):
            if fault.method is not None and fault.method != method:
                continue
            if not fnmatchcase(target, fault.pattern):
                continue
            fired = self._fired.get((n, target), 0)
            if fault.times is not None and fired >= fault.times:
                continue
            self._fired[(n, target)] = fired + 1
            headers: tuple[tuple[str, str], ...] = ()
            if fault.retry_after is not None:
                if fault.retry_after_date:
                    when = email.utils.formatdate(self._clock() + fault.retry_after, usegmt=True)
                    headers = (("Retry-After", when),)
                else:
                    headers = (("Retry-After", str(fault.retry_after)),)
            body = f"injected fault: {fault.status}\n".encode()
            return Page(fault.status, "text/plain", body), headers
        return None

    def permanent_targets(self) -> tuple[str, ...]:
        """Patterns that always fail (used to adjust the truth's incomplete records)."""
        return tuple(f.pattern for f in self.faults if f.permanent)
