"""Sites that fight back: per page kind rate limits and the soft-ban detector.

**Rate limits.** A ``rate:`` on a page kind (or a sub-tab) gives its requests a gate of
their own, :class:`RateGate`, a downloader middleware next to the downloader (after
every other middleware's ``process_request``, before any ``process_response``):
``concurrency`` requests in flight at most, and a start at most every
``1 / per_second`` seconds, no jitter. A job-level ``rate:`` is one gate shared by every
request whose kind has no rate of its own. Requests without any rate pass untouched.

Why not Scrapy's download slots (``meta["download_slot"]`` + ``DOWNLOAD_SLOTS``):
measured with Scrapy 2.19 on the asyncio reactor, a slot's ``concurrency`` did not
hold (6 details in flight under ``concurrency: 2``, 8 pages under
``CONCURRENT_REQUESTS_PER_DOMAIN=2``); framework.crawl.downloader now fixes that for
the per-host limit, but a kind's gate must also pace starts (``per_second``) and be
shared by a job-level rate across hosts, so one mechanism of our own serves both. A
request waiting at a gate holds one of ``CONCURRENT_REQUESTS``, as a Retry-After wait
does.

**Soft bans.** A site that blocks a crawler rarely says so with a clean error: it
answers 200 with a captcha, or redirects to ``/captcha``. Stored as a page, that is
garbage (a record with no fields, a detail that "vanished", an error that burns an
attempt). ``blocked:`` rules say what such a page looks like; a response that matches
one is not committed at all: its row stays pending with its attempts untouched, the
runtime records a ``blocked`` event and stops the crawl as a checkpoint (exit 3), and
the next run fetches the row again.

Owns what a rule means and how requests are paced; it never writes the workspace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse
from scrapy.utils.asyncio import call_later, sleep
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from framework.crawl.politeness import WAIT_SLICE, Abandoned, _engine_closing
from framework.extract.patterns import LimitExceeded, SafeRegex, search_bounded
from framework.redact import redact_url

if TYPE_CHECKING:
    from typing import Self

    from parsel import Selector
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from framework.crawl.page import Guard
    from framework.spec.models import BlockRule, JobSpec, RateSpec

logger = logging.getLogger(__name__)

GATE_META = "fw_rate"  # the gate a request waits at
HELD_META = "fw_rate_held"  # set while it holds a place there
JOB_GATE = "job"
REASON_BLOCKED = "blocked"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MIDDLEWARE = "framework.crawl.blocking.RateGate"
# next to the downloader: after RedirectMiddleware (600) and HttpCompression (590) in
# process_request, before them in process_response, so a redirect's next hop is a new
# request that waits again, and the place is given back before the redirect is built
MIDDLEWARE_ORDER = 950


def kind_gate(kind: str) -> str:
    """The gate of a page kind (or sub-tab kind, ``detail.rulings``) with a rate."""
    return f"kind:{kind}"


def kind_rates(spec: JobSpec) -> dict[str, RateSpec]:
    """Row kind -> its own rate: page kinds and sub-tabs (``kind.tab``) that set one."""
    rates: dict[str, RateSpec] = {}
    for name, kind in spec.page_kinds().items():
        if kind.rate is not None:
            rates[name] = kind.rate
        for tname, tab in kind.subtabs.items():
            if tab.rate is not None:
                rates[f"{name}.{tname}"] = tab.rate
    return rates


class Slots:
    """Which gate each row kind's requests wait at, and each gate's rate."""

    def __init__(self, spec: JobSpec) -> None:
        self.rates = kind_rates(spec)
        self.job_rate = spec.rate

    def __bool__(self) -> bool:
        return bool(self.rates) or self.job_rate is not None

    def gates(self) -> dict[str, RateSpec]:
        gates = {kind_gate(k): r for k, r in self.rates.items()}
        if self.job_rate is not None:
            gates[JOB_GATE] = self.job_rate
        return gates

    def meta(self, kind: str) -> dict[str, Any]:
        """The request meta that sends a request of ``kind`` through its gate (none:
        no gate)."""
        if kind in self.rates:
            return {GATE_META: kind_gate(kind)}
        if self.job_rate is not None:
            return {GATE_META: JOB_GATE}
        return {}


@dataclass
class _Gate:
    concurrency: int | None
    interval: float  # seconds between starts; 0: no pacing
    in_flight: int = 0
    next_start: float = 0.0  # monotonic
    waiters: list[Deferred[None]] = field(default_factory=list)


class RateGate:
    """The downloader middleware that holds each gate's requests to its rate."""

    def __init__(
        self, gates: dict[str, RateSpec], is_closing: Callable[[], bool] = lambda: False
    ) -> None:
        self.gates = {
            name: _Gate(rate.concurrency, 1.0 / rate.per_second if rate.per_second else 0.0)
            for name, rate in gates.items()
        }
        self.is_closing = is_closing

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        slots = getattr(crawler.spidercls, "slots", None)
        if not slots:
            raise NotConfigured("no rate in the spec")
        return cls(slots.gates(), is_closing=lambda: _engine_closing(crawler))

    async def process_request(self, request: Request) -> None:
        gate = self.gates.get(request.meta.get(GATE_META, ""))
        if gate is None or request.meta.get(HELD_META):
            return
        while True:
            if self.is_closing():
                raise Abandoned("stopping: not waiting for the page kind's rate")
            if gate.concurrency is not None and gate.in_flight >= gate.concurrency:
                waiter: Deferred[None] = Deferred()
                gate.waiters.append(waiter)
                # woken by a request leaving the gate, or after a slice to look at closing
                await maybe_deferred_to_future(_with_timeout(waiter, WAIT_SLICE))
                continue
            wait = gate.next_start - time.monotonic()
            if wait > 0:
                await sleep(min(wait, WAIT_SLICE))
                continue
            break
        gate.in_flight += 1
        gate.next_start = time.monotonic() + gate.interval
        request.meta[HELD_META] = True

    def process_response(self, request: Request, response: Response) -> Response:
        self._leave(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._leave(request)

    def _leave(self, request: Request) -> None:
        if not request.meta.pop(HELD_META, False):
            return  # it never entered (another middleware refused it first)
        gate = self.gates.get(request.meta.get(GATE_META, ""))
        if gate is None:
            return
        gate.in_flight -= 1
        while gate.waiters:
            waiter = gate.waiters.pop(0)
            if not waiter.called:
                waiter.callback(None)
                break


def _with_timeout(waiter: Deferred[None], seconds: float) -> Deferred[None]:
    """``waiter``, also fired after ``seconds`` if nothing fired it before."""

    def wake() -> None:
        if not waiter.called:
            waiter.callback(None)

    call = call_later(seconds, wake)

    def done(result: Any) -> Any:
        call.cancel()  # does nothing once it fired
        return result

    waiter.addBoth(done)
    return waiter


@dataclass(frozen=True)
class Block:
    """A response that matched a blocked rule."""

    rule: str  # the rule's name, or its conditions
    url: str  # the response's (final) URL, or the redirect's target
    status: int | None  # None: a refused redirect, no answer came back


class _Rule:
    def __init__(self, spec: BlockRule, guard: Guard) -> None:
        self.spec = spec
        self.status = frozenset(spec.status)
        # the spec's regex on the bounded engine, as a field's: a pattern that
        # backtracks on a long URL must not hold the crawl (nor ignore Ctrl-C)
        self.url = SafeRegex(spec.url) if spec.url is not None else None
        self.guard = guard
        self.label = spec.name or describe(spec)

    def url_matches(self, url: str) -> bool:
        """Does the rule's ``url`` pattern match ``url``? One that runs over the time
        limit is taken as not matching, and said."""
        assert self.url is not None
        try:
            return search_bounded(self.url, url, self.guard.limits)
        except LimitExceeded as exc:
            logger.warning(
                "blocked rule %s: %s; taken as not matching %s", self.label, exc, redact_url(url)
            )
            return False

    def matches(self, response: Response, sel: Selector | None) -> str | None:
        """The URL that matched (the response's, or a redirect's target), or None."""
        if self.status and response.status not in self.status:
            return None
        where = response.url
        if self.url is not None:
            hit = next((u for u in _urls(response) if self.url_matches(u)), None)
            if hit is None:
                return None
            where = hit
        if self.spec.css is not None or self.spec.xpath is not None:
            if sel is None:
                return None
            if self.spec.css is not None and not sel.css(self.spec.css):
                return None
            if self.spec.xpath is not None and not sel.xpath(self.spec.xpath):
                return None
        return where


def _urls(response: Response) -> Iterable[str]:
    """The URL the response came from, and where a redirect not followed points to
    (``REDIRECT_ENABLED: false``, or the redirect limit reached)."""
    yield response.url
    if response.status in REDIRECT_STATUSES:
        location = response.headers.get(b"Location")
        if location:
            yield urljoin(response.url, location.decode("latin-1"))


def describe(rule: BlockRule) -> str:
    """A rule's conditions, as the message names it: ``css '#captcha', status 200``."""
    parts = []
    if rule.css is not None:
        parts.append(f"css {rule.css!r}")
    if rule.xpath is not None:
        parts.append(f"xpath {rule.xpath!r}")
    if rule.status:
        parts.append("status " + "|".join(str(s) for s in rule.status))
    if rule.url is not None:
        parts.append(f"url {rule.url!r}")
    return ", ".join(parts)


class Detector:
    """The job's soft-ban rules by row kind: a page kind's own, then the job's; a
    sub-tab has its page kind's and the job's."""

    def __init__(self, spec: JobSpec, guard: Guard) -> None:
        job = [_Rule(r, guard) for r in spec.blocked]
        self.rules: dict[str, list[_Rule]] = {}
        for name, kind in spec.page_kinds().items():
            own = [_Rule(r, guard) for r in kind.blocked] + job
            self.rules[name] = own
            for tname in kind.subtabs:
                self.rules[f"{name}.{tname}"] = own
        self.job = job

    def __bool__(self) -> bool:
        return any(self.rules.values()) or bool(self.job)

    def check(self, kind: str, response: Response) -> Block | None:
        rules = self.rules.get(kind, self.job)
        if not rules:
            return None
        sel: Selector | None = None
        if isinstance(response, TextResponse) and any(
            r.spec.css is not None or r.spec.xpath is not None for r in rules
        ):
            sel = response.selector  # parsed once: the page's extraction reuses it
        for rule in rules:
            where = rule.matches(response, sel)
            if where is not None:
                return Block(rule=rule.label, url=where, status=response.status)
        return None

    def check_refused(self, kind: str, target: str) -> Block | None:
        """A redirect the crawl refused to follow (off-site: a captcha service on its
        own host): only rules that judge the URL alone (``url``, no selector, no
        status) can tell, since no page came back."""
        for rule in self.rules.get(kind, self.job):
            only_url = rule.spec.css is None and rule.spec.xpath is None and not rule.status
            if rule.url is not None and only_url and rule.url_matches(target):
                return Block(rule=rule.label, url=target, status=None)
        return None


__all__ = [
    "MIDDLEWARE",
    "MIDDLEWARE_ORDER",
    "REASON_BLOCKED",
    "Block",
    "Detector",
    "RateGate",
    "Slots",
    "describe",
    "kind_gate",
    "kind_rates",
]
