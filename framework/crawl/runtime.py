"""The crawl's bookkeeping: responses in, one committed outcome per response out.

For every response (or download failure) the runtime builds ONE
:class:`~framework.workspace.records.Outcome` (the row's status, the rows the page
discovered, the items it produced, the sub-tab data it carries) and commits it whole,
then logs the request to ``urls.jsonl``. Only rows that did not exist before are
scheduled, so nothing is fetched twice; a kill at any instant leaves the workspace as
it was before or after whole responses.

Group commit (:mod:`framework.crawl.group`): the outcomes of responses that arrive
within ``FRAMEWORK_COMMIT_WINDOW_MS`` (or ``FRAMEWORK_COMMIT_BATCH`` of them) share one
transaction. A response's rows to schedule and items to emit are handed back only after
that commit (the spider's callback waits for it), so a row is ``ok`` only once its
outcome is committed, a kill loses at most the outcomes still waiting (their rows stay
``pending`` and are fetched again; the URL log, written after the commit, names every
committed request), and no item reaches Scrapy's pipelines or feeds before it is
durable. A stop, a down host and the close commit what waits at once.

The commit happens here, in the response step, rather than in a Scrapy item pipeline:
a pipeline sees items one at a time after the page's requests have already been
scheduled, so it cannot make "outcome + discovered rows + items" one transaction.
Items still flow on to Scrapy's pipelines and feed exports (``-o``) afterwards.

It reads settings only in :meth:`CrawlRuntime.from_crawler`; its ``__init__`` takes
plain values so tests can build it directly. It never touches HTTP delivery.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import random
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.http import TextResponse
from w3lib.url import safe_url_string

from framework.crawl.blocking import REASON_BLOCKED, Block, Detector
from framework.crawl.changes import ChangeLimits
from framework.crawl.drift import Drift
from framework.crawl.failures import HOST_FAILURES, classify_failure
from framework.crawl.findings import FOUND_NOTHING_EVENT, Findings
from framework.crawl.fingerprint import kind_fingerprints, kind_sections
from framework.crawl.group import BATCH, DB_WINDOW_MS, WINDOW_MS, GroupCommit
from framework.crawl.page import CompiledJob, PageError, PageResult, Record
from framework.crawl.politeness import RETRY_AFTER_MAX, backoff_delay
from framework.crawl.secrets import Secrets
from framework.crawl.stopping import stops_on_workspace_fault
from framework.crawl.verdict import exit_code, row_totals
from framework.crawl.workers import (
    BATCH_SETTING,
    LEASE_SETTING,
    WORKER_SETTING,
    Heartbeat,
    shared_crawl_lock,
)
from framework.errors import EXIT_HALTED, EXIT_OK, UsageError, WorkspaceBroken, WorkspaceFull
from framework.heap import FrozenHeap
from framework.spec.template import MissingValue
from framework.workspace import (
    ErrorKind,
    ItemWrite,
    NewRow,
    Outcome,
    PartWrite,
    Row,
    RowStatus,
    Workspace,
    deferrals,
    redact,
    redact_url,
    utc_now,
)
from framework.workspace.fill import EXTRACTION_EVENTS, last_extraction
from framework.workspace.holds import INVALID, REVIEW
from framework.workspace.leases import LEASE_SECONDS, Leases
from framework.workspace.leases import reset as reset_leases
from framework.workspace.locate import is_database_url
from framework.workspace.pg_workspace import PgLog
from framework.workspace.records import CommitResult, HoldWrite, ResponseWrite

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

# Close reasons of our own, and what they mean for the exit code (see crawl CLI).
REASON_FINISHED = "finished"
REASON_MAX_REQUESTS = "max_requests"
REASON_RATE_LIMITED = "rate_limited"
REASON_ERROR_RATE = "error_rate"
REASON_ALREADY_DONE = "already_done"
REASON_HOST_DOWN = "host_down"
REASON_DRIFT = "drift"  # --halt-on-drift: a fallback selector gave a record's value
RESPONSES_BUDGET_MB = 1024.0  # stored (compressed) bodies per workspace; 0: no budget
NOT_BEFORE_META = deferrals.NOT_BEFORE_META


@dataclass
class Limits:
    max_attempts: int = 3
    max_requests: int = 0  # 0: no cap
    stop_on_429: bool = False
    error_rate_max: float = 0.5
    error_rate_window: int = 50
    retry_after_cap: float = 120.0
    retry_after_max: float = RETRY_AFTER_MAX  # no deadline is kept further ahead than this
    backoff_base: float = 1.0  # seconds before a row's 2nd attempt in a run, doubling...
    backoff_max: float = 30.0  # ... up to this
    down_host_after: int = 3  # connect/dns failures in a row that make a host "down"
    store_responses: bool = True  # keep ok pages' bodies for `framework reparse`
    responses_budget: int = 0  # bytes of stored (compressed) bodies; 0: no budget
    halt_on_drift: bool = False  # a page found through a fallback selector stops the run


@dataclass
class RunCounters:
    requests: int = 0
    ok: int = 0
    errors: int = 0
    rows_new: int = 0
    items_new: int = 0
    items_changed: int = 0
    items_unchanged: int = 0
    items_completed: int = 0
    records_invalid: int = 0
    items_invalid: int = 0  # broke a rule of the spec: held as invalid, not stored
    items_review: int = 0  # over a change limit: held as review_required
    fallbacks: int = 0
    responses_stored: int = 0
    commit_groups: int = 0  # transactions that committed responses' outcomes (group.py)
    fenced: int = 0  # outcomes refused: the row's lease was taken over (leases.py)
    by_error: dict[str, int] = field(default_factory=dict)


@dataclass
class Handled:
    """What the spider should hand back to Scrapy after a response."""

    rows: list[Row] = field(default_factory=list)  # to schedule
    items: list[dict[str, Any]] = field(default_factory=list)  # to emit
    stop: str | None = None  # a close reason, when a stop condition fired


@dataclass
class _Entry:
    """An outcome waiting for its group's commit, with what the URL log needs of its
    response (kept instead of the response, whose body is not needed any more)."""

    row: Row
    outcome: Outcome
    final_url: str | None
    status: int | None
    size: int
    latency_s: float | None
    host_down: bool = False
    stop: str | None = None  # a stop decided before the commit, told after it


class CrawlRuntime:
    def __init__(
        self,
        ws: Workspace,
        job: CompiledJob,
        spec_hash: str,
        limits: Limits,
        fresh: bool = False,
        rng: random.Random | None = None,
        commit_window_s: float = 0.0,
        commit_batch: int = 1,
    ) -> None:
        self.ws = ws
        self.job = job
        self.spec = job.spec
        self.spec_hash = spec_hash
        self.limits = limits
        self.fresh = fresh
        self.counters = RunCounters()
        self.heap = FrozenHeap()  # frozen once the crawl starts, thawed by close()
        self.issued = 0
        self.capped = False
        self.stop_reason: str | None = None
        # the workspace's item counts at the run's end (close()): what an -o feed of
        # this run's records is compared with
        self.items_at_end: dict[str, int] = {}
        self.started = time.monotonic()
        self._window: deque[bool] = deque(maxlen=max(1, limits.error_rate_window))
        self._error_rate_said = False  # the breaker's ERROR line was written
        self._fallbacks_seen: set[tuple[str, str, int]] = set()
        self._rules_seen: set[tuple[str, str, str]] = set()  # (kind, field, rule) warned
        # the holds a row's outcome carries, with its kind and URL: counted, warned and
        # recorded only once the outcome is committed (a page that --halt-on-drift or a
        # refused commit drops wrote no hold, so none is reported)
        self._hold_notes: dict[int, list[tuple[str, str, HoldWrite]]] = {}
        self._page_drifted = False  # the page being handled had a fallback win (drift)
        # what each kind's pages are read with (framework/crawl/fingerprint.py), and the
        # kinds this run has marked as read with it (see _mark_read)
        self._digests: dict[str, str] = {}
        self._sections: dict[str, str] = {}  # by digest
        self._marked: set[str] = set()
        self._boundary = 0  # rows with id above this were created by this run
        # host -> epoch seconds before which it asked not to be called (Retry-After);
        # kept in the workspace so a restarted crawl honours it too. Only moves later.
        self.not_before: dict[str, float] = {}
        # Waiting between a row's attempts: failed attempts per row in this run, and
        # the epoch time before which its retry must not be sent (read by the spider).
        self._rng = rng or random.Random()
        self._failed: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        # host -> row ids of its latest connect/dns failures with no answer since
        self._outage: dict[str, list[int]] = {}
        self.down_hosts: set[str] = set()
        self._stack = ExitStack()
        # Outcomes of responses that arrive together share one transaction (group.py);
        # the defaults here (one each) are for tools and tests that build a runtime.
        self.group: GroupCommit[_Entry, Handled] = GroupCommit(
            self._commit_group, commit_window_s, commit_batch
        )
        # found-nothing warnings and fill counts of this run (see findings.py)
        self.findings = Findings(self.event, logger)
        # selector drift: fallbacks that won and fill rates below the last crawl's
        d = self.spec.drift
        self.drift = Drift(self.event, logger, fill_drop=d.drop, min_records=d.min_records)
        self._stored_bytes = 0  # of responses, against limits.responses_budget
        # a reparse's items by what it did to them, each counted once: a detail page
        # read again unchanged whose sub-tab then changes its item is one changed item
        self._reparse_changed: set[str] = set()
        self._reparse_unchanged: set[str] = set()
        self._reparse_unchanged_n = 0  # on pages that also gave new items (see there)
        self.blocker = Detector(self.spec, self.job.guard)  # soft bans: see blocking.py
        self.blocked: Block | None = None  # the first page that matched a blocked rule
        # this process in the workspace's `workers` table; with `claiming` (one of
        # `--processes N`) it fetches only rows it holds a lease on (leases.py)
        self.leases: Leases | None = None
        self.claiming = False
        self.lease_batch = 0  # rows a claiming worker holds at most
        # kinds whose page finds the next page of its kind (pagination): a claiming
        # worker takes their rows first, a chain being only as fast as its slowest link
        self._chain_kinds = tuple(n for n, k in job.kinds.items() if k.pagination is not None)
        self._heartbeat: Any = None
        self._claimer: Any = None  # a Deferred the claim loop waits on for room
        self._storing = limits.store_responses
        # {env:NAME} values never reach a row, a log file or a log line: see secrets.py
        self.secrets = Secrets.from_spec(self.spec)
        ws.urls.masker = ws.events.masker = self.secrets.mask_value
        self.secrets.mask_logs()

    # ----------------------------------------------------------------- set-up
    @classmethod
    def from_crawler(
        cls, crawler: Crawler, job: CompiledJob, spec_path: Path, fresh: bool | None = None
    ) -> CrawlRuntime:
        s = crawler.settings
        jobdir = s.get("JOBDIR")
        if not jobdir:
            raise UsageError("JOBDIR is empty: the workspace needs a folder")
        limits = Limits(
            # the spider's settings carry the spec's max_attempts; `-s` may override it
            max_attempts=s.getint("FRAMEWORK_MAX_ATTEMPTS", job.spec.max_attempts),
            max_requests=s.getint("FRAMEWORK_MAX_REQUESTS", 0),
            stop_on_429=s.getbool("FRAMEWORK_STOP_ON_429", False),
            error_rate_max=s.getfloat("FRAMEWORK_ERROR_RATE_MAX", 0.5),
            error_rate_window=s.getint("FRAMEWORK_ERROR_RATE_WINDOW", 50),
            retry_after_cap=s.getfloat("FRAMEWORK_RETRY_AFTER_CAP", 120.0),
            retry_after_max=s.getfloat("FRAMEWORK_RETRY_AFTER_MAX", RETRY_AFTER_MAX),
            backoff_base=s.getfloat("FRAMEWORK_RETRY_BACKOFF_BASE", 1.0),
            backoff_max=s.getfloat("FRAMEWORK_RETRY_BACKOFF_MAX", 30.0),
            down_host_after=s.getint("FRAMEWORK_DOWN_HOST_AFTER", 3),
            # the spec's store_responses, unless `--no-store-responses` / `-s` says
            store_responses=s.getbool("FRAMEWORK_STORE_RESPONSES", job.spec.store_responses),
            responses_budget=int(
                s.getfloat("FRAMEWORK_RESPONSES_BUDGET_MB", RESPONSES_BUDGET_MB) * 2**20
            ),
            halt_on_drift=s.getbool("FRAMEWORK_HALT_ON_DRIFT", False),
        )
        spec_hash = "sha256:" + hashlib.sha256(spec_path.read_bytes()).hexdigest()
        ws = Workspace.open(workspace_target(jobdir), create=True)
        if fresh is None:
            fresh = s.getbool("FRAMEWORK_FRESH", False)
        if fresh and ws.is_database:
            ws.close()
            raise UsageError(
                f"--fresh on a database workspace ({ws.where}): other workers may be "
                "running; forget the rows with `framework requeue` instead"
            )
        # what a gzip sitemap may decompress to: the bound of any body (discovery.py)
        job.guard.max_body = s.getint("DOWNLOAD_MAXSIZE", job.guard.max_body)
        runtime = cls(
            ws,
            job,
            spec_hash,
            limits,
            fresh=fresh,
            commit_window_s=commit_window_ms(s.get("FRAMEWORK_COMMIT_WINDOW_MS"), ws.is_database)
            / 1000,
            commit_batch=s.getint("FRAMEWORK_COMMIT_BATCH", BATCH),
        )
        try:
            if ws.is_database or s.getbool(WORKER_SETTING, False):
                # one of `--processes N`: the parent holds the lock, shared (workers.py);
                # on a database every crawl is a worker, each with its share of the lock
                runtime._stack.enter_context(
                    ws.lock("crawl", shared=True) if ws.is_database else shared_crawl_lock(ws)
                )
                runtime.claiming = True
                # rows held: what it can have in flight on one host, twice (in flight,
                # and as many waiting); more would leave the other workers idle while
                # this one sits on the rows it found
                in_flight = min(
                    s.getint("CONCURRENT_REQUESTS", 16),
                    s.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8),
                )
                runtime.lease_batch = s.getint(BATCH_SETTING, 0) or 2 * max(1, in_flight)
            else:
                runtime._stack.enter_context(ws.lock("crawl"))
            lease_s = s.getfloat(LEASE_SETTING, LEASE_SECONDS)
            if ws.is_database:
                from framework.workspace.postgres_leases import PgLeases

                pg: Any = ws.store  # a PgWorkspace's store is a PostgresStore
                runtime.leases = PgLeases(pg, lease_s)  # type: ignore[assignment]
            else:
                runtime.leases = Leases(ws.store, lease_s)
        except BaseException:
            ws.close()
            raise
        return runtime

    def start_rows(self) -> Iterator[Row]:
        """Record the run's start and yield the rows to fetch: seeds on a new
        workspace, else every pending row and every retryable error row."""
        if not self._begin():
            return
        store = self.ws.store
        if self.fresh:
            store.reset_rows()
            self.event("rows_reset", why="fresh run requested")
        seeded = store.seed(
            [NewRow(kind=self.job.start_kind, url=u, context={}) for u in self.spec.start_urls]
        )
        counts = store.row_counts()
        total = sum(sum(v.values()) for v in counts.values())
        resumed = total > len(seeded)
        rows = store.resumable(self.limits.max_attempts)
        first = next(rows, None)
        if first is None:
            self.stop_reason = REASON_ALREADY_DONE
            self.event("run_resumed", note="nothing to do: every row is ok or exhausted")
            logger.info("job %s: nothing to do (every row is ok or exhausted)", self.spec.name)
            return
        self._boundary = store.max_row_id()
        self.event(
            "run_resumed" if resumed else "run_started",
            rows={k: {str(st): n for st, n in v.items()} for k, v in counts.items()},
        )
        yield first
        for row in rows:
            if row.id <= self._boundary:  # rows made by this run are scheduled as found
                yield row

    async def claimed_rows(self) -> AsyncIterator[Row]:
        """The rows of one of `--processes N` workers: batches claimed by lease as room
        frees up (leases.py), until no row is open and no other live worker holds one
        (it may still find rows, or die and leave its rows to this one)."""
        leases = self.leases
        if leases is None or not self._begin():
            return
        store = self.ws.store
        seeded = store.seed(
            [NewRow(kind=self.job.start_kind, url=u, context={}) for u in self.spec.start_urls]
        )
        counts = store.row_counts()
        total = sum(sum(v.values()) for v in counts.values())
        if next(store.resumable(self.limits.max_attempts), None) is None:
            self.stop_reason = REASON_ALREADY_DONE
            self.event("run_resumed", note="nothing to do: every row is ok or exhausted")
            return
        self.event(
            "run_resumed" if total > len(seeded) else "run_started",
            rows={k: {str(st): n for st, n in v.items()} for k, v in counts.items()},
            worker=leases.worker_id,
        )
        for log in (self.ws.urls, self.ws.events):
            if isinstance(log, PgLog):  # every line of a shared table names its worker
                log.worker = str(leases.worker_id)
        self._heartbeat = Heartbeat(leases, self._leases_lost)
        self._heartbeat.start()
        # rows another worker finds appear at any moment: look again soon (a claim is one
        # short transaction); this worker's own commits wake it at once
        idle = min(0.05, leases.lease_seconds / 4)
        max_attempts = self.limits.max_attempts
        while self.stop_reason is None:
            room = self._room()
            if 2 * room < self.lease_batch:  # most of the batch still in flight
                await self._room_freed(idle)
                continue
            rows = leases.claim(room, max_attempts, first=self._chain_kinds)
            for row in rows:
                yield row
            if rows:
                continue
            if not leases.tokens and not leases.others_working(max_attempts):
                # Look again before finishing: between the claim and that look, another
                # worker may have committed its last row and inserted the rows it found,
                # free until it leases some (measured: a worker finished with 11 rows
                # pending, exit 3). Those are claimed here, or held by it now.
                rows = leases.claim(room, max_attempts, first=self._chain_kinds)
                if not rows and not leases.others_working(max_attempts):
                    return  # nothing open is left to anyone: the engine closes when idle
                for row in rows:
                    yield row
                continue
            await self._room_freed(idle)

    async def _room_freed(self, timeout: float) -> None:
        """Until half the batch is free again (a commit woke it), or ``timeout``."""
        from twisted.internet import reactor
        from twisted.internet.defer import Deferred
        from twisted.internet.task import deferLater

        waiting: Deferred[None] = Deferred()
        self._claimer = waiting
        later = deferLater(reactor, timeout, self._wake_claimer)
        later.addErrback(lambda _: None)  # cancelled below when a commit woke it first
        try:
            await _wait(waiting)
        finally:
            self._claimer = None
            later.cancel()

    def _wake_claimer(self) -> None:
        waiting, self._claimer = self._claimer, None
        if waiting is not None and not waiting.called:
            waiting.callback(None)

    def _room(self) -> int:
        """Rows a claiming worker may still take: its batch, less the rows it holds that
        still need the downloader. A row whose response is in and waits for its group's
        commit keeps its lease (the fence) but no longer holds a request slot; counted
        as held, it left the downloader short while the group waited."""
        assert self.leases is not None
        return self.lease_batch - len(self.leases.tokens) + len(self.group)

    def _settled(self, row_id: int) -> None:
        """A claiming worker is done with a row (committed, refused or lost): its room is
        free, and the claim loop wakes once half the batch is."""
        assert self.leases is not None
        self.leases.done(row_id)
        if 2 * self._room() >= self.lease_batch:
            self._wake_claimer()

    def _leases_lost(self, ids: set[int]) -> None:
        """The heartbeat found rows of this worker taken over (it was paused past its
        lease): their outcomes will be refused; their room is free for new claims."""
        assert self.leases is not None
        for rid in ids:
            self._settled(rid)
        self.event("leases_lost", worker=self.leases.worker_id, rows=sorted(ids)[:20], n=len(ids))
        logger.warning(
            "%d leased rows were taken over by another worker (this one was paused past "
            "its lease): their outcomes will not be committed",
            len(ids),
        )

    def _begin(self) -> bool:
        """What every run does first: register this process as a worker, record the
        spec, and load the hosts' deadlines; False when one says not to fetch now."""
        store = self.ws.store
        if self.leases is not None:
            if not self.claiming:
                # alone in the workspace (the crawl lock): what a killed worker leased
                # is free at once, no wait for its leases to expire
                reset_leases(store)
            self.leases.register()
        store.set_meta("max_attempts", str(self.limits.max_attempts))
        store.set_meta("job", self.spec.name)
        previous = self.ws.spec_hash()
        if previous is not None and previous != self.spec_hash:
            # announced before it is recorded: a crash in between announces it twice,
            # never not at all
            self.event("spec_changed", spec_hash=self.spec_hash, previous=previous)
            if self.fresh:  # every page is fetched again with it: nothing to advise
                logger.info(
                    "the spec changed since the last run; this --fresh run reads every page with it"
                )
            else:
                logger.warning(
                    "the spec changed since the last run: pages already fetched keep what the "
                    "old spec extracted; `framework reparse %s` re-extracts the stored pages "
                    "without fetching, `framework crawl --fresh %s` fetches everything again",
                    self.spec.name,
                    self.spec.name,
                )
        self.ws.record_spec(self.spec_hash)
        # each kind's digest is marked when its first page is read (_mark_read); pages
        # stored by a version that kept no digests are marked now, whatever is read
        self.ws.mark_unknown_reads(self._kind_digests())
        self.drift.previous_fill(self._last_fill())
        if self._storing and self.limits.responses_budget:
            self._stored_bytes = store.responses_size()[1]
        now = time.time()
        self.not_before = self._load_deferrals(now)
        if self.ws.hosts is not None:  # a database's: the deadlines every worker shares
            for host, until in self.ws.hosts.deadlines().items():
                self.not_before[host] = max(self.not_before.get(host, 0.0), until)
        for host, until in sorted(self.not_before.items()):
            if until - now > self.limits.retry_after_cap:
                self.stop_reason = REASON_RATE_LIMITED
                when = deferrals.iso(until)
                self.event("run_deferred", host=host, until=when)
                logger.warning(
                    "%s asked not to be called before %s (Retry-After): run again later",
                    host,
                    when,
                )
                return False
        return True

    def _load_deferrals(self, now: float) -> dict[str, float]:
        """The hosts' Retry-After deadlines kept by earlier runs: none on a fresh run
        (it clears them on purpose), and never further ahead than the maximum (a value
        kept before the clamp existed, or written by hand, is repaired in place)."""
        store = self.ws.store
        if self.fresh:
            cleared = deferrals.clear(store)
            if cleared:
                self.event(
                    "deferrals_cleared",
                    why="fresh run requested",
                    hosts={h: deferrals.iso(u) for h, u in sorted(cleared.items())},
                )
            return {}
        stored, repaired = deferrals.load(store)
        clamped = deferrals.clamp(stored, now, self.limits.retry_after_max)
        if repaired or clamped != stored:
            deferrals.save(store, clamped)
            self.event(
                "deferrals_clamped",
                max_s=self.limits.retry_after_max,
                hosts={h: deferrals.iso(u) for h, u in sorted(clamped.items())},
            )
            logger.warning(
                "Retry-After deadlines in the workspace were unreadable or further ahead "
                "than FRAMEWORK_RETRY_AFTER_MAX (%.0fs): repaired",
                self.limits.retry_after_max,
            )
        return clamped

    def _defer_host(self, url: str, delay: float) -> None:
        host = urlsplit(url).netloc
        if not math.isfinite(delay) or delay > self.limits.retry_after_max:
            delay = self.limits.retry_after_max
        if self.ws.hosts is not None:  # shared by every worker (politeness.py reads it)
            self.ws.hosts.defer(host, delay)
        until = time.time() + delay
        if until > self.not_before.get(host, 0.0):
            self.not_before[host] = until
            deferrals.save(self.ws.store, self.not_before)

    def host_not_before(self, url: str) -> float | None:
        """The persisted Retry-After deadline of the URL's host, if still ahead."""
        host = urlsplit(url).netloc
        until = self.not_before.get(host)
        if self.ws.hosts is not None:  # another worker's deadline counts as much
            wait = self.ws.hosts.wait(host)
            if wait > 0:
                until = max(until or 0.0, time.time() + wait)
        return until if until is not None and until > time.time() else None

    def not_before_for(self, row: Row) -> float | None:
        """When the row's request may be sent (epoch seconds), if not at once: its
        host's Retry-After deadline, or the backoff of its retry in this run."""
        retry = self._retry_at.pop(row.id, None)
        host = self.host_not_before(row.url)
        times = [t for t in (retry, host) if t is not None and t > time.time()]
        return max(times) if times else None

    def may_issue(self) -> bool:
        """False once --max-requests is reached: further rows stay pending."""
        if self.limits.max_requests and self.issued >= self.limits.max_requests:
            if not self.capped:  # say why once: `scrapy crawl` prints no verdict of its own
                logger.info(
                    "stopping: FRAMEWORK_MAX_REQUESTS=%d requests sent (--max-requests); "
                    "the rows not fetched stay pending for the next run",
                    self.limits.max_requests,
                )
            self.capped = True
            return False
        self.issued += 1
        return True

    # ------------------------------------------------------------- responses
    def on_response(self, row: Row, response: Response) -> Handled | Deferred[Handled]:
        """The response's outcome, committed with its group: what to hand back to Scrapy
        then (at once when the group was committed now, else a Deferred of it)."""
        self._outage.pop(urlsplit(row.url).netloc, None)  # it answered: not down
        banned = self._soft_ban(row, response)
        if banned is not None:
            return banned
        status = response.status
        if row.kind not in self._marked:
            fault = self._mark_read(row.kind)
            if fault is not None:
                return fault
        self._page_drifted = False
        outcome = self.outcome_for(row, response)
        self.tab_read(row, response.url, outcome)
        if self._page_drifted and self.limits.halt_on_drift:
            # nothing of this page is committed: its row stays pending, no drifted record
            # is stored; the drift event is written, the crawl stops (exit 4)
            self._hold_notes.pop(row.id, None)
            return Handled(stop=REASON_DRIFT)
        if self._storing and status < 400:
            outcome = dataclasses.replace(outcome, response=self._keep(row, response))
        stop: str | None = None
        if "fw_retry_after" in response.meta:
            self._defer_host(row.url, float(response.meta["fw_retry_after"]))
        if response.meta.get("fw_retry_after_over_cap"):
            stop = REASON_RATE_LIMITED
            logger.warning(
                "Retry-After of %.0fs from %s is over the cap: stopping (run again later)",
                response.meta["fw_retry_after"],
                redact_url(response.url),
            )
        elif status == 429 and self.limits.stop_on_429:
            stop = REASON_RATE_LIMITED
        return self._commit(row, outcome, response, stop=stop)

    @stops_on_workspace_fault  # nothing of the page is committed; its row stays pending
    def _mark_read(self, kind: str) -> Handled | None:
        """Before this run's first page of ``kind`` is read (and so before its outcome
        is committed): `framework reparse` then knows the kind's stored pages may have
        been read with this spec (framework/crawl/fingerprint.py). Not at the run's
        start: a run that reads no page of a kind (a crawl after a selector fix that
        finds nothing to fetch) must leave what its pages were read with as it was, or
        the reparse that applies the fix would take them for read with two versions of
        the spec and read them whole instead of field by field."""
        digest = self._kind_digests().get(kind)
        if digest is not None:  # (else a kind the spec no longer has: nothing reads it)
            # a sub-tab kind has its page kind's digest, and so its section
            self.ws.mark_read_with({kind: digest}, {kind: self._sections[digest]})
        self._marked.add(kind)
        return None

    def _kind_digests(self) -> dict[str, str]:
        """Each kind's digest (sub-tab kinds too), computed once; with the kinds'
        sections by digest."""
        if not self._digests:
            self._digests = kind_fingerprints(self.job)
            self._sections = {self._digests[k]: s for k, s in kind_sections(self.job).items()}
        return self._digests

    def _soft_ban(self, row: Row, response: Response) -> Handled | None:
        """A page that matches a ``blocked:`` rule is not committed: the row stays
        pending with its attempts untouched, and the crawl stops as a checkpoint."""
        if not self.blocker:
            return None
        block = self.blocker.check(row.kind, response)
        if block is None:
            return None
        return self._blocked_stop(row, block, response.url, response.status, len(response.body))

    def _soft_ban_refused(self, row: Row, failure: Failure) -> Handled | None:
        """The same for a redirect the crawl refused to follow (an off-site captcha)."""
        request = getattr(failure, "request", None)
        if not self.blocker or request is None or not request.meta.get("redirect_urls"):
            return None
        if getattr(failure.value, "error_kind", None) is not ErrorKind.OFFSITE:
            return None
        block = self.blocker.check_refused(row.kind, request.url)
        if block is None:
            return None
        return self._blocked_stop(row, block, request.url, None, 0)

    def _blocked_stop(
        self, row: Row, block: Block, final_url: str, status: int | None, size: int
    ) -> Handled:
        """The request is still logged (outcome ``blocked``, no attempt), and the first
        match of the run is an event and a warning naming the URL and the rule."""
        self.ws.urls.append(
            {
                "time": utc_now(),
                "method": row.method,
                "url": redact_url(row.url),
                "final_url": redact_url(final_url),
                "status": status,
                "bytes": size,
                "outcome": REASON_BLOCKED,
                "row": row.id,
                "kind": row.kind,
                "attempt": None,  # none was spent
            },
            redacted=True,
        )
        if self.blocked is None:
            self.blocked = block
            self.event(
                "blocked",
                row=row.id,
                kind=row.kind,
                url=redact_url(row.url),
                matched_url=redact_url(block.url),
                status=status,
                rule=block.rule,
            )
            logger.warning(
                "blocked: %s (%s) matched the blocked rule %s: stopping; the row stays "
                "pending, nothing of the page is stored (run again once the site lets "
                "the crawler in)",
                redact_url(row.url),
                redact_url(block.url) if block.url != row.url else f"HTTP {status}",
                block.rule,
            )
        return Handled(stop=REASON_BLOCKED)

    def outcome_for(self, row: Row, response: Response) -> Outcome:
        """What ``response`` means for ``row`` under the spec: the crawl's and the
        reparse's one path from a page to an outcome (nothing is committed here)."""
        try:
            return self._outcome(row, response)
        finally:
            # Scrapy's selector keeps `.response`: the page, its body and its lxml tree
            # refer to each other and would wait for the garbage collector. Nothing reads
            # the tree after this (a later `.selector` would build it again), so the
            # cycle is cut and they are freed when the page is done.
            if isinstance(response, TextResponse):
                response._cached_selector = None

    def _outcome(self, row: Row, response: Response) -> Outcome:
        status = response.status
        error: tuple[ErrorKind, str] | None = None
        result: PageResult | None = None
        part: Any = None
        if status == 429 or (status == 503 and "fw_retry_after" in response.meta):
            error = (ErrorKind.RATE_LIMITED, f"HTTP {status}")
        elif status >= 500:
            error = (ErrorKind.HTTP_5XX, f"HTTP {status}")
        elif status >= 400:
            error = (ErrorKind.HTTP_4XX, f"HTTP {status}")
        else:
            try:
                if row.kind in self.job.subtabs:
                    part = self.job.subtabs[row.kind].parse(response)
                else:
                    ctx = row.context
                    result = self.job.kinds[row.kind].parse(
                        response,
                        ctx.get("carry", {}),
                        int(ctx.get("page", 1)),
                        depth=int(ctx.get("depth", 0)),
                    )
            except PageError as exc:
                error = (ErrorKind.PARSE, str(exc))
            except MissingValue as exc:  # the spec's data, not a fault: no traceback
                error = (ErrorKind.PARSE, str(exc))
            except Exception as exc:  # a page the spec cannot read must not stop the crawl
                logger.exception("parse failed for %s", redact_url(response.url))
                error = (ErrorKind.PARSE, f"{type(exc).__name__}: {exc}")

        outcome: Outcome
        if error is not None:
            kind, detail = error
            outcome = Outcome(
                row_id=row.id,
                ok=False,
                http_status=status,
                error_kind=kind,
                error=detail,
                retryable=kind.retryable,  # a 4xx (404, 410...) will not change by asking
            )
        elif row.kind in self.job.subtabs:
            outcome = Outcome(
                row_id=row.id,
                ok=True,
                http_status=status,
                parts=[PartWrite(row.context["item_key"], row.context["tab"], part)],
            )
        else:
            assert result is not None
            outcome = self._page_outcome(row, status, response.url, result)
        return outcome

    def _keep(self, row: Row, response: Response) -> ResponseWrite:
        """The response as the store keeps it: no secret value (a page may echo one)."""
        body = response.body
        final_url = response.url
        if self.secrets.values:
            # surrogateescape: any bytes round-trip unchanged where nothing is masked
            text = body.decode("utf-8", "surrogateescape")
            body = self.secrets.mask(text).encode("utf-8", "surrogateescape")
            final_url = self.secrets.mask(final_url)
        ctype = response.headers.get(b"Content-Type")
        return ResponseWrite(
            url=row.url,
            final_url=final_url,
            status=response.status,
            content_type=ctype.decode("latin-1") if ctype else None,
            body=body,
        )

    def on_failure(self, row: Row, failure: Failure) -> Handled | Deferred[Handled]:
        banned = self._soft_ban_refused(row, failure)
        if banned is not None:
            return banned
        kind, detail = classify_failure(failure)
        host = urlsplit(row.url).netloc
        outcome = Outcome(
            row_id=row.id,
            ok=False,
            error_kind=kind,
            error=detail,
            retryable=kind.retryable,
        )
        if kind not in HOST_FAILURES:
            self._outage.pop(host, None)  # reached, but failed otherwise: not down
            return self._commit(row, outcome, None, failure_url=row.url)
        streak = self._outage.setdefault(host, [])
        streak.append(row.id)
        # One row's attempts are enough to tell (a job with one start URL), whatever
        # the setting says.
        newly_down = host not in self.down_hosts and len(streak) >= max(
            1, min(self.limits.down_host_after, self.limits.max_attempts)
        )
        if newly_down:
            self.down_hosts.add(host)
        down = host in self.down_hosts
        if not down:
            return self._commit(row, outcome, None, failure_url=row.url)
        # committed now, with what waits: the attempts given back below are its own
        handled = self._commit(row, outcome, None, failure_url=row.url, host_down=True)
        assert isinstance(handled, Handled)
        # A host that is down says nothing about its rows: the attempts of the
        # outage are given back, so the next run tries them with a full budget.
        self.ws.store.refund(dict(Counter(streak)))
        if newly_down:
            self.event(
                "host_down",
                host=host,
                error_kind=str(kind),
                error=detail,
                attempts=len(streak),
                rows=sorted(set(streak)),
            )
            logger.warning(
                "%s: %d attempts in a row failed (%s: %s): stopping, the rows stay "
                "retryable (run again later)",
                redact_url(f"http://{host}"),
                len(streak),
                kind,
                detail,
            )
        streak.clear()
        # come back later, whatever else this failure tripped (the error-rate breaker)
        handled.stop = REASON_HOST_DOWN
        return handled

    def tab_read(self, row: Row, url: str, outcome: Outcome) -> None:
        """Count a sub-tab page's rows for the found-nothing findings (a kind's pages are
        counted by :meth:`_page_outcome`); the crawl and the reparse's writer call it
        with the outcome a page of any kind gave."""
        tab = self.job.subtabs.get(row.kind)
        if tab is not None and tab.fields is not None and outcome.ok and outcome.parts:
            each = tab.spec.each is not None
            self.findings.tab(row.kind, url, outcome.parts[0].value, each=each)

    def _page_outcome(self, row: Row, status: int, url: str, result: PageResult) -> Outcome:
        kind = self.job.kinds[row.kind]
        single = kind.spec.each is None
        items: list[ItemWrite] = []
        held: list[HoldWrite] = []
        new_rows: list[NewRow] = []
        page = int(row.context.get("page", 1))
        kept = [
            r.values
            for r in result.records
            if r.valid and (r.dedupe_key is not None or not kind.spec.emits)
        ]
        pg = kind.spec.pagination
        self.findings.page(
            row.kind,
            url,
            emits=kind.spec.emits,
            each=not single,
            values=kept,
            dropped=sum(1 for r in result.records if not r.valid),
            # "until empty" pagination ends on an empty page: that one is expected
            end_of_pages=pg is not None and pg.stop.empty and page > 1,
            follows=result.follows,
            matched=result.matched,
        )
        if kind.spec.emits and self.drift.watching(row.kind):
            for values in kept:
                self.drift.record(row.kind, url, values)
        for record in result.records:
            if record.fallbacks:
                self._page_drifted = True
            self._report_fallbacks(row.kind, url, record)
            if not record.valid:
                self.counters.records_invalid += 1
                self._report_invalid(row.kind, url, record)
                if single and kind.spec.emits:
                    return Outcome(
                        row_id=row.id,
                        ok=False,
                        http_status=status,
                        error_kind=ErrorKind.VALIDATION,
                        error="missing required field(s): " + ", ".join(record.missing),
                        retryable=False,
                    )
                continue
            if record.dedupe_key is None:
                continue
            if record.violations:  # kept aside, never an item: no sub-tabs to fetch
                held.append(self._hold(record))
                continue
            if kind.limits:  # over a change limit: the accepted version stays the item
                review = self._review(record, kind.limits)
                if review is not None:
                    held.append(review)
                    continue
            required_tabs = any(t.required for t in record.subtabs)
            items.append(
                ItemWrite(
                    dedupe_key=record.dedupe_key,
                    source_type=self.spec.source_type,
                    source_id=record.source_id or "",
                    data=record.values,
                    complete=not required_tabs,
                )
            )
            for tab in record.subtabs:
                new_rows.append(
                    NewRow(
                        kind=tab.kind,
                        url=tab.url,
                        method=tab.method,
                        body=tab.body,
                        body_type=tab.body_type,
                        context={
                            "item_key": record.dedupe_key,
                            "tab": tab.tab,
                            "required": tab.required,
                        },
                    )
                )
        for link in result.links:
            ctx = _carry(link.carry)
            if self.job.tracks_depth and link.depth:  # max_depth reads it after a resume
                ctx["depth"] = link.depth
            new_rows.append(NewRow(kind=link.kind, url=link.url, context=ctx))
        for link in result.next_pages:
            ctx = _carry(link.carry)
            ctx["page"] = page + 1
            if self.job.tracks_depth and link.depth:
                ctx["depth"] = link.depth
            # a `param` page's next page is its own request again (_as_requested); for
            # a plain GET that is what a next page was anyway
            posted = row.method.upper() != "GET" or row.body is not None
            again = link.same_request and posted and self._as_requested(row, url)
            new_rows.append(
                NewRow(
                    kind=link.kind,
                    url=link.url,
                    method=row.method if again else "GET",
                    body=row.body if again else None,
                    body_type=row.body_type if again else None,
                    context=ctx,
                )
            )
        # A form request is a row like any other: its body (the page's hidden state
        # included) is part of its identity, since a view state may hold earlier choices.
        for sub in result.forms:
            ctx = _carry(sub.carry)
            if self.job.tracks_depth:
                ctx["depth"] = int(row.context.get("depth", 0)) + 1
            new_rows.append(
                NewRow(
                    kind=sub.kind,
                    url=sub.url,
                    method=sub.method,
                    body=sub.body,
                    body_type=sub.body_type,
                    context=ctx,
                )
            )
        if held:
            self._hold_notes[row.id] = [(row.kind, url, h) for h in held]
        return Outcome(
            row_id=row.id, ok=True, http_status=status, new_rows=new_rows, items=items, holds=held
        )

    def _as_requested(self, row: Row, url: str) -> bool:
        """Is ``url`` (the page's, after redirects) the row's own, as sent? A page that
        was redirected was fetched by another request (a POST answered by a 303 is a GET
        of the new URL): a pagination repeating the row's method and body would send
        what the site never asked for, so its next page is a GET of the new URL. The
        reparse decides from the stored final URL, so both decide alike."""
        return safe_url_string(self.secrets.mask(url)) == safe_url_string(row.url)

    def _commit(
        self,
        row: Row,
        outcome: Outcome,
        response: Response | None,
        failure_url: str | None = None,
        host_down: bool = False,
        stop: str | None = None,
    ) -> Handled | Deferred[Handled]:
        """Hand the outcome to its group (group.py). A failed attempt, a stop or a down
        host commits the group at once: an attempt of a failing site counts toward the
        row's budget, its backoff and the breaker, and must not be lost to a kill (the
        pages that fail are few; the ones that succeed are what is worth grouping).
        What to hand back to Scrapy, once committed."""
        entry = _Entry(
            row=row,
            outcome=self.secrets.mask_outcome(self._fenced(row, outcome)),
            final_url=response.url if response is not None else failure_url,
            status=response.status if response is not None else None,
            size=len(response.body) if response is not None else 0,
            latency_s=response.meta.get("download_latency", 0.0) if response is not None else None,
            host_down=host_down,
            stop=stop,
        )
        waiting = self.group.add(
            entry,
            now=host_down or stop is not None or not outcome.ok,
            work=bool(outcome.new_rows),
        )
        if not waiting.done:
            if self.claiming and 2 * self._room() >= self.lease_batch:
                self._wake_claimer()  # its response is in: room for the next claim
            return waiting.deferred()
        if waiting.failure is not None:
            raise waiting.failure
        assert waiting.result is not None
        return waiting.result

    def _commit_group(self, entries: Sequence[_Entry]) -> list[Handled]:
        """One transaction for the group's outcomes, then each one's bookkeeping in
        arrival order. A full disk or a damaged file commits none of them: their rows
        stay pending and each waiter is told to stop."""
        results = self._commit_outcomes([e.outcome for e in entries])
        if isinstance(results, Handled):  # the fault, as stops_on_workspace_fault says
            for e in entries:
                self._hold_notes.pop(e.row.id, None)  # nothing of them was written
            return [Handled(stop=results.stop) for _ in entries]
        self.counters.commit_groups += 1
        # The URL log first, in one write: a kill between the commit and its lines would
        # leave committed requests unlogged (the log is how repeats are told).
        lines = [
            _url_line(e, res) for e, res in zip(entries, results, strict=True) if res is not None
        ]
        if self.claiming and self.leases is not None:
            for line in lines:  # one of `--processes N`: which worker made the request
                line["worker"] = self.leases.worker_id
        self.ws.urls.append_many(lines, redacted=True)
        out: list[Handled] = []
        for entry, res in zip(entries, results, strict=True):
            if res is None:
                self._hold_notes.pop(entry.row.id, None)
                out.append(self._refused(entry))
                continue
            handled = self._committed(entry, res)
            if entry.stop is not None:
                handled.stop = entry.stop
            out.append(handled)
        return out

    @stops_on_workspace_fault  # a full disk stops the crawl; the rows stay pending
    def _commit_outcomes(self, outcomes: list[Outcome]) -> list[CommitResult | None]:
        return self.ws.store.commit_many(outcomes)

    def _fenced(self, row: Row, outcome: Outcome) -> Outcome:
        """A claiming worker's outcome carries the token of its lease on the row; a row
        whose lease it lost carries 0, which no lease has: the store refuses both when
        the lease was taken over (the fence, leases.py)."""
        if not self.claiming or self.leases is None:
            return outcome
        return dataclasses.replace(outcome, lease_token=self.leases.token(row.id) or 0)

    def _refused(self, entry: _Entry) -> Handled:
        """The store refused the outcome (nothing of it written; see
        ``SqliteStore._apply_outcome``): the row is not counted, nothing is handed on."""
        row = entry.row
        if self.leases is not None:
            # fenced: another worker took the row over; the request was made all the
            # same, so the URL log says so (not "ok": the integrity check counts those)
            self.counters.fenced += 1
            self._settled(row.id)
            self.ws.urls.append(
                {
                    "time": utc_now(),
                    "method": row.method,
                    "url": redact_url(row.url),
                    "status": entry.status,
                    "outcome": "fenced",
                    "row": row.id,
                    "kind": row.kind,
                    "lease_token": entry.outcome.lease_token,
                    "worker": self.leases.worker_id,
                },
                redacted=True,
            )
        self.event("outcome_refused", row=row.id, kind=row.kind, url=redact_url(row.url))
        logger.warning("the outcome of %s was not committed (refused)", redact_url(row.url))
        return Handled()

    def _adopt(self, inserted: Sequence[Row]) -> list[Row]:
        """Of the rows a claiming worker just found, those it leases (the next pages of
        the chain, and as many others as it has room for, still free): the only ones it
        schedules; the rest are anyone's."""
        assert self.leases is not None
        # a next page (its kind paginates) always, even with no room: the one row that
        # leads to more work, sent now (the spider gives it the first place) rather than
        # left to be claimed behind the rows found before it (docs/benchmarks.md,
        # "Several processes"); then as many others as there is room for
        chain = [r for r in inserted if r.kind in self._chain_kinds]
        rest = [r for r in inserted if r.kind not in self._chain_kinds]
        took = chain + rest[: max(0, self._room() - len(chain))]
        if not took:
            return []
        got = self.leases.claim_ids([r.id for r in took])
        return [r for r in took if r.id in got]

    def _committed(self, entry: _Entry, res: CommitResult) -> Handled:
        """The bookkeeping of one committed outcome: counters, the URL log, events, the
        retry of a failed row, the items to emit and the error-rate breaker."""
        row, outcome, host_down = entry.row, entry.outcome, entry.host_down
        handled = Handled()
        c = self.counters
        c.requests += 1
        self._window.append(outcome.ok)
        if outcome.ok:
            c.ok += 1
        else:
            c.errors += 1
            key = str(outcome.error_kind)
            c.by_error[key] = c.by_error.get(key, 0) + 1
        c.rows_new += len(res.inserted)
        c.items_new += res.items_new
        self._report_holds(row.id)
        if outcome.items:  # a sub-tab merging its part into the record is not a change
            c.items_changed += res.items_changed
            c.items_unchanged += res.items_unchanged
            if res.changed:
                # A record that was stored before came back different: a human may want
                # to see which (a value that jumped, a field that vanished).
                self.event("items_changed", url=row.url, row=row.id, keys=list(res.changed))
        c.items_completed += len(res.completed)
        if outcome.response is not None:
            self._stored(res.response_bytes)
        token = self.leases.tokens.pop(row.id, None) if self.claiming and self.leases else None
        handled.rows.extend(self._adopt(res.inserted) if self.claiming else res.inserted)
        if self.claiming and res.inserted:
            self._wake_claimer()  # rows it did not take are free: claim them (or not)
        if not outcome.ok and not host_down:  # a down host's attempt is given back
            exhausted = not outcome.retryable or res.attempt >= self.limits.max_attempts
            if exhausted:
                self.event(
                    "row_failed",
                    row=row.id,
                    kind=row.kind,
                    url=row.url,
                    error_kind=str(outcome.error_kind),
                    error=outcome.error,
                    http_status=outcome.http_status,
                    attempts=res.attempt,
                )
            else:
                retry = self.ws.store.get_row(row.id)
                if retry is not None:
                    failed = self._failed[row.id] = self._failed.get(row.id, 0) + 1
                    delay = backoff_delay(
                        failed, self.limits.backoff_base, self.limits.backoff_max, self._rng
                    )
                    if delay > 0:
                        self._retry_at[row.id] = time.time() + delay
                    handled.rows.append(retry)
                    if token is not None and self.leases is not None:
                        self.leases.tokens[row.id] = token  # still this worker's row
                        token = None
        if token is not None:
            self._settled(row.id)
        # Items complete at write time are emitted from the record; items completed by
        # a sub-tab are read back whole from the store (their parts came separately).
        complete_now = {i.dedupe_key: i for i in outcome.items if i.complete}
        for key in res.completed:
            if key in complete_now:
                item = complete_now[key]
                handled.items.append(
                    {
                        "dedupe_key": key,
                        "source_type": item.source_type,
                        "source_id": item.source_id,
                        **item.data,
                    }
                )
            else:
                stored = self.ws.store.get_item(key)
                if stored is not None:
                    handled.items.append(
                        {
                            "dedupe_key": stored.dedupe_key,
                            "source_type": stored.source_type,
                            "source_id": stored.source_id,
                            **stored.data,
                        }
                    )
        window = self._window
        if (
            len(window) == window.maxlen
            and window.count(False) / len(window) > self.limits.error_rate_max
        ):
            handled.stop = REASON_ERROR_RATE
            if self._error_rate_said:
                # the requests in flight when it tripped still arrive while Scrapy
                # closes: one line says it (it was one per late answer, ~20 of them)
                return handled
            self._error_rate_said = True
            logger.error(
                "error rate %.0f%% over the last %d requests: stopping (a human must look)",
                100 * window.count(False) / len(window),
                len(window),
            )
        return handled

    def commit_reparse(self, row: Row, outcome: Outcome) -> CommitResult:
        """Commit the outcome of a stored page read again (``framework reparse``): its
        items and the rows it found, as a crawl would, but no attempt is counted and
        nothing is logged as a request, because none was made."""
        (res,) = self.commit_reparses([(row, outcome)])
        return res

    def commit_reparses(self, pages: Sequence[tuple[Row, Outcome]]) -> list[CommitResult]:
        """:meth:`commit_reparse` of many pages in ONE transaction, in order (a later
        page sees what an earlier one wrote); all or none. Its events are written once
        the transaction is committed, so a killed reparse leaves none for pages whose
        outcome was lost."""
        outcomes = [
            dataclasses.replace(self.secrets.mask_outcome(o), reparse=True) for _, o in pages
        ]
        results = self.ws.store.commit_many(outcomes)
        out: list[CommitResult] = []
        events: list[dict[str, Any]] = []  # one write for the group's events
        for (row, _), outcome, res in zip(pages, outcomes, results, strict=True):
            # refused (None) only by a lease's fencing: a reparse holds the crawl lock
            assert res is not None, f"the reparse commit of row {row.id} was refused"
            self._count_reparse(row, outcome, res, events)
            out.append(res)
        if events:  # each built redacted (see _count_reparse)
            self.ws.events.append_many(events, redacted=True)
        return out

    def _count_reparse(
        self, row: Row, outcome: Outcome, res: CommitResult, events: list[dict[str, Any]]
    ) -> None:
        """Count a reparsed page's outcome; its events go to ``events``, redacted: the
        one for changed items (one per page that changed) has only its URL and its keys
        to mask, the generic walk is for the rare failed row."""
        c = self.counters
        if outcome.ok:
            c.ok += 1
        else:
            c.errors += 1
            key = str(outcome.error_kind)
            c.by_error[key] = c.by_error.get(key, 0) + 1
            if row.status is RowStatus.OK:
                events.append(
                    redact(
                        self._event_line(
                            "row_failed",
                            row=row.id,
                            kind=row.kind,
                            url=row.url,
                            error_kind=key,
                            error=outcome.error,
                            reparse=True,
                        )
                    )
                )
        c.rows_new += len(res.inserted)
        c.items_new += res.items_new
        self._report_holds(row.id)
        changed, unchanged = self._reparse_changed, self._reparse_unchanged
        changed.update(res.changed)
        unchanged.difference_update(res.changed)
        if outcome.items and res.items_unchanged:
            if res.items_new:  # which of the others are new the result does not say:
                self._reparse_unchanged_n += res.items_unchanged  # counted, not named
            else:
                unchanged.update(w.dedupe_key for w in outcome.items if w.dedupe_key not in changed)
        c.items_changed = len(changed)
        c.items_unchanged = len(unchanged) + self._reparse_unchanged_n
        if res.changed:
            events.append(
                self._event_line(
                    "items_changed",
                    url=redact_url(row.url),
                    row=row.id,
                    keys=[redact_url(k) for k in res.changed],
                )
            )
        c.items_completed += len(res.completed)

    def _stored(self, size: int) -> None:
        self.counters.responses_stored += 1
        self._stored_bytes += size
        budget = self.limits.responses_budget
        if budget and self._stored_bytes >= budget and self._storing:
            self._storing = False  # said once: the pages stored so far stay
            mb = budget / 2**20
            logger.warning(
                "stored responses reached FRAMEWORK_RESPONSES_BUDGET_MB (%.0f MB): the "
                "pages fetched from now on are not stored (`framework reparse` skips them)",
                mb,
            )
            self.event("responses_budget_reached", budget_mb=mb, stored_bytes=self._stored_bytes)

    # ------------------------------------------------------------- reporting
    def _report_invalid(self, kind: str, url: str, record: Record) -> None:
        # said (and recorded as an event) once per kind and missing fields, counted
        # always: a wrong selector on 100,000 pages is one warning with a count
        missing = ", ".join(record.missing)
        if self.findings.note("records_dropped", kind, url, detail=missing):
            self.event("record_invalid", url=url, missing=record.missing, errors=record.errors)
        logger.debug(
            "record dropped at %s: missing required field(s) %s%s",
            redact_url(url),
            missing,
            "".join(f"; {f}: {m}" for f, m in record.errors),
        )

    def _hold(self, record: Record) -> HoldWrite:
        """A record that breaks a rule of the spec: stored as ``invalid`` (holds.py),
        with every rule it breaks; reported once committed (:meth:`_report_holds`)."""
        return HoldWrite(
            dedupe_key=record.dedupe_key or "",
            source_type=self.spec.source_type,
            source_id=record.source_id or "",
            data=record.values,
            status=INVALID,
            reasons=[{"rule": r, "field": f, "value": v} for f, r, v in record.violations],
        )

    def _report_holds(self, row_id: int) -> None:
        """Count the holds a committed outcome wrote, always; warn once per kind, field
        and rule; record an ``item_invalid`` event as often as that warning, and an
        ``item_review_required`` one per hold (what `framework review` settles)."""
        for kind, url, hold in self._hold_notes.pop(row_id, ()):
            first = hold.reasons[0]
            seen = (kind, first["field"], first["rule"])
            said = seen in self._rules_seen
            self._rules_seen.add(seen)
            if hold.status == INVALID:
                self.counters.items_invalid += 1
                if said:
                    continue
                logger.warning(
                    "record %s of %s breaks rule %s of field %r (value %r) at %s: stored "
                    "as invalid, not shipped",
                    hold.dedupe_key,
                    kind,
                    first["rule"],
                    first["field"],
                    first["value"],
                    redact_url(url),
                )
                self.event(
                    "item_invalid",
                    kind=kind,
                    key=hold.dedupe_key,
                    url=url,
                    reasons=list(hold.reasons),
                )
                continue
            self.counters.items_review += 1
            if not said:
                logger.warning(
                    "record %s of %s: field %r %s (%r -> %r) at %s: held for `framework "
                    "review`, the accepted version still ships",
                    hold.dedupe_key,
                    kind,
                    first["field"],
                    first["rule"],
                    first["was"],
                    first["value"],
                    redact_url(url),
                )
            self.event(
                "item_review_required",
                kind=kind,
                key=hold.dedupe_key,
                url=url,
                reasons=list(hold.reasons),
            )

    def _review(self, record: Record, limits: ChangeLimits) -> HoldWrite | None:
        """The candidate held as ``review_required`` when it breaks a change limit against
        the stored (accepted) version of its key; None when it is within them. The crawl
        is the workspace's only writer (its lock), so the stored version read here is
        the one the page's commit would replace (once an outcome of the same key that
        waits for its group commit is committed first)."""
        key = record.dedupe_key or ""
        if any(
            key in {w.dedupe_key for w in e.outcome.items}
            or key in {p.dedupe_key for p in e.outcome.parts}
            for e in self.group.entries_waiting()
        ):
            self.group.flush()
        old = self.ws.store.get_item(key)
        if old is None:
            return None
        reasons = limits.breaches(old.data, record.values)
        if not reasons:
            return None
        return HoldWrite(
            dedupe_key=key,
            source_type=self.spec.source_type,
            source_id=record.source_id or "",
            data=record.values,
            status=REVIEW,
            reasons=reasons,
        )

    def _report_fallbacks(self, kind: str, url: str, record: Record) -> None:
        for fld, index, expr in record.fallbacks:
            self.counters.fallbacks += 1
            first = self._first_selector(kind, fld) if "[" not in fld else []
            self.drift.fallback(kind, fld, first[0] if first else None, expr, url)
            seen = (kind, fld, index)
            if seen in self._fallbacks_seen:
                continue
            self._fallbacks_seen.add(seen)
            logger.warning(
                "layout changed? field %r of %s matched fallback #%d (%s) at %s",
                fld,
                kind,
                index,
                expr,
                redact_url(url),
            )
            self.event("layout_fallback", kind=kind, field=fld, index=index, selector=expr, url=url)

    def _first_selector(self, kind: str, field: str) -> list[str]:
        """A field's sources as labels (``css: .amount::text``), for drift reports."""
        spec = self.job.kinds[kind].spec
        fs = spec.id if field == "id" else spec.fields.get(field)
        return [f"{s.kind}: {s.expr}" for s in fs.sources] if fs is not None else []

    def _last_fill(self) -> dict[str, Any]:
        """The fill counts of the last crawl or reparse (its finishing event), if any:
        what this run's fill rates are compared with (read from the log's end)."""
        event = self.ws.events.last(EXTRACTION_EVENTS)
        return last_extraction(event)["fill"] if event is not None else {}

    def _finish_findings(self, items: Mapping[str, int], code: int) -> dict[str, Any]:
        """The end-of-run findings, as the run_finished event's extra fields."""
        emitting = [n for n, k in self.job.kinds.items() if k.spec.emits]
        self.findings.finish(emitting)
        found: dict[str, Any] = {
            "warnings": self.findings.warnings(),
            "fill": self.findings.fill(),
        }
        found["drift"] = self.drift.finish(found["fill"], self._first_selector)
        self._carry_unread(found)
        if code == EXIT_OK and nothing_extracted(items, self.spec.expect_empty):
            found["nothing_extracted"] = True
            # a run that read no page has no warning of its own: status has the last's
            above = "the warnings above and " if self.findings.warnings() else ""
            logger.error(
                "job %s extracted nothing: no item is stored (see %s`framework status %s`); "
                "if that is expected, say `expect_empty: true` in the spec",
                self.spec.name,
                above,
                self.spec.name,
            )
            self.event(FOUND_NOTHING_EVENT, what="no_items", kind=self.job.start_kind)
        return found

    def _carry_unread(self, found: dict[str, Any]) -> None:
        """The kinds this run read no page of keep the warnings and fill counts of the
        last crawl or reparse (``framework status`` shows the newest run's): a resumed
        crawl that only fetched detail pages, or one with nothing to do, must not blank
        what the list pages' run found (an `each` or `follow` that matched nothing),
        while the headline still points at it. Named in ``carried``, as a reparse
        names the kinds it left unread."""
        read = self.findings.kinds_read()
        known = set(self.job.kinds) | set(self.job.subtabs)
        if not known - read:
            return
        event = self.ws.events.last(EXTRACTION_EVENTS)
        if event is None:
            return
        last = last_extraction(event)
        carried: set[str] = set()
        for kind, entry in last["fill"].items():
            if kind in known and kind not in read and kind not in found["fill"]:
                found["fill"][kind] = entry
                carried.add(kind)
        for warning in last["warnings"]:
            kind = warning.get("kind")
            if kind in known and kind not in read:
                found["warnings"].append(warning)
                carried.add(kind)
        if carried:
            found["carried"] = sorted(carried)

    def event(self, name: str, **data: Any) -> None:
        self.ws.events.append(self._event_line(name, **data))

    def _event_line(self, name: str, **data: Any) -> dict[str, Any]:
        return {"time": utc_now(), "event": name, "job": self.spec.name, **data}

    def close(self, reason: str) -> str:
        """Write the run's last event and release the workspace; return the final
        reason (ours when a stop condition fired, else Scrapy's)."""
        final = self.stop_reason or reason
        if final == REASON_FINISHED and self.capped:
            final = REASON_MAX_REQUESTS
        try:
            # what waits for its group is committed, whatever stopped the run (a signal,
            # a stop condition): those responses came, their outcomes are not lost
            self.group.flush()
        except Exception:
            logger.exception("the last outcomes could not be committed; their rows stay pending")
        try:
            c = self.counters
            counts = self.ws.store.row_counts()
            items = self.ws.store.item_counts()
            self.items_at_end = dict(items)
            # the holds the workspace keeps: a drained crawl with some needs a human
            code = exit_code(final, *row_totals(counts), self.ws.store.hold_counts()["total"])
            found = self._finish_findings(items, code)
            self.event(
                "run_finished",
                reason=final,
                exit_code=EXIT_HALTED if found.get("nothing_extracted") else code,
                **({"worker": self.leases.worker_id} if self.claiming and self.leases else {}),
                duration_s=round(time.monotonic() - self.started, 3),
                counts={
                    "requests": c.requests,
                    "ok": c.ok,
                    "errors": c.errors,
                    "errors_by_kind": c.by_error,
                    "rows_new": c.rows_new,
                    "items_new": c.items_new,
                    "items_changed": c.items_changed,
                    "items_completed": c.items_completed,
                    "records_invalid": c.records_invalid,
                    "items_invalid": c.items_invalid,
                    "items_review": c.items_review,
                    "fallbacks": c.fallbacks,
                    "responses_stored": c.responses_stored,
                    "fenced": c.fenced,
                },
                rows={k: {str(st): n for st, n in v.items()} for k, v in counts.items()},
                items=items,
                **found,
                **self._blocked_summary(),
            )
        except (WorkspaceFull, WorkspaceBroken) as exc:
            # the run's end cannot be written; the crawl's exit (4) says why
            logger.info("run_finished not recorded: %s", exc)
        finally:
            self._stop_worker()
            self._stack.close()
            self.ws.close()
            self.heap.thaw()
        return final

    def _stop_worker(self) -> None:
        """Stop the heartbeat and release this worker's leases (a killed one leaves
        them to expire, or to the next claimer that sees its pid gone)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self.leases is not None and self.leases.worker_id:
            try:
                self.leases.stop()
            except (WorkspaceFull, WorkspaceBroken) as exc:
                logger.info("leases not released: %s", exc)

    def _blocked_summary(self) -> dict[str, Any]:
        """The soft ban that stopped the run, for run_finished (and so `status`)."""
        b = self.blocked
        if b is None:
            return {}
        return {"blocked": {"url": redact_url(b.url), "rule": b.rule, "status": b.status}}


def _url_line(entry: _Entry, res: CommitResult) -> dict[str, Any]:
    """The URL log line of a committed request. Built from known fields only; the URLs
    are the one place a secret could hide (credentials, ?token=), so they are masked
    here and the log's generic walk is skipped."""
    row, final_url = entry.row, entry.final_url
    return {
        "time": utc_now(),
        "method": row.method,
        "url": redact_url(row.url),
        "final_url": redact_url(final_url) if final_url else final_url,
        "status": entry.status,
        "bytes": entry.size,
        "latency_ms": None if entry.latency_s is None else round(1000 * entry.latency_s, 1),
        "outcome": "ok" if entry.outcome.ok else str(entry.outcome.error_kind),
        "row": row.id,
        "kind": row.kind,
        "attempt": res.attempt,
    }


def commit_window_ms(value: Any, database: bool) -> float:
    """``FRAMEWORK_COMMIT_WINDOW_MS`` as set, else the default of the workspace's kind
    (a database or a folder: group.py)."""
    if value is None or value == "":
        return DB_WINDOW_MS if database else WINDOW_MS
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"FRAMEWORK_COMMIT_WINDOW_MS: {value!r} is not a number") from None


def nothing_extracted(items: Mapping[str, int], expect_empty: bool) -> bool:
    """A run that would drain cleanly but left the workspace without a single item
    (every selector wrong, every record dropped) is not a success unless the spec
    says an empty result is expected (``expect_empty: true``)."""
    return not expect_empty and not sum(items.values())


def _carry(values: dict[str, Any]) -> dict[str, Any]:
    return {"carry": values} if values else {}


def workspace_target(jobdir: str) -> str | Path:
    """JOBDIR as a workspace target: a database URL as it is, else a folder."""
    return jobdir if is_database_url(jobdir) else Path(jobdir)


async def _wait(deferred: Any) -> None:
    from scrapy.utils.defer import maybe_deferred_to_future

    await maybe_deferred_to_future(deferred)
