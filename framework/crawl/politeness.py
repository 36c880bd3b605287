"""Retry-After, honoured per host, for unattended runs.

A 429 or 503 with ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110) pushes that
host's "not before" time later; every later request to the host waits for it in
``process_request``, which also holds its download slot, so the crawl slows down
instead of hammering. A demand over ``FRAMEWORK_RETRY_AFTER_CAP`` is not slept
through: the response is marked, and the spider records the attempt and stops the run
as a checkpoint (come back later). The deadline only ever moves later, and the runtime
keeps it in the workspace: a restarted crawl waits for it (or, when it is still over the
cap, stops before sending anything), so a cron loop cannot hammer a site that asked it
to wait.

Every demand is clamped to ``FRAMEWORK_RETRY_AFTER_MAX`` (default one day): a value no
server means (``Retry-After: 99999999999999999999``, a date in 2058) cannot defer a job
for ever. The same seam waits between a row's attempts: the runtime puts the row's
retry time (:func:`backoff_delay`) in the request's ``fw_not_before``, which
``process_request`` honours like an earlier run's deadline.

:class:`RobotsTxtFailures` turns a robots.txt that cannot be fetched (a host that is
down, a name that does not resolve) into one log line instead of Scrapy's traceback,
sends robots.txt requests through the spec's ``rate:`` gate
(:mod:`framework.crawl.blocking`): Scrapy's RobotsTxtMiddleware builds them itself,
without the gate's meta, so they would pass the gate that holds every page, and stops
reading a robots.txt after its first 500 KiB.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.asyncio import sleep

from framework.http_dates import parse_retry_after
from framework.redact import redact_url
from framework.settings import default

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Headers, Request, Response
    from scrapy.signalmanager import SignalManager

logger = logging.getLogger(__name__)

RATE_LIMIT_STATUSES = frozenset({429, 503})
# RFC 9309 2.5: a crawler may stop reading robots.txt after 500 KiB; a parser given
# 30 MB of wildcard rules spent minutes of CPU and gigabytes on them. The download stops
# once more has come (what has come is kept: at most one network read more).
ROBOTS_MAX_BYTES = 500 * 1024
# request meta: a robots.txt request's token (kept by a redirect's copy), its bytes so far
ROBOTS_META = "fw_robots_txt"
ROBOTS_READ_META = "fw_robots_bytes"
WAIT_SLICE = 0.25  # seconds
RETRY_AFTER_MAX = default("FRAMEWORK_RETRY_AFTER_MAX")  # seconds: the longest believed


def _engine_closing(crawler: Crawler) -> bool:
    # Scrapy has no public "closing" flag or signal before spider_closed; its engine
    # slot's `closing` is set the moment close_spider starts (SIGINT, a stop, the end).
    slot = getattr(crawler.engine, "_slot", None)
    return slot is not None and getattr(slot, "closing", None) is not None


def backoff_delay(failures: int, base: float, maximum: float, rng: random.Random) -> float:
    """Seconds before a row's next attempt after its ``failures``-th failed one in this
    run: ``base * 2**(failures - 1)``, stretched by a random 0-50 % so that rows that
    failed together do not come back together, and never over ``maximum``. It is never
    under ``base`` (unless ``maximum`` is), so attempts are at least ``base`` apart."""
    if base <= 0 or failures < 1:
        return 0.0
    raw = base * 2.0 ** min(failures - 1, 30)
    return max(0.0, min(maximum, raw * rng.uniform(1.0, 1.5)))


class Abandoned(IgnoreRequest):
    """A request dropped unsent because the crawl is stopping; its row stays pending."""


class RetryAfterMiddleware:
    def __init__(
        self,
        cap: float,
        default: float,
        is_closing: Callable[[], bool] = lambda: False,
        maximum: float = RETRY_AFTER_MAX,
    ) -> None:
        self.cap = cap
        self.default = default
        self.is_closing = is_closing
        self.maximum = maximum
        self.not_before: dict[str, float] = {}
        # the workspace's shared hosts (a database workspace: many workers), found on the
        # spider's runtime at the first request; None: this process alone decides
        self.shared: Callable[[], Any] = lambda: None
        self.interval = 0.0  # a per-host rate shared by every worker: seconds per request

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        mw = cls(
            cap=s.getfloat("FRAMEWORK_RETRY_AFTER_CAP", default("FRAMEWORK_RETRY_AFTER_CAP")),
            default=s.getfloat(
                "FRAMEWORK_RETRY_AFTER_DEFAULT", default("FRAMEWORK_RETRY_AFTER_DEFAULT")
            ),
            is_closing=lambda: _engine_closing(crawler),
            maximum=s.getfloat("FRAMEWORK_RETRY_AFTER_MAX", RETRY_AFTER_MAX),
        )
        mw.shared = lambda: _shared_hosts(crawler)
        mw.interval = s.getfloat("DOWNLOAD_DELAY", default("DOWNLOAD_DELAY"))
        return mw

    async def process_request(self, request: Request) -> None:
        # Wait in slices: the deadline may move later meanwhile, and a crawl that is
        # stopping must not sit out a Retry-After for requests it will never send.
        while (wait := self._wait(request)) > 0:
            if self.is_closing():
                raise Abandoned(f"stopping: not waiting {wait:.0f}s for Retry-After")
            await sleep(min(wait, WAIT_SLICE))
        hosts = self.shared()
        if hosts is not None and self.interval > 0 and not self.is_closing():
            # the host's next slot among every worker's requests (then the deadline
            # again: a Retry-After may have come while this one waited for its slot)
            await sleep(hosts.reserve(urlsplit(request.url).netloc, self.interval))
            while (wait := self._wait(request)) > 0:
                if self.is_closing():
                    raise Abandoned(f"stopping: not waiting {wait:.0f}s for Retry-After")
                await sleep(min(wait, WAIT_SLICE))

    def _wait(self, request: Request) -> float:
        host = urlsplit(request.url).netloc
        wait = self.not_before.get(host, 0.0) - time.monotonic()
        hosts = self.shared()
        if hosts is not None:  # another worker's Retry-After holds this one too
            if not hosts.following:
                # asked before every request: kept between the changes the database
                # announces, not read each time (pg_workspace.SharedHosts.follow)
                hosts.follow()
            wait = max(wait, hosts.wait(host))
        earlier_run = request.meta.get("fw_not_before")  # epoch seconds, kept in the workspace
        if earlier_run is not None:
            wait = max(wait, float(earlier_run) - time.time())
        return wait

    def process_response(self, request: Request, response: Response) -> Response:
        if response.status not in RATE_LIMIT_STATUSES:
            return response
        asked = parse_retry_after(response.headers.get(b"Retry-After"))
        if asked is None and response.status == 503:
            return response  # a plain outage, not a rate limit: the row's attempts apply
        delay = min(self.default if asked is None else asked, self.maximum)
        # The response is not bound to its request yet; the spider reads these through
        # response.meta, which is the request's meta.
        request.meta["fw_retry_after"] = delay
        if delay > self.cap:
            request.meta["fw_retry_after_over_cap"] = True
            return response
        host = urlsplit(request.url).netloc
        self.not_before[host] = max(self.not_before.get(host, 0.0), time.monotonic() + delay)
        hosts = self.shared()
        if hosts is not None:  # told to every worker now, before the row's commit
            hosts.defer(host, delay)
        return response


def _shared_hosts(crawler: Crawler) -> Any:
    """The running crawl's shared per-host politeness (a database workspace's), if any."""
    runtime = getattr(getattr(crawler, "spider", None), "runtime", None)
    ws = getattr(runtime, "ws", None)
    return getattr(ws, "hosts", None)


class RobotsTxtFailures:
    """robots.txt requests: through the rate gate, and one log line when one fails.

    **The gate.** A robots.txt request counts as a request of the job's start kind (the
    kind of the request that comes first to a host): it waits at that kind's gate, else
    at the job's, as :meth:`framework.crawl.blocking.Slots.meta` says for the kind, so a
    ``rate: {concurrency: 1}`` holds for robots.txt too. This middleware's
    ``process_request`` runs before the gate's (555 < 950) and only adds the meta.

    **Size.** Only the first 500 KiB of a robots.txt are read, as RFC 9309 allows (cut at
    the last whole line), with one log line saying so, and not much more is downloaded:
    once past 500 KiB, the download stops (Scrapy's ``StopDownload`` from the
    ``bytes_received`` signal, which every Scrapy HTTP handler sends) and what came is
    the response. A robots.txt is never cancelled for its size: the request goes
    without a ``download_maxsize`` (a ``Content-Length`` over ``DOWNLOAD_MAXSIZE`` would
    cancel it, and a cancelled robots.txt counts as none, every page allowed), which is
    given back once the answer's head is in, so that a compressed body is still
    inflated up to ``DOWNLOAD_MAXSIZE`` at most. Scrapy sends those signals for every
    download, and a receiver costs each page tens of microseconds: this one listens only
    while a robots.txt is on its way (from its request to its answer or failure; a
    redirect's copy carries the original's token), which is the first moments of a
    crawl of each host.

    **Failures.** One log line when a host's robots.txt cannot be fetched.

    Scrapy's RobotsTxtMiddleware logs any failure of its robots.txt download at ERROR
    with the whole traceback (some 90 lines for a refused connection) and then crawls as
    if robots.txt allowed everything. It treats an ``IgnoreRequest`` the same way but
    without logging, so this middleware says what happened in one line and hands it an
    ``IgnoreRequest``: the crawl behaves exactly as before, only the log changes. The
    pages' own requests then fail (or not) on their own, as typed row errors.
    """

    def __init__(
        self,
        gate_meta: dict[str, Any] | None = None,
        maxsize: int | None = None,
        signal_manager: SignalManager | None = None,
    ) -> None:
        self.gate_meta = dict(gate_meta or {})  # empty: no rate in the spec
        # DOWNLOAD_MAXSIZE: what a compressed robots.txt may inflate to
        self.maxsize = default("DOWNLOAD_MAXSIZE") if maxsize is None else maxsize
        # where the download signals are listened to while a robots.txt is on its way
        self.signal_manager = signal_manager
        self._tokens = itertools.count(1)
        self._on_the_way: set[int] = set()  # the tokens of robots.txt requests

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        spidercls = crawler.spidercls
        slots = getattr(spidercls, "slots", None)
        compiled = getattr(spidercls, "compiled", None)
        maxsize = crawler.settings.getint("DOWNLOAD_MAXSIZE", default("DOWNLOAD_MAXSIZE"))
        gate = slots.meta(compiled.start_kind) if slots and compiled is not None else None
        return cls(gate, maxsize=maxsize, signal_manager=crawler.signals)

    def process_request(self, request: Request) -> None:
        if not _is_robots_request(request):
            return
        meta = request.meta
        for key, value in self.gate_meta.items():
            meta.setdefault(key, value)
        token = meta.get(ROBOTS_META) or next(self._tokens)  # a redirect's copy: its own
        meta[ROBOTS_META] = token
        meta[ROBOTS_READ_META] = 0
        # never cancelled on its size: bytes_received stops the download instead
        meta["download_maxsize"] = 0
        meta["download_warnsize"] = 0
        if self.signal_manager is not None and token not in self._on_the_way:
            if not self._on_the_way:
                self._listen(True)
            self._on_the_way.add(token)

    def _arrived(self, request: Request) -> None:
        """A robots.txt request's answer or failure is in: the last one on its way
        stops the listening."""
        token = request.meta.get(ROBOTS_META)
        if token in self._on_the_way:
            self._on_the_way.discard(token)
            if not self._on_the_way:
                self._listen(False)

    def _listen(self, on: bool) -> None:
        assert self.signal_manager is not None
        change = self.signal_manager.connect if on else self.signal_manager.disconnect
        change(self.headers_received, signal=signals.headers_received)
        change(self.bytes_received, signal=signals.bytes_received)

    def headers_received(self, headers: Headers, request: Request) -> None:
        if _is_robots_request(request):
            # the download's own cap is read already; this one bounds the inflating
            request.meta["download_maxsize"] = self.maxsize

    def bytes_received(self, data: bytes, request: Request) -> None:
        if not _is_robots_request(request):
            return
        read = request.meta.get(ROBOTS_READ_META, 0) + len(data)
        request.meta[ROBOTS_READ_META] = read
        if read > ROBOTS_MAX_BYTES:
            raise StopDownload(fail=False)  # what came is the response

    def process_response(self, request: Request, response: Response) -> Response:
        if not _is_robots_request(request):
            return response
        self._arrived(request)
        if len(response.body) <= ROBOTS_MAX_BYTES:
            return response
        head = response.body[:ROBOTS_MAX_BYTES]
        cut = head.rfind(b"\n")
        logger.warning(
            "robots.txt of %s is larger than %d bytes: reading its first %d, as RFC 9309 "
            "allows (%d downloaded)",
            redact_url(request.url),
            ROBOTS_MAX_BYTES,
            ROBOTS_MAX_BYTES,
            request.meta.get(ROBOTS_READ_META) or len(response.body),
        )
        return response.replace(body=head[: cut + 1] if cut >= 0 else head)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not _is_robots_request(request):
            return
        self._arrived(request)
        if isinstance(exception, IgnoreRequest):
            return
        logger.warning(
            "robots.txt of %s could not be fetched (%s: %s): crawling as if it allowed everything",
            redact_url(request.url),
            type(exception).__name__,
            " ".join(str(exception).split())[:200],
        )
        raise IgnoreRequest(f"robots.txt unavailable: {type(exception).__name__}")


def _is_robots_request(request: Request) -> bool:
    # How RobotsTxtMiddleware builds its own request; the spider's requests never carry
    # dont_obey_robotstxt nor NO_CALLBACK. Asked of every chunk of every download: the
    # meta lookup comes first. A redirect of one keeps its meta (ROBOTS_META).
    meta = request.meta
    return (
        bool(meta.get("dont_obey_robotstxt"))
        and request.callback is NO_CALLBACK
        and (bool(meta.get(ROBOTS_META)) or urlsplit(request.url).path == "/robots.txt")
    )
