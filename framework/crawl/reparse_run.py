"""The reparse's run: its events, its passes over the stored pages in row order (a
pass more for rows whose carried values a page changed), and its summary.

The parse side is framework/crawl/reparse.py (:class:`_Parser`, which these passes feed),
the writing side framework/crawl/reparse_write.py.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import progress
from framework.crawl import completeness
from framework.crawl.fingerprint import kind_sections
from framework.crawl.reparse_write import Page, Writer
from framework.crawl.report import nothing_extracted
from framework.errors import Checkpoint
from framework.workspace import ErrorKind, RowStatus, Workspace
from framework.workspace.fill import EXTRACTION_EVENTS, last_extraction
from framework.workspace.jsonl import redact_url
from framework.workspace.records import Row

if TYPE_CHECKING:
    from framework.crawl.reparse import _Parser
    from framework.crawl.runtime import CrawlRuntime

logger = logging.getLogger("framework.crawl.reparse")  # the reparse's one voice

# Errors that a different spec may turn into a success; the others are about the
# download (and such rows have no stored body anyway).
READ_AGAIN = frozenset({ErrorKind.PARSE, ErrorKind.VALIDATION})
# the digest marking a kind whose rows may have carried values this run has not read yet
CARRY_PENDING = "carry-pending"


@dataclass(frozen=True)
class ReparseResult:
    job: str
    workspace: Path
    counts: dict[str, Any]
    warnings: list[dict[str, Any]]
    nothing_extracted: bool
    processes: int = 1
    unchanged_kinds: tuple[str, ...] = ()  # kinds whose pages were left unread
    # kinds read field by field, and their fields whose spec changed
    narrow: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # kinds whose spec changed read whole all the same (not by --all), and why
    whole: dict[str, str] = field(default_factory=dict)
    # per kind and field, the values this run read that failed their type
    type_failed: list[dict[str, Any]] = field(default_factory=list)


def _carried(ws: Workspace, kinds: frozenset[str]) -> dict[str, Any]:
    """The last run's fill counts and warnings of ``kinds`` (pages this run leaves
    unread, which would give them again): ``framework status`` reads the last run's as
    the job's, so a reparse of one kind does not blank the others'."""
    if not kinds:
        return {"fill": {}, "warnings": [], "type_failed": []}
    # from the log's end: what was written since the last finished run, not the whole log
    event = ws.events.last(EXTRACTION_EVENTS)
    last = last_extraction(event or {})
    return {
        "fill": {k: v for k, v in last["fill"].items() if k in kinds},
        "warnings": [w for w in last["warnings"] if w.get("kind") in kinds],
        "type_failed": [f for f in last["type_failed"] if f["kind"] in kinds],
    }


def run(
    runtime: CrawlRuntime,
    ws: Workspace,
    spec_hash: str,
    parser: _Parser,
    progress_mode: str | None,
    every: float,
    digests: dict[str, str],
    unchanged: frozenset[str] = frozenset(),
    read_whole: Mapping[str, str] | None = None,
) -> ReparseResult:
    spec = runtime.spec
    why_whole = dict(read_whole or {})
    stored, size = ws.store.responses_size()
    previous = ws.spec_hash()
    runtime.event(
        "reparse_started",
        spec_hash=spec_hash,
        previous=previous,
        stored=stored,
        processes=parser.n,
        unchanged_kinds=sorted(unchanged),
        # kinds read field by field: the fields whose spec changed
        **(
            {"narrow": {k: list(n.changed) for k, n in parser.narrow.items()}}
            if parser.narrow
            else {}
        ),
        # kinds whose spec changed that are read whole all the same, and why
        **({"whole": why_whole} if why_whole else {}),
    )
    logger.info(
        "reparse %s: %d stored pages (%.1f MB), %d process%s",
        spec.name,
        stored,
        size / 2**20,
        parser.n,
        "es" if parser.n > 1 else "",
    )
    carried = _carried(ws, unchanged)  # before this run's events: the last run's
    ws.record_spec(spec_hash)
    # before any commit: a kill leaves both digests, read again
    ws.mark_read_with(digests, kind_sections(runtime.job))
    if unchanged:
        # A page read below may give rows of these kinds new carried values (carry.py),
        # which they are read again with later in this run: a kill in between must leave
        # those kinds to the next reparse, which would otherwise find the values already
        # refreshed and skip the rows. The end of the run forgets the mark.
        ws.mark_read_with({kind: CARRY_PENDING for kind in unchanged})
    started = time.monotonic()
    tally = {"pages": 0, "skipped": 0, "unknown": 0, "unchanged": 0, "narrow": 0}
    writer = Writer(runtime)
    meter = progress.Meter(
        f"reparse {spec.name}",
        stored,
        "pages",
        progress_mode,
        every=every,
        detail=lambda: _progress_detail(runtime),
    )
    # chunks in flight, oldest first: [pages, their items, the parse, advance]
    in_flight: deque[list[Any]] = deque()
    workers_cpu = [0.0]
    chunks = {"writer": 0, "workers": 0}  # where the chunks were parsed
    cpu = time.process_time()

    def finish_one() -> None:
        pages, _, pending, advance = in_flight.popleft()
        try:
            results, narrowed, cpu = pending.result()
        except BrokenProcessPool:
            raise Checkpoint(
                "a parse worker ended unexpectedly (killed? out of memory?): the pages "
                "committed so far stay; run `framework reparse` again (--processes 1 "
                "parses in one process)"
            ) from None
        workers_cpu[0] += cpu
        chunks["writer" if parser.parsed_here(pending) else "workers"] += 1
        for (row, body), parsed, narrow in zip(pages, results, narrowed, strict=True):
            if writer.page(row, body, parsed) and narrow:
                tally["narrow"] += 1
            advance()

    def take_back(reserve: int) -> bool:
        """Parse here the newest chunk no worker has started, if more than ``reserve``
        wait to be started (those keep the workers fed); whether one was."""
        waiting = [e for e in in_flight if parser.waiting(e[2])]
        if len(waiting) <= reserve or not parser.take_back(waiting[-1][2]):
            return False
        waiting[-1][2] = parser.here(waiting[-1][0], waiting[-1][1])
        return True

    def settle(most: int, reserve: int) -> None:
        """Take results until at most ``most`` chunks are in flight; rather than wait
        for a worker's, parse a chunk here."""
        while len(in_flight) > most:
            if parser.idle(in_flight[0][2]) and take_back(reserve):
                continue
            finish_one()

    def run_pass(chunks: Iterator[list[Page]], advance: Callable[[], None]) -> None:
        for chunk in chunks:
            items = parser.items(ws, chunk)
            in_flight.append([chunk, items, parser.submit(chunk, items), advance])
            settle(parser.in_flight_max, reserve=1)
        settle(0, reserve=0)  # the last ones: whoever is free parses them
        writer.flush()
        tally["pages"] -= len(writer.stale)  # parsed, dropped: read again below

    read_late: set[str] = set()  # unchanged kinds read because values carried into them changed
    with meter:
        run_pass(_chunks(ws, runtime, parser, tally, meter.advance, unchanged), meter.advance)
        # Rows whose carried values a page read above changed (framework/workspace/
        # carry.py): read again with them, pass after pass (a page read again may change
        # its own rows' values), as a fresh crawl would give them. An unchanged kind with
        # such rows is read whole, so that its fill counts are this run's. Each pass
        # commits at least its lowest row (whose parent is final), so the passes end.
        rows_of: dict[str, list[int]] = {}  # an unchanged kind's row ids, read once
        while again := writer.next_pass():
            ids, whole = set(again), set()
            for kind in sorted(unchanged - read_late):
                if kind not in rows_of:
                    rows_of[kind] = [r.id for r in ws.store.iter_rows(kind=kind)]
                if ids.intersection(rows_of[kind]):
                    read_late.add(kind)
                    tally["unchanged"] -= ws.store.responses_of([kind])  # counted anew
                    whole.update(rows_of.pop(kind))
            run_pass(_again(ws, runtime, parser, sorted(ids | whole), tally, whole), lambda: None)
    ws.settle_read_with(digests)  # every stored page of every kind now read with these
    unlinked = writer.unlinked(ws)
    pages, skipped, unknown = tally["pages"], tally["skipped"], tally["unknown"]
    items = ws.store.item_counts()
    emitting = [n for n, k in runtime.job.kinds.items() if k.spec.emits]
    runtime.findings.finish(emitting)
    # every list against its declared total, from the pages as read now (completeness.py)
    lists = completeness.check(runtime.job, ws.store, runtime.findings, logger)
    # rows still to fetch (links this reparse found, or left from before) may hold the
    # items: an empty workspace is no verdict yet, the next step is the crawl
    pending = sum(n.get(RowStatus.PENDING, 0) for n in ws.store.row_counts().values())
    empty = nothing_extracted(items, spec.expect_empty) and not pending
    c = runtime.counters
    counts: dict[str, Any] = {
        "pages": pages,
        "ok": c.ok,
        "errors": c.errors,
        "errors_by_kind": c.by_error,
        "newly_failed": writer.newly_failed,
        "damaged": writer.damaged,
        "skipped": skipped,
        "unchanged_kind": tally["unchanged"],
        # pages read field by field (framework/crawl/narrow.py); the others whole
        "narrow": tally["narrow"],
        # rows given new carried values by a page read again (list fields carried into
        # detail records): those with a stored page were read again with them
        "carry_refreshed": len(writer.refreshed_ever),
        # rows the pages read no longer link (a narrowed follow rule): kept, reported
        "rows_unlinked": unlinked["rows"],
        "unknown_kind": unknown,
        "rows_new": c.rows_new,
        "rows_pending": pending,  # in the workspace at the end: what `crawl` fetches next
        "items_new": c.items_new,
        "items_changed": c.items_changed,
        "items_unchanged": c.items_unchanged,
        "items_completed": c.items_completed,
        "records_invalid": c.records_invalid,
        # values that failed their type (Findings.type_failures): what became a null
        # or dropped its record, beside the pages that failed
        "type_failed": runtime.findings.type_failed_count(),
        # records this run held back (framework/workspace/holds.py), as a crawl counts
        "items_invalid": c.items_invalid,
        "items_review": c.items_review,
        "fallbacks": c.fallbacks,
    }
    warnings = runtime.findings.warnings()
    fill = runtime.findings.fill()
    # kinds read after all (values carried into them changed) have this run's figures
    carried = {
        "fill": {k: v for k, v in carried["fill"].items() if k not in read_late},
        # totals were compared again over the whole workspace: a carried one is stale
        "warnings": [
            w
            for w in carried["warnings"]
            if w.get("kind") not in read_late and w.get("what") != "total_mismatch"
        ],
        "type_failed": [f for f in carried["type_failed"] if f["kind"] not in read_late],
    }
    # the result is printed, not logged: masked here as the events and the log are
    type_failed = runtime.secrets.mask_value(runtime.findings.type_failed())
    for kind, entry in carried["fill"].items():
        fill.setdefault(kind, entry)
    runtime.event(
        "reparse_finished",
        duration_s=round(time.monotonic() - started, 3),
        processes=parser.n,
        # CPU seconds of this process (reading, judging, committing) and of the parse
        # workers: what a busy machine's wall time does not show
        cpu_s={
            "writer": round(time.process_time() - cpu, 3),
            "workers": round(workers_cpu[0], 3),
        },
        chunks=chunks,  # of CHUNK_PAGES pages: how many each side parsed
        counts=counts,
        items=items,
        warnings=warnings + carried["warnings"],
        fill=fill,
        type_failed=type_failed + carried["type_failed"],
        **({"carried": sorted(carried["fill"])} if carried["fill"] else {}),
        **({"unlinked": unlinked} if unlinked["rows"] else {}),
        **({"completeness": lists.as_dict()} if lists.lists else {}),
        **({"nothing_extracted": True} if empty else {}),
    )
    if unknown:
        logger.warning(
            "%d stored pages are of kinds the spec no longer has: left as they were", unknown
        )
    if unlinked["rows"]:
        logger.warning(
            "%d rows found by pages read again are no longer linked by them (%s; e.g. %s):"
            " they and their items stay; pending ones are still fetched by the next crawl",
            unlinked["rows"],
            ", ".join(f"{n} {s}" for s, n in sorted(unlinked["by_status"].items())),
            redact_url(unlinked["examples"][0]),
        )
    return ReparseResult(
        spec.name,
        ws.path,
        counts,
        warnings,
        empty,
        parser.n,
        tuple(sorted(unchanged)),
        {k: n.changed for k, n in parser.narrow.items()},
        why_whole,
        type_failed,
    )


def _chunks(
    ws: Workspace,
    runtime: CrawlRuntime,
    parser: _Parser,
    tally: dict[str, int],
    passed: Callable[[int], None],
    unchanged: frozenset[str] = frozenset(),
) -> Iterator[list[Page]]:
    """The stored pages to read again, in row order, ``CHUNK_PAGES`` at a time; the
    others are counted (and ``passed``) here; those of ``unchanged`` kinds (read with
    this very spec: they would give the same) without reading them. A page such a kind
    failed stays failed too: the fill counts and warnings the last run gave the kind are
    kept whole (:func:`_carried`), and `--all` reads it."""
    job = runtime.job
    tally["unchanged"] = ws.store.responses_of(unchanged)
    passed(tally["unchanged"])

    def read() -> Iterator[Page]:
        for row, body in ws.store.iter_responses(skip_kinds=unchanged):
            if not _read_again(row):
                tally["skipped"] += 1
                passed(1)
            elif row.kind not in job.kinds and row.kind not in job.subtabs:
                tally["unknown"] += 1  # a kind the spec no longer has: nothing reads it
                passed(1)
            else:
                yield row, body

    return parser.chunks(read(), tally)


def _again(
    ws: Workspace,
    runtime: CrawlRuntime,
    parser: _Parser,
    ids: list[int],
    tally: dict[str, int],
    whole: set[int],
) -> Iterator[list[Page]]:
    """The stored pages of rows ``ids`` to read again, with their rows as the store has
    them now (their refreshed context), ``CHUNK_PAGES`` at a time. The rows of ``whole``
    (kinds first left unread) that are not read are counted as skipped here; the others
    were counted when the first pass passed them over."""
    job = runtime.job

    def read() -> Iterator[Page]:
        for row, body in ws.store.responses_for(ids):
            if _read_again(row) and (row.kind in job.kinds or row.kind in job.subtabs):
                yield row, body
            elif row.id in whole:
                tally["skipped"] += 1

    return parser.chunks(read(), tally)


def _progress_detail(runtime: CrawlRuntime) -> str:
    c = runtime.counters
    return (
        f"items {c.items_new} new, {c.items_changed} changed, {c.items_unchanged} unchanged"
        f" | {c.errors} failed"
    )


def _read_again(row: Row) -> bool:
    if row.status is RowStatus.OK:
        return True
    return row.status is RowStatus.ERROR and row.last_error_kind in READ_AGAIN
