"""The ship run: which items go out, in what units, and when the run stops.

Owns one run of ``framework ship``: take the workspace's ship lock, stream its items in
dedupe-key order (bounded memory: the store pages them, the side index answers "already
delivered?" per key, :mod:`~framework_ship.decide` gives the verdict: ship / skip /
hold), group items into units of ``batch_size``, hand units to a pool of
``concurrency`` deliverers (:mod:`~framework_ship.pool`; what comes back is counted by
:mod:`~framework_ship.flight`, which also trips the error-rate breaker and never lets
two deliveries of one key be in flight), honour ``--max-items`` and SIGINT/SIGTERM
(:mod:`~framework_ship.interrupt`), append ``ship_started``/``ship_finished`` to
``events.jsonl`` and print a summary (:mod:`~framework_ship.summary`); a run that
rejected anything ends in :class:`Rejected` (exit 4). Everything it prints or stores
passes one :class:`~framework_ship.mask.Masker`, and everything it prints passes
:func:`framework.terminal.printable` (keys and a server's texts are not ours: no
control character of theirs reaches the terminal). The verdict of the run is its
return (drained) or a raised :class:`Checkpoint` / :class:`Halted`; it never calls
``sys.exit``. HTTP, retries and the log format belong to :mod:`client`, :mod:`deliver`,
:mod:`shiplog`; the run's options to :mod:`~framework_ship.options`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TextIO

from framework.errors import Checkpoint, FrameworkError, Halted
from framework.terminal import printable
from framework.workspace import StoredItem, Workspace, utc_now
from framework_ship.classify import Outcome
from framework_ship.client import IngestClient
from framework_ship.deadline import Deadline, host_of
from framework_ship.decide import DECIDE_CHUNK, chunked, decide
from framework_ship.deliver import Aborted, Deliverer, Interrupted, UnitResult
from framework_ship.endpoint import safe_endpoint, shown_endpoint
from framework_ship.flight import SHOWN_REJECTIONS, InFlight
from framework_ship.index import ShipIndex, refuse_index_links
from framework_ship.interrupt import StopSignals
from framework_ship.mask import Masker
from framework_ship.options import DEFAULT_BATCH_SIZE, STOP_GRACE_S, ShipOptions
from framework_ship.pool import make_pool
from framework_ship.shiplog import ShipLog
from framework_ship.summary import OUTCOME_ORDER, RunProgress, ShipSummary


class Rejected(Halted):
    """The endpoint refused items (400/413/422): they wait for a human (exit 4)."""


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
        self._rejected: dict[str, str | None] = {}  # the first few rejections of the run
        self.sleep = sleep
        self.clock = clock
        self.stop = threading.Event()
        self.signals = StopSignals(self.stop, self.notice, options.timeout, options.stop_grace)
        self._batch_limit = options.batch_size
        self._progress = RunProgress(
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
        wanted = set(self.options.only)
        retry = self.options.retry_rejected
        for chunk in chunked(self._items_noting(wanted), DECIDE_CHUNK):
            latest = index.lookup_many([i.dedupe_key for i in chunk])
            for item in chunk:
                yield item, *decide(item, latest.get(item.dedupe_key), retry)
        self._tell_unknown(wanted)

    def _items_noting(self, wanted: set[str]) -> Iterator[StoredItem]:
        """The items, each key struck from ``wanted`` as it comes (what stays in it
        is an ``--only`` key the workspace does not have)."""
        for item in self._items():
            wanted.discard(item.dedupe_key)
            yield item

    def _tell_unknown(self, wanted: set[str]) -> None:
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
        self.echo(f"endpoint {shown_endpoint(self.options.endpoint)}")
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
        # A symlinked index is refused before the log is even created (one line, and
        # nothing written); SQLite would write through it.
        refuse_index_links(self.ws.path)
        # The log first: it ends a torn last line, which the index must then read as
        # the line it became (else the index would skip past an outcome for good).
        log = ShipLog(self.ws.ship_log_path, mask=self.mask)
        try:
            index = ShipIndex.open(self.ws.path, self.ws.ship_log_path)
        except BaseException:
            log.close()
            raise
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
        self.signals.client = client
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
            endpoint=safe_endpoint(opts.endpoint),
            batch_size=opts.batch_size,
            concurrency=opts.concurrency,
            max_items=opts.max_items,
            only=len(opts.only) or None,
        )
        previous = self.signals.install()
        stop_error: FrameworkError | None = None
        crashed: BaseException | None = None
        self._progress.start(self._to_look_at())
        try:
            stop_error = self._loop(deliverer, index, summary)
        except BaseException as exc:  # recorded below, then re-raised as is
            crashed = exc
            raise
        finally:
            self.signals.restore(previous)
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
        if stop_error is None:
            stop_error = self._held_up(summary)
        if stop_error is None and summary.counts.get("error", 0):
            why = f" (last error: {last_error})" if last_error else ""
            stop_error = Checkpoint(
                f"{summary.counts['error']} items failed after retries{why}; they ship "
                f"again next run (every attempt is in {self._log_place()})"
            )
        rejected = summary.counts.get(Outcome.REJECTED, 0)
        if rejected:
            for key, detail in list(self._rejected.items())[:SHOWN_REJECTIONS]:
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

    def _held_up(self, summary: ShipSummary) -> FrameworkError | None:
        """What else makes a run that stopped for no other reason a checkpoint (a
        workspace kind's own outcomes: PgShipper's fenced deliveries)."""
        return None

    def _lower_batch_limit(self, size: int) -> None:
        self._batch_limit = max(1, min(self._batch_limit, size))

    def _loop(
        self, deliverer: Deliverer, index: ShipIndex, summary: ShipSummary
    ) -> FrameworkError | None:
        opts = self.options
        unit: list[StoredItem] = []
        unit_keys: set[str] = set()
        shipped = 0
        pool = make_pool(opts.concurrency, opts.batch_size)
        flight = InFlight(
            pool,
            self._unit_runner(deliverer),
            summary,
            error_window=opts.error_window,
            max_error_rate=opts.max_error_rate,
            stop=self.stop,
            rejected=self._rejected,
            on_collect=self._progress.update,
        )
        try:
            with pool:
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
                        flight.stop_error = Checkpoint(
                            f"--max-items {opts.max_items} reached; more items wait to ship"
                        )
                        break
                    if item.dedupe_key in unit_keys:
                        continue  # the store yields a key once; never ship a key twice at once
                    while item.dedupe_key in flight:
                        flight.collect(block=True)
                    unit.append(item)
                    unit_keys.add(item.dedupe_key)
                    shipped += 1
                    if len(unit) >= self._batch_limit:
                        flight.submit(unit)
                        unit, unit_keys = [], set()
                        # Bounded: at most two units per worker are queued or running.
                        while len(flight) >= 2 * opts.concurrency:
                            flight.collect(block=True)
                        flight.collect(block=False)
                if unit and not self.stop.is_set():
                    flight.submit(unit)
                flight.drain()
        except Aborted as exc:
            # A second Ctrl-C while the main thread waited: the pool is left behind (its
            # daemon threads may still wait on a hung socket; they end with the process).
            flight.stop_error = exc
        stop_error = flight.stop_error
        reason = self.signals.reason
        if reason is not None and (stop_error is None or isinstance(stop_error, Interrupted)):
            stop_error = Interrupted(reason)  # say which signal
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


__all__ = [
    "DECIDE_CHUNK",
    "DEFAULT_BATCH_SIZE",
    "OUTCOME_ORDER",
    "STOP_GRACE_S",
    "Rejected",
    "ShipOptions",
    "ShipSummary",
    "Shipper",
    "decide",
]
