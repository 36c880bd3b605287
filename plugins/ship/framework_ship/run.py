"""The ship run: which items go out, in what units, and when the run stops.

Owns one run of ``framework ship``: take the workspace's ship lock, stream its items in
dedupe-key order (bounded memory: the store pages them, the side index answers "already
delivered?" per key), decide per item (ship / skip / hold), group items into units of
``batch_size``, hand units to a thread pool of ``concurrency`` deliverers (never two
in-flight deliveries of one key), count final outcomes, trip the error-rate breaker,
honour ``--max-items`` and SIGINT/SIGTERM (the first lets what is in flight finish
within the stop grace and names it, a second aborts the wait), append
``ship_started``/``ship_finished`` to ``events.jsonl`` and print a summary; a run that
rejected anything ends in :class:`Rejected` (exit 4). Everything it prints or stores
passes one :class:`~framework_ship.mask.Masker`, and everything it prints passes
:func:`framework.terminal.printable` (keys and a server's texts are not ours: no
control character of theirs reaches the terminal). The verdict of the run is its
return (drained) or a raised :class:`Checkpoint` / :class:`Halted`; it never calls
``sys.exit``. HTTP, retries and the log format belong to :mod:`client`, :mod:`deliver`,
:mod:`shiplog`.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlsplit

from framework import progress
from framework.errors import Checkpoint, FrameworkError, Halted, UsageError
from framework.terminal import printable
from framework.workspace import StoredItem, Workspace, utc_now
from framework_ship.classify import Outcome
from framework_ship.client import IngestClient, items_url
from framework_ship.deadline import Deadline, host_of
from framework_ship.deliver import Aborted, Deliverer, Interrupted, UnitResult
from framework_ship.index import SUCCESS, Latest, ShipIndex, digest
from framework_ship.mask import Masker
from framework_ship.policy import RetryPolicy
from framework_ship.shiplog import ShipLog

# Measured (bench/bench_ship.py, docs/benchmarks.md) against the reference server:
# 250 was the fastest size in one scan and within 13% of 500 in the other, while it
# stays half the server's default limit (500: a 413 above) and a request under 100 KB.
DEFAULT_BATCH_SIZE = 250
DECIDE_CHUNK = 500  # items per index query; bounded memory, few round trips
_SHOWN_REJECTIONS = 5  # rejections named on stderr at the end of a run
OUTCOME_ORDER = ("accepted", "updated", "duplicate", "skipped", "rejected", "error")
# What requests in flight get at a stop before they are abandoned (the crawl's
# FRAMEWORK_STOP_GRACE default, framework.crawl.stopping.GRACE_S).
STOP_GRACE_S = 5.0


class Rejected(Halted):
    """The endpoint refused items (400/413/422): they wait for a human (exit 4)."""


@dataclass(frozen=True)
class ShipOptions:
    endpoint: str
    fallback_path: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    concurrency: int = 1
    timeout: float = 30.0
    max_items: int | None = None
    only: Sequence[str] = ()
    include_incomplete: bool = False
    retry_rejected: bool = False
    dry_run: bool = False
    max_error_rate: float = 0.5
    error_window: int = 50
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    stop_grace: float = STOP_GRACE_S

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError("--batch-size must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.timeout <= 0:
            raise UsageError("--timeout must be positive")
        if self.max_items is not None and self.max_items < 0:
            raise UsageError("--max-items must not be negative")
        if not 0 < self.max_error_rate <= 1:
            raise UsageError("--max-error-rate is a fraction in (0, 1]")
        if self.error_window < 1:
            raise UsageError("--error-window must be at least 1")
        if self.stop_grace < 0:
            raise UsageError("--stop-grace must not be negative")


@dataclass
class ShipSummary:
    counts: Counter[str] = field(default_factory=Counter)
    held: int = 0  # rejected earlier, same content: waits for review (--retry-rejected)
    elapsed: float = 0.0
    reason: str = "drained"
    exit_code: int = 0
    order: tuple[str, ...] = OUTCOME_ORDER  # the outcomes shown, in this order

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {k: self.counts.get(k, 0) for k in self.order},
            "held_rejected": self.held,
            "elapsed_s": round(self.elapsed, 3),
            "reason": self.reason,
            "exit_code": self.exit_code,
        }

    def line(self) -> str:
        parts = [f"{k} {self.counts.get(k, 0)}" for k in self.order]
        sent = sum(self.counts.get(k, 0) for k in ("accepted", "updated", "duplicate"))
        rate = sent / self.elapsed if self.elapsed > 0 else 0.0
        held = f" (held for review: {self.held})" if self.held else ""
        return (
            f"ship: {', '.join(parts)}{held}; {self.elapsed:.1f} s, {rate:.0f} items/s; "
            f"{self.reason}"
        )


def decide(item: StoredItem, latest: Latest | None, retry_rejected: bool) -> tuple[bool, str]:
    """(ship?, why) for one item, from the latest ship-log record of its key."""
    if latest is None:
        return True, "never shipped"
    h = digest(item.content_hash)
    if latest.ok_hash == h and latest.hash == h:
        return False, "delivered with this content"
    if latest.outcome == "rejected" and latest.hash == h:
        if retry_rejected:
            return True, "rejected before; --retry-rejected"
        return False, "rejected before with this content; held for review"
    if latest.ok_hash is not None and latest.ok_hash != h:
        return True, "content changed since the last delivery"
    if latest.outcome in SUCCESS:
        return True, "content changed since the last delivery"
    return True, "previous attempts failed"


class _Progress:
    """The run's progress on stderr, as the crawl's (:mod:`framework.progress`): a live
    line on a terminal, a plain line every ``FRAMEWORK_PROGRESS_INTERVAL`` seconds
    elsewhere, none when quiet. Counts items with a verdict this run of those to look at."""

    def __init__(self, stream: TextIO, quiet: bool = False) -> None:
        self.stream = stream
        self.mode = progress.mode(quiet, stream)
        self._meter: progress.Meter | None = None
        self._counts: Counter[str] = Counter()

    def start(self, total: int | None) -> None:
        self._meter = progress.Meter(
            "ship",
            total,
            "items",
            self.mode,
            every=progress.interval(self.mode),
            stream=self.stream,
            detail=self._detail,
        ).start()

    def _detail(self) -> str:
        c = self._counts
        sent = sum(c.get(k, 0) for k in ("accepted", "updated", "duplicate"))
        return (
            f"shipped {sent}, skipped {c.get('skipped', 0)}, rejected "
            f"{c.get('rejected', 0)}, error {c.get('error', 0)}"
        )

    def update(self, summary: ShipSummary) -> None:
        if self._meter is not None:
            self._counts = summary.counts
            self._meter.update(sum(summary.counts.values()) + summary.held)

    def done(self) -> None:
        if self._meter is not None:
            self._meter.stop()
            self._meter = None


class Shipper:
    outcome_order: tuple[str, ...] = OUTCOME_ORDER

    def __init__(
        self,
        ws: Workspace,
        options: ShipOptions,
        token: str | None = None,
        *,
        echo: Callable[[str], None] = print,
        notice: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.time,
        progress_stream: TextIO | None = None,
        quiet: bool = False,
        signing_secret: str | None = None,
    ) -> None:
        self.ws = ws
        self.options = options
        self._token = token
        self._signing_secret = signing_secret
        # Everything this run prints or stores passes the masker: a server may quote
        # the Authorization header back in any text it answers.
        self.mask = Masker([token, signing_secret])
        raw_notice = notice or (lambda message: print(message, file=sys.stderr))
        self.echo: Callable[[str], None] = lambda line: echo(printable(self.mask(line)))
        self.notice: Callable[[str], None] = lambda message: raw_notice(
            printable(self.mask(message))
        )
        self.summary: ShipSummary | None = None  # the last run's, also when it raised
        self._client: IngestClient | None = None  # while a run sends
        self._aborting = False
        self._rejected: dict[str, str | None] = {}  # the first few rejections of the run
        self.sleep = sleep
        self.clock = clock
        self.stop = threading.Event()
        self.stop_reason: str | None = None
        self._batch_limit = options.batch_size
        self._progress = _Progress(
            progress_stream if progress_stream is not None else sys.stderr, quiet
        )

    # items --------------------------------------------------------------------
    def _items(self) -> Iterator[StoredItem]:
        only = sorted(set(self.options.only)) or None
        return self.ws.store.iter_items(
            complete_only=not self.options.include_incomplete, only=only
        )

    def _decided(self, index: ShipIndex) -> Iterator[tuple[StoredItem, bool, str]]:
        """The item stream with a verdict each, asking the index once per chunk."""
        chunk: list[StoredItem] = []
        wanted = set(self.options.only)

        def flush() -> Iterator[tuple[StoredItem, bool, str]]:
            latest = index.lookup_many([i.dedupe_key for i in chunk])
            for item in chunk:
                ship, why = decide(item, latest.get(item.dedupe_key), self.options.retry_rejected)
                yield item, ship, why

        for item in self._items():
            wanted.discard(item.dedupe_key)
            chunk.append(item)
            if len(chunk) >= DECIDE_CHUNK:
                yield from flush()
                chunk = []
        if chunk:
            yield from flush()
        if wanted:
            kind = "items" if self.options.include_incomplete else "complete items"
            self.notice(
                f"--only: {len(wanted)} keys are not among the workspace's {kind}: "
                + ", ".join(printable(k, keep="") for k in sorted(wanted)[:10])
                + (" ..." if len(wanted) > 10 else "")
            )

    def _to_look_at(self) -> int | None:
        """How many items this run gives a verdict (the progress line's total)."""
        if self.options.only:
            return len(set(self.options.only))
        counts = self.ws.store.item_counts()
        if self.options.include_incomplete:
            return counts["complete"] + counts["incomplete"]
        return counts["complete"]

    # dry run ------------------------------------------------------------------
    def dry_run(self) -> ShipSummary:
        started = time.monotonic()
        summary = ShipSummary(reason="dry run: nothing sent, nothing written")
        self.echo(f"endpoint {_shown_endpoint(self.options.endpoint)}")
        with self._open_index(readonly=True) as index:
            would = 0
            for item, ship, why in self._decided(index):
                # The key is the site's: on its line, a newline too would forge the next.
                key = printable(item.dedupe_key, keep="")
                if ship and self.options.max_items is not None and would >= self.options.max_items:
                    self.echo(f"stop     {key}  (--max-items {self.options.max_items})")
                    break
                if ship:
                    would += 1
                    shown_hash = printable(item.content_hash[:19], keep="")
                    self.echo(f"ship     {key}  {shown_hash}  ({why})")
                elif "held" in why:
                    summary.held += 1
                    self.echo(f"hold     {key}  ({why})")
                else:
                    summary.counts[Outcome.SKIPPED] += 1
                    self.echo(f"skip     {key}  ({why})")
        summary.elapsed = time.monotonic() - started
        self.echo(
            f"dry run: {would} would ship, {summary.counts['skipped']} skipped, "
            f"{summary.held} held for review; nothing sent, nothing written"
        )
        return summary

    # the run ------------------------------------------------------------------
    def run(self) -> ShipSummary:
        if self.options.dry_run:
            summary = self.dry_run()
        else:
            with self._run_lock():
                summary = self._run_locked()
        self._tell_incomplete()
        self._tell_held()
        return summary

    def _tell_held(self) -> None:
        """Records the crawl held back (a broken rule, a change over its limit) are not
        items and never ship: a run that shipped none of them says so, not only
        "drained" (a workspace whose every record was held shipped nothing, exit 0)."""
        if self.options.only:
            return
        held = self.ws.store.hold_counts()
        n = int(held.get("total", 0))
        if n:
            by = ", ".join(f"{k} {v}" for k, v in sorted(held.get("by_status", {}).items()))
            self.notice(
                f"{n} record{'s' if n != 1 else ''} held back by the crawl, never shipped "
                f"({by}): `framework status` counts them by rule, `framework review` "
                "decides the review_required ones"
            )

    def _tell_incomplete(self) -> None:
        """Items waiting for a required sub-tab are not shipped (nor looked at): a run
        that drained the rest says how many stay behind, not only "drained"."""
        if self.options.include_incomplete or self.options.only:
            return
        n = self.ws.store.item_counts().get("incomplete", 0)
        if n:
            self.notice(
                f"{n} incomplete item{'s' if n != 1 else ''} not shipped: waiting for a "
                "required sub-tab (`framework status` lists them; the crawl that fetches it "
                "completes them, after `framework requeue` if it failed; "
                "--include-incomplete ships them as they are)"
            )

    # what the workspace's kind decides (a folder here; PostgreSQL: framework_ship.pg_run)
    def _open_index(self, readonly: bool) -> Any:
        return ShipIndex.open(self.ws.path, self.ws.ship_log_path, readonly=readonly)

    def _run_lock(self) -> AbstractContextManager[Any]:
        return self.ws.lock("ship")

    def _open_log_and_index(self, host: str) -> tuple[Any, Any]:
        # The log first: it ends a torn last line, which the index must then read as
        # the line it became (else the index would skip past an outcome for good).
        log = ShipLog(self.ws.ship_log_path, mask=self.mask)
        index = ShipIndex.open(self.ws.path, self.ws.ship_log_path)
        log.on_written = index.on_written
        return log, index

    def _deadline(self, host: str) -> Any:
        return Deadline(self.ws.path, host, self.clock)

    def _unit_runner(self, deliverer: Deliverer) -> Callable[[list[StoredItem]], UnitResult]:
        return deliverer.deliver

    def _log_place(self) -> str:
        return str(self.ws.ship_log_path)

    def _stopped(self, summary: ShipSummary, index: Any, host: str) -> None:
        index.set_last_run({"time": utc_now(), "endpoint_host": host, **summary.as_dict()})

    def _on_signal(self, signum: int, frame: Any) -> None:
        """First SIGINT/SIGTERM: start nothing new, give what is in flight the stop grace
        to finish (then it is abandoned), log it either way, and say what the run waits
        for. Second: abort the wait at once."""
        name = signal.Signals(signum).name
        if self._aborting:
            return  # the abort is recording what it can
        if self.stop_reason is not None:
            self._aborting = True
            # Raised in the main thread wherever it waits (a socket read one by one, the
            # pool's futures otherwise): the run records the stop and exits 3.
            raise Aborted(
                f"aborted ({name} twice): the answer waited for was abandoned; that "
                "delivery goes out again next run"
            )
        self.stop_reason = f"interrupted ({name})"
        self.stop.set()
        if self._client is not None:
            self._client.stop_within(self.options.stop_grace)
        self.notice(self._waiting_notice(name))

    def _waiting_notice(self, name: str) -> str:
        waiting = self._client.waiting() if self._client is not None else []
        if not waiting:
            return (
                f"interrupted ({name}): finishing the current step, then stopping; "
                f"{name} again to abort at once"
            )
        path, so_far, items = max(waiting, key=lambda w: w[1])
        others = f" (and {len(waiting) - 1} more requests)" if len(waiting) > 1 else ""
        timeout, grace = self.options.timeout, self.options.stop_grace
        left = max(0.0, timeout - so_far)
        if left < grace:
            bound = f"its --timeout ends it within {left:.0f} s"
        else:
            bound = f"it gets {grace:g} s more (--stop-grace), then it is abandoned"
        return (
            f"interrupted ({name}): waiting for the answer to POST {path} "
            f"({items} item{'s' if items != 1 else ''}, {so_far:.0f} s so far{others}, "
            f"--timeout {timeout:g} s); {bound}; logged either way, then the run stops; "
            f"{name} again to abort at once"
        )

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _run_locked(self) -> ShipSummary:
        opts = self.options
        started = time.monotonic()
        summary = ShipSummary(order=self.outcome_order)
        self.summary = summary
        host = host_of(opts.endpoint)
        log, index = self._open_log_and_index(host)
        client = IngestClient(
            opts.endpoint,
            self._token,
            opts.fallback_path,
            opts.timeout,
            notice=self.notice,
            signing_secret=self._signing_secret,
            clock=self.clock,
        )
        self._client = client
        deliverer = Deliverer(
            client,
            log,
            opts.policy,
            self._deadline(host),
            self.stop,
            sleep=self.sleep,
            clock=self.clock,
            on_batch_limit=self._lower_batch_limit,
            mask=self.mask,
        )
        self._event(
            "ship_started",
            endpoint=_safe_endpoint(opts.endpoint),
            batch_size=opts.batch_size,
            concurrency=opts.concurrency,
            max_items=opts.max_items,
            only=len(opts.only) or None,
        )
        previous = self._install_signals()
        stop_error: FrameworkError | None = None
        crashed: BaseException | None = None
        self._progress.start(self._to_look_at())
        try:
            stop_error = self._loop(deliverer, index, summary)
        except BaseException as exc:  # recorded below, then re-raised as is
            crashed = exc
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._progress.done()
            client.close()
            log.close()
            summary.elapsed = time.monotonic() - started
            stop_error = self._finish(summary, stop_error, deliverer.last_error)
            if crashed is not None:
                summary.reason = f"failed: {type(crashed).__name__}"
                summary.exit_code = 1
            self._stopped(summary, index, host)
            index.close()
            self._event("ship_finished", **summary.as_dict())
            self.echo(summary.line())
        if stop_error is not None:
            raise stop_error
        return summary

    def _finish(
        self,
        summary: ShipSummary,
        stop_error: FrameworkError | None,
        last_error: str | None = None,
    ) -> FrameworkError | None:
        """The run's verdict: drained (None), or the error the CLI maps to 3 or 4.

        A rejection waits for a human whatever else happened, so a run that rejected
        anything exits 4 (the error-rate breaker only decides when to stop early).
        ``last_error``: the last failed attempt, said with items that failed."""
        if stop_error is None and summary.counts.get("error", 0):
            why = f" (last error: {last_error})" if last_error else ""
            stop_error = Checkpoint(
                f"{summary.counts['error']} items failed after retries{why}; they ship "
                f"again next run (every attempt is in {self._log_place()})"
            )
        rejected = summary.counts.get(Outcome.REJECTED, 0)
        if rejected:
            for key, detail in list(self._rejected.items())[:_SHOWN_REJECTIONS]:
                self.notice(
                    f"rejected {printable(key, keep='')}: "
                    f"{printable(detail or '(no detail)', keep='')}"
                )
            where = (
                f'their answers are the lines with outcome "rejected" in '
                f"{self._log_place()}; --dry-run lists them as hold; after a fix, "
                "ship them again with --retry-rejected"
            )
            if not isinstance(stop_error, Halted):
                also = f"; also: {stop_error}" if stop_error is not None else ""
                stop_error = Rejected(
                    f"{rejected} item{'s' if rejected != 1 else ''} rejected by the endpoint "
                    f"this run, waiting for review: {where}{also}"
                )
            else:
                self.notice(f"{rejected} items rejected this run: {where}")
        if stop_error is not None:
            # The CLI prints it and events.jsonl keeps it: the masked text only, and
            # nothing in it (a server's text) a terminal would obey.
            stop_error.args = (printable(self.mask(str(stop_error)), keep=""),)
            summary.reason = str(stop_error)
            summary.exit_code = stop_error.exit_code
        return stop_error

    def _lower_batch_limit(self, size: int) -> None:
        self._batch_limit = max(1, min(self._batch_limit, size))

    def _loop(
        self, deliverer: Deliverer, index: ShipIndex, summary: ShipSummary
    ) -> FrameworkError | None:
        opts = self.options
        window: deque[bool] = deque(maxlen=opts.error_window)
        in_flight: dict[_Pending, list[StoredItem]] = {}
        in_flight_keys: set[str] = set()
        stop_error: FrameworkError | None = None
        unit: list[StoredItem] = []
        unit_keys: set[str] = set()
        shipped = 0

        def collect(block: bool) -> None:
            nonlocal stop_error
            if not in_flight:
                return
            done: Iterable[_Pending]
            if inline:
                done = list(in_flight)  # ran in this thread: all finished
            else:
                done, _ = wait(
                    list(in_flight),  # type: ignore[arg-type]  # futures of the pool
                    timeout=None if block else 0,
                    return_when=FIRST_COMPLETED,
                )
            for future in done:
                items = in_flight.pop(future)
                for item in items:
                    in_flight_keys.discard(item.dedupe_key)
                result = future.result()
                for key, detail in result.rejected.items():
                    if len(self._rejected) < _SHOWN_REJECTIONS:
                        self._rejected[key] = detail
                for item in items:
                    outcome = result.final.get(item.dedupe_key)
                    if outcome is None:
                        continue  # never finished (stopped): no verdict this run
                    summary.counts[outcome] += 1
                    window.append(outcome in (Outcome.ERROR, Outcome.REJECTED))
                if result.stop is not None and _rank(result.stop) > _rank(stop_error):
                    stop_error = result.stop
                    self.stop.set()
                if stop_error is None and len(window) >= opts.error_window:
                    bad = sum(window) / len(window)
                    if bad > opts.max_error_rate:
                        stop_error = Halted(
                            f"error/rejection rate {bad:.0%} over the last {len(window)} "
                            f"items exceeds --max-error-rate {opts.max_error_rate:.0%}"
                        )
                        self.stop.set()
            self._progress.update(summary)

        run_unit = self._unit_runner(deliverer)
        pool: _Workers | _Inline
        inline = opts.concurrency == 1 and opts.batch_size == 1
        pool = _Inline() if inline else _Workers(opts.concurrency)
        try:
            with pool:

                def submit(batch: list[StoredItem]) -> None:
                    in_flight[pool.submit(run_unit, batch)] = batch
                    in_flight_keys.update(i.dedupe_key for i in batch)

                for item, ship, why in self._decided(index):
                    self._progress.update(summary)
                    if self.stop.is_set():
                        break
                    if not ship:
                        if "held" in why:
                            summary.held += 1
                        else:
                            summary.counts[Outcome.SKIPPED] += 1
                        continue
                    if opts.max_items is not None and shipped >= opts.max_items:
                        stop_error = Checkpoint(
                            f"--max-items {opts.max_items} reached; more items wait to ship"
                        )
                        break
                    if item.dedupe_key in unit_keys:
                        continue  # the store yields a key once; never ship a key twice at once
                    while item.dedupe_key in in_flight_keys:
                        collect(block=True)
                    unit.append(item)
                    unit_keys.add(item.dedupe_key)
                    shipped += 1
                    if len(unit) >= self._batch_limit:
                        submit(unit)
                        unit, unit_keys = [], set()
                        # Bounded: at most two units per worker are queued or running.
                        while len(in_flight) >= 2 * opts.concurrency:
                            collect(block=True)
                        collect(block=False)
                if unit and not self.stop.is_set():
                    submit(unit)
                while in_flight:
                    collect(block=True)
        except Aborted as exc:
            # A second Ctrl-C while the main thread waited: the pool is left behind (its
            # daemon threads may still wait on a hung socket; they end with the process).
            stop_error = exc
        if self.stop_reason is not None and (
            stop_error is None or isinstance(stop_error, Interrupted)
        ):
            stop_error = Interrupted(self.stop_reason)  # say which signal
        return stop_error

    def _event(self, name: str, **data: Any) -> None:
        self._append_event(
            {
                "time": utc_now(),
                "event": name,
                **{
                    k: (self.mask(v) if isinstance(v, str) else v)
                    for k, v in data.items()
                    if v is not None
                },
            }
        )

    def _append_event(self, record: dict[str, Any]) -> None:
        self.ws.events.append(record)


class _Workers:
    """``n`` daemon threads running units, for what a ThreadPoolExecutor would do here.

    Daemon threads, because an aborted run (a second Ctrl-C) must not wait for a hung
    request's ``--timeout`` to end: an executor's workers are joined at exit. Normal
    ends join them; queued units that start after a stop find it set and send nothing."""

    def __init__(self, n: int) -> None:
        self._queue: queue.SimpleQueue[
            tuple[Future[UnitResult], Callable[[list[StoredItem]], UnitResult], list[StoredItem]]
            | None
        ] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"ship-{i}", daemon=True) for i in range(n)
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, fn: Callable[[list[StoredItem]], UnitResult], unit: list[StoredItem]
    ) -> Future[UnitResult]:
        future: Future[UnitResult] = Future()
        self._queue.put((future, fn, unit))
        return future

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            future, fn, unit = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(unit))
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        for _ in self._threads:
            self._queue.put(None)
        if exc_type is None:
            for thread in self._threads:
                thread.join()


class _Completed:
    """The finished unit of an inline run: what a Future says, without its lock and
    condition (one per item one by one)."""

    __slots__ = ("_exception", "_result")

    def __init__(self, result: UnitResult | None, exception: BaseException | None) -> None:
        self._result = result
        self._exception = exception

    def result(self) -> UnitResult:
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result


_Pending = Future[UnitResult] | _Completed


class _Inline:
    """Runs each unit in the calling thread. One by one at concurrency 1, a thread
    handoff (and a GIL hand-over) per item costs more than the overlap it buys."""

    def submit(
        self, fn: Callable[[list[StoredItem]], UnitResult], unit: list[StoredItem]
    ) -> _Completed:
        try:
            return _Completed(fn(unit), None)
        except BaseException as exc:  # handed to the caller, as a pool's future would
            return _Completed(None, exc)

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _rank(error: FrameworkError | None) -> int:
    """Which stop reason the run reports when several units stop at once: a halt over
    a checkpoint, and the cause over the "interrupted" of the units it stopped."""
    if error is None:
        return 0
    if isinstance(error, Halted):
        return 3
    if isinstance(error, Interrupted):
        return 1
    return 2


def _shown_endpoint(endpoint: str) -> str:
    """Where a run would send, as a dry run names it: the items URL, no credentials."""
    if not endpoint:
        return (
            "(none: a real run needs --endpoint, ship.endpoint in the job spec or "
            "$FRAMEWORK_SHIP_ENDPOINT)"
        )
    try:
        return items_url(endpoint)
    except ValueError:
        return _safe_endpoint(endpoint)


def _safe_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"
