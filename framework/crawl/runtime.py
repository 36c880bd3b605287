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

It orchestrates: outcome.py reads pages, claimer.py claims rows, limits.py reads
settings (only in :meth:`CrawlRuntime.from_crawler`), then counters, deadlines, outage,
softban, keeping, report.py (``run_finished``). ``__init__`` takes plain values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from framework.crawl.blocking import REASON_BLOCKED, Detector
from framework.crawl.claimer import Claimer, join
from framework.crawl.counters import ErrorRateBreaker, RunCounters
from framework.crawl.deadlines import HostDeadlines, RetryWaits
from framework.crawl.failures import HOST_FAILURES, classify_failure
from framework.crawl.fingerprint import kind_fingerprints, kind_sections
from framework.crawl.group import BATCH, GroupCommit
from framework.crawl.handled import Entry, Handled, emitted, fenced_line, url_line
from framework.crawl.keeping import ResponseKeeper
from framework.crawl.limits import Limits, commit_window_ms, workspace_target
from framework.crawl.outage import Outages
from framework.crawl.outcome import OutcomeBuilder
from framework.crawl.page import CompiledJob
from framework.crawl.report import RunReport, blocked_summary
from framework.crawl.secrets import Secrets
from framework.crawl.softban import SoftBans
from framework.crawl.stopping import stops_on_workspace_fault
from framework.errors import UsageError, WorkspaceBroken, WorkspaceFull
from framework.heap import FrozenHeap
from framework.settings import default
from framework.workspace import (
    NewRow,
    Outcome,
    Row,
    Workspace,
    deferrals,
    redact_url,
    utc_now,
)
from framework.workspace.leases import Leases
from framework.workspace.leases import reset as reset_leases
from framework.workspace.pg_workspace import PgLog
from framework.workspace.records import CommitResult

# the names others import from here (their modules: limits.py, counters.py, report.py)

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
NOT_BEFORE_META = deferrals.NOT_BEFORE_META


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
        self.started = time.monotonic()
        self.breaker = ErrorRateBreaker(limits.error_rate_max, limits.error_rate_window)
        # what each kind's pages are read with (framework/crawl/fingerprint.py), and the
        # kinds this run has marked as read with it (see _mark_read)
        self._digests: dict[str, str] = {}
        self._sections: dict[str, str] = {}  # by digest
        self._marked: set[str] = set()
        self._boundary = 0  # rows with id above this were created by this run
        # the hosts' Retry-After deadlines, kept in the workspace (deadlines.py)
        self.deadlines = HostDeadlines(ws, limits, fresh, self.event)
        self.retries = RetryWaits(limits.backoff_base, limits.backoff_max, rng)  # backoff
        self.outages = Outages(limits.down_host_after, limits.max_attempts)  # outage.py
        self._stack = ExitStack()
        # Outcomes of responses that arrive together share one transaction (group.py);
        # the defaults here (one each) are for tools and tests that build a runtime.
        self.group: GroupCommit[Entry, Handled] = GroupCommit(
            self._commit_group, commit_window_s, commit_batch
        )
        # dropped records, drift, holds and the run's findings (report.py)
        self.report = RunReport(job, ws, self.counters, self.event, self.group)
        self.findings = self.report.findings
        self.drift = self.report.drift
        # soft bans: see blocking.py, softban.py
        self.bans = SoftBans(Detector(self.spec, self.job.guard), ws, self.event)
        # this process in the workspace's `workers` table; with `claiming` (one of
        # `--processes N`) it fetches only rows it holds a lease on (leases.py)
        self.leases: Leases | None = None
        self.claimer: Claimer | None = None  # with the leases (claimer.py)
        self.claiming = False
        self.lease_batch = 0  # rows a claiming worker holds at most
        # {env:NAME} values never reach a row, a log file or a log line: see secrets.py
        self.secrets = Secrets.from_spec(self.spec)
        self.outcomes = OutcomeBuilder(job, self.secrets)  # the one page -> outcome path
        # ok pages' bodies kept for the reparse, within the budget (keeping.py)
        self.keeper = ResponseKeeper(
            limits.store_responses, limits.responses_budget, self.secrets, self.counters, self.event
        )
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
        limits = Limits.from_settings(s, job.spec)
        spec_hash = "sha256:" + hashlib.sha256(spec_path.read_bytes()).hexdigest()
        ws = Workspace.open(workspace_target(jobdir), create=True)
        if fresh is None:
            fresh = s.getbool("FRAMEWORK_FRESH", default("FRAMEWORK_FRESH"))
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
            runtime.claiming, runtime.lease_batch, runtime.leases = join(ws, s, runtime._stack)
            runtime.claimer = Claimer(
                runtime.leases, runtime.group, runtime.lease_batch, runtime.job, runtime.event
            )
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
        resumed, counts = self._seed()
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

    def _seed(self) -> tuple[bool, dict[str, Any]]:
        """Seed the start URLs (those not there yet); whether the run resumes, and the
        rows by kind and status."""
        store = self.ws.store
        seeded = store.seed(
            [NewRow(kind=self.job.start_kind, url=u, context={}) for u in self.spec.start_urls]
        )
        counts = store.row_counts()
        return sum(sum(v.values()) for v in counts.values()) > len(seeded), counts

    async def claimed_rows(self) -> AsyncIterator[Row]:
        """The rows of one of `--processes N` workers: batches claimed by lease as room
        frees up (leases.py), until no row is open and no other live worker holds one
        (it may still find rows, or die and leave its rows to this one)."""
        leases = self.leases
        if leases is None or not self._begin():
            return
        store = self.ws.store
        resumed, counts = self._seed()
        if next(store.resumable(self.limits.max_attempts), None) is None:
            self.stop_reason = REASON_ALREADY_DONE
            self.event("run_resumed", note="nothing to do: every row is ok or exhausted")
            return
        self.event(
            "run_resumed" if resumed else "run_started",
            rows={k: {str(st): n for st, n in v.items()} for k, v in counts.items()},
            worker=leases.worker_id,
        )
        for log in (self.ws.urls, self.ws.events):
            if isinstance(log, PgLog):  # every line of a shared table names its worker
                log.worker = str(leases.worker_id)
        assert self.claimer is not None  # made with the leases
        async for row in self.claimer.rows(
            self.limits.max_attempts, lambda: self.stop_reason is None
        ):
            yield row

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
            self.report.spec_changed(previous, self.spec_hash, self.fresh)
        self.ws.record_spec(self.spec_hash)
        # each kind's digest is marked when its first page is read (_mark_read); pages
        # stored by a version that kept no digests are marked now, whatever is read
        self.ws.mark_unknown_reads(self._kind_digests())
        self.drift.previous_fill(self.report.last_fill())
        if self.keeper.storing and self.limits.responses_budget:
            self.keeper.stored_bytes = store.responses_size()[1]
        if not self.deadlines.load(time.time()):
            self.stop_reason = REASON_RATE_LIMITED
            return False
        return True

    def not_before_for(self, row: Row) -> float | None:
        """When the row's request may be sent (epoch seconds), if not at once: its
        host's Retry-After deadline, or the backoff of its retry in this run."""
        retry = self.retries.pop(row.id)
        host = self.deadlines.until(row.url)
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
        self.outages.streaks.pop(urlsplit(row.url).netloc, None)  # it answered: not down
        if self.bans.response(row, response):
            return Handled(stop=REASON_BLOCKED)
        status = response.status
        if row.kind not in self._marked:
            fault = self._mark_read(row.kind)
            if fault is not None:
                return fault
        report = self.report
        report.drifted = False
        outcome = self.outcomes.outcome(row, response, report)
        self.outcomes.tab_read(row, response.url, outcome, self.findings)
        if report.drifted and self.limits.halt_on_drift:
            # nothing of this page is committed: its row stays pending, no drifted record
            # is stored; the drift event is written, the crawl stops (exit 4)
            report.dropped(row.id)
            return Handled(stop=REASON_DRIFT)
        keeper = self.keeper
        if keeper.storing and status < 400:
            outcome = dataclasses.replace(outcome, response=keeper.keep(row, response))
        meta = response.meta
        # a Retry-After over the cap stops the run, as a 429 does with --stop-on-429
        over = "fw_retry_after" in meta and self.deadlines.asked(row.url, meta, response.url)
        limited = over or (status == 429 and self.limits.stop_on_429)
        return self._commit(row, outcome, response, stop=REASON_RATE_LIMITED if limited else None)

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

    def on_failure(self, row: Row, failure: Failure) -> Handled | Deferred[Handled]:
        if self.bans.refused(row, failure):
            return Handled(stop=REASON_BLOCKED)
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
            self.outages.streaks.pop(host, None)  # reached, but failed otherwise: not down
            return self._commit(row, outcome, None, failure_url=row.url)
        down = self.outages.failed(host, row.id)
        if down is None:
            return self._commit(row, outcome, None, failure_url=row.url)
        streak, newly_down = down
        # committed now, with what waits: the attempts given back below are its own
        handled = self._commit(row, outcome, None, failure_url=row.url, host_down=True)
        assert isinstance(handled, Handled)
        # A host that is down says nothing about its rows: the attempts of the
        # outage are given back, so the next run tries them with a full budget.
        self.ws.store.refund(dict(Counter(streak)))
        if newly_down:
            self.outages.tell(host, kind, detail, streak, self.event)
        streak.clear()
        # come back later, whatever else this failure tripped (the error-rate breaker)
        handled.stop = REASON_HOST_DOWN
        return handled

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
        entry = Entry(
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
            if self.claiming and self.claimer is not None:
                self.claimer.wake_if_room()  # its response is in: room for the next claim
            return waiting.deferred()
        if waiting.failure is not None:
            raise waiting.failure
        assert waiting.result is not None
        return waiting.result

    def _commit_group(self, entries: Sequence[Entry]) -> list[Handled]:
        """One transaction for the group's outcomes, then each one's bookkeeping in
        arrival order. A full disk or a damaged file commits none of them: their rows
        stay pending and each waiter is told to stop."""
        results = self._commit_outcomes([e.outcome for e in entries])
        if isinstance(results, Handled):  # the fault, as stops_on_workspace_fault says
            for e in entries:
                self.report.dropped(e.row.id)  # nothing of them was written
            return [Handled(stop=results.stop) for _ in entries]
        self.counters.commit_groups += 1
        # The URL log first, in one write: a kill between the commit and its lines would
        # leave committed requests unlogged (the log is how repeats are told).
        lines = [
            url_line(e, res) for e, res in zip(entries, results, strict=True) if res is not None
        ]
        if self.claiming and self.leases is not None:
            for line in lines:  # one of `--processes N`: which worker made the request
                line["worker"] = self.leases.worker_id
        self.ws.urls.append_many(lines, redacted=True)
        out: list[Handled] = []
        for entry, res in zip(entries, results, strict=True):
            if res is None:
                self.report.dropped(entry.row.id)
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

    def _refused(self, entry: Entry) -> Handled:
        """The store refused the outcome (nothing of it written; see
        ``SqliteStore._apply_outcome``): the row is not counted, nothing is handed on."""
        row = entry.row
        if self.leases is not None and self.claimer is not None:
            # fenced: another worker took the row over (see fenced_line)
            self.counters.fenced += 1
            self.claimer.settled(row.id)
            self.ws.urls.append(fenced_line(entry, self.leases.worker_id), redacted=True)
        self.event("outcome_refused", row=row.id, kind=row.kind, url=redact_url(row.url))
        logger.warning("the outcome of %s was not committed (refused)", redact_url(row.url))
        return Handled()

    def _committed(self, entry: Entry, res: CommitResult) -> Handled:
        """The bookkeeping of one committed outcome: counters, the URL log, events, the
        retry of a failed row, the items to emit and the error-rate breaker."""
        row, outcome, host_down = entry.row, entry.outcome, entry.host_down
        handled = Handled()
        c = self.counters
        c.requests += 1
        c.outcome(outcome, res)
        self.report.committed(row.id)
        if outcome.items:  # a sub-tab merging its part into the record is not a change
            c.items_changed += res.items_changed
            c.items_unchanged += res.items_unchanged
            if res.changed:
                # A record that was stored before came back different: a human may want
                # to see which (a value that jumped, a field that vanished).
                self.event("items_changed", url=row.url, row=row.id, keys=list(res.changed))
        c.items_completed += len(res.completed)
        if outcome.response is not None:
            self.keeper.stored(res.response_bytes)
        token = self.leases.tokens.pop(row.id, None) if self.claiming and self.leases else None
        claimer = self.claimer if self.claiming else None
        handled.rows.extend(claimer.adopt(res.inserted) if claimer else res.inserted)
        if claimer is not None and res.inserted:
            claimer.wake()  # rows it did not take are free: claim them (or not)
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
                    self.retries.failed(row.id)
                    handled.rows.append(retry)
                    if token is not None and self.leases is not None:
                        self.leases.tokens[row.id] = token  # still this worker's row
                        token = None
        if token is not None and claimer is not None:
            claimer.settled(row.id)
        if res.completed:
            emitted(outcome, res, self.ws.store, handled.items, row.url)
        if self.breaker.tripped(outcome.ok):
            handled.stop = REASON_ERROR_RATE
        return handled

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
            self.report.run_finished(
                final,
                {"worker": self.leases.worker_id} if self.claiming and self.leases else {},
                round(time.monotonic() - self.started, 3),
                blocked_summary(self.bans.first),
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

    @property
    def items_at_end(self) -> dict[str, int]:
        """The workspace's item counts at the run's end (close()): what an -o feed of
        this run's records is compared with."""
        return self.report.items_at_end

    def _stop_worker(self) -> None:
        """Stop the heartbeat and release this worker's leases (a killed one leaves
        them to expire, or to the next claimer that sees its pid gone)."""
        if self.claimer is not None:
            self.claimer.stop()
        if self.leases is not None and self.leases.worker_id:
            try:
                self.leases.stop()
            except (WorkspaceFull, WorkspaceBroken) as exc:
                logger.info("leases not released: %s", exc)
