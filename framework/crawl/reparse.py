"""Re-extraction of the stored pages with the current spec: no request is made.

The crawl keeps each page's body in the workspace (the ``responses`` table, see
``docs/workspace.md``). :func:`reparse` turns every stored body back into the Scrapy
response the spider saw (same class, URL, status and content type, so the same
encoding) and reads it by the crawl's own path (framework/crawl/outcome.py), then
commits it with the reparse's writer (framework/crawl/reparse_write.py). So items are updated in
place (changed content gets a new content hash and ships again, unchanged content is
not touched), follow links and sub-tab requests the new spec finds become pending rows
for the next crawl, and a page the new spec cannot read becomes an error row, exactly
as if it had been fetched now.

Pages are read in row order, so a detail page is read before its sub-tabs (whose parts
are merged into its item). Only rows that are ok, or failed to be read (parse or
validation errors), are read again: pending rows will be fetched anyway, and a page
that failed to download has no body. The run is recorded as ``reparse_started`` /
``reparse_finished`` events with the same counts, warnings and fill counts a crawl
records, and the spec's hash is recorded, so the next crawl does not announce the
change again. It takes the workspace's crawl lock: no crawl runs meanwhile.

Speed, with the same result as reading the pages one by one:

* A kind whose section of the spec changed only in some fields' specs is read field by
  field: its pages' other fields are taken from their stored items
  (:mod:`framework.crawl.narrow` says when that gives the same).

* Commits are grouped: the outcomes of up to ``BATCH_PAGES`` pages (or ``BATCH_S``
  seconds of them) go in one transaction, in row order. A kill loses at most the
  group in hand: those rows keep what they had, no event speaks of them, and the next
  reparse reads them again. A kind with change limits (``max_change``, ``frozen``)
  compares a record with the stored item, so the group in hand is committed before
  such a page is judged: it sees everything read before it, as one by one.
* The parse (the page's tree, fields, links: most of the work) runs in worker
  processes (``processes``); the one process that writes turns their results into
  outcomes and commits them in row order. The parse reads nothing but the page, its
  row's context and the spec, so where it runs changes nothing. The workers are
  forked before the workspace is opened for writing (they inherit the compiled spec,
  and no SQLite connection or thread).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from scrapy.http import Headers, Response, TextResponse
from scrapy.responsetypes import responsetypes
from w3lib.encoding import http_content_type_encoding, read_bom

from framework import progress
from framework.crawl.cores import CoreSample, idle_cores
from framework.crawl.fingerprint import kind_fingerprints
from framework.crawl.limits import Limits
from framework.crawl.narrow import FAILED_EVENTS, Narrowing, StoredItemData, failed_fields, narrowed
from framework.crawl.narrow import Plan as NarrowPlan
from framework.crawl.narrow import plan as narrow_plan
from framework.crawl.outcome import OutcomeBuilder
from framework.crawl.page import CompiledJob, FieldsOf, PageResult
from framework.crawl.reparse_run import CARRY_PENDING, READ_AGAIN, ReparseResult
from framework.crawl.reparse_run import run as _run
from framework.crawl.reparse_write import BATCH_PAGES, BATCH_S, Items, Page, Parsed, Writer
from framework.crawl.runtime import CrawlRuntime
from framework.errors import StoredPageDamaged, UsageError, WorkspaceError
from framework.extract.patterns import Limits as ExtractLimits
from framework.heap import FrozenHeap
from framework.settings import default_settings
from framework.spec import load_spec
from framework.spec.models import JobSpec
from framework.workspace import ErrorKind, RowStatus, Workspace
from framework.workspace.integrity import ensure_whole
from framework.workspace.records import Outcome, Row, StoredResponse
from framework.workspace.workspace import STATE_FILE

logger = logging.getLogger(__name__)


CHUNK_PAGES = 64  # pages per task handed to a worker (amortises the pipe)
AUTO_MIN_PAGES = 1000  # `auto` below this many stored pages: no workers (not worth a fork)


def rebuild(stored: StoredResponse) -> Response:
    """The Scrapy response a stored page was: the class the downloader would pick for
    its content type and body (HtmlResponse, TextResponse, XmlResponse, JSON...). Its
    tree is built by the parse, as in the crawl (the document URL only for a kind with
    forms: :func:`framework.extract.tree.html_selector`)."""
    content_type = {"Content-Type": stored.content_type} if stored.content_type else {}
    body = stored.body
    cls = _by_type(stored.content_type)
    if cls is Response:  # the content type does not say: the URL, then the body decide
        cls = responsetypes.from_args(
            headers=Headers(content_type), url=stored.final_url, body=body
        )
    # no Request: extraction reads only the response (building one costs a URL
    # normalisation per page, a tenth of the reparse); the response makes its own
    # Headers of the dict
    if issubclass(cls, TextResponse):
        # the encoding Scrapy would declare (its BOM, else its header's charset), found
        # once: TextResponse finds it again at every `.encoding` (twice a page)
        encoding = read_bom(body)[0] or _header_encoding(stored.content_type)
        if encoding is not None:
            return cls(
                url=stored.final_url,
                status=stored.status,
                headers=content_type,
                body=body,
                encoding=encoding,
            )
    return cls(url=stored.final_url, status=stored.status, headers=content_type, body=body)


@functools.lru_cache(maxsize=64)
def _header_encoding(content_type: str | None) -> str | None:
    """What ``TextResponse._headers_encoding`` finds in this Content-Type, once (it
    reads the header as Scrapy's Headers keep it: UTF-8 bytes, read as Latin-1)."""
    return http_content_type_encoding((content_type or "").encode().decode("latin-1"))


@functools.lru_cache(maxsize=64)
def _by_type(content_type: str | None) -> type[Response]:
    """The class a content type alone picks (what ``from_args`` tries first), once per
    content type: a few per job, so the header is not parsed again on every page."""
    if not content_type:
        return Response
    return responsetypes.from_headers(Headers({"Content-Type": content_type}))


def _extract_limits(settings: dict[str, Any]) -> ExtractLimits:
    """The extraction limits the spider would use (its settings, the spec's own)."""
    try:
        return ExtractLimits(
            timeout=float(settings["FRAMEWORK_EXTRACT_TIMEOUT"]),
            max_matches=int(settings["FRAMEWORK_MAX_MATCHES"]),
            max_chars=int(settings["FRAMEWORK_MAX_MATCH_CHARS"]),
            max_item_bytes=int(settings["FRAMEWORK_MAX_ITEM_BYTES"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"extraction limits: {exc}") from None


def processes_for(wanted: int | str, pages: int, since: CoreSample | None = None) -> int:
    """Worker processes for ``pages`` stored pages: ``wanted``, or for ``auto`` one per
    idle core (none below ``AUTO_MIN_PAGES`` pages), measured from ``since`` (see
    :func:`idle_cores`). 1: no workers, the parse runs in the writing process. Workers
    cost about a quarter more CPU in all (the pages and results cross a pipe): on a
    busy machine they buy no time, so ``auto`` does not start them."""
    if wanted == "auto":
        if pages < AUTO_MIN_PAGES:
            return 1
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        n = min(cores, round(idle_cores(cores, since=since)))
        return n if n > 1 else 1
    n = int(wanted)
    if n < 1:
        raise UsageError(f"--processes: {wanted} is not 1 or more (or auto)")
    return n


def reparse(
    spec_path: Path,
    workspace: Path | str,
    progress_mode: str | None = None,
    processes: int | str = 1,
    every_kind: bool = False,
    since: CoreSample | None = None,
    spec: JobSpec | None = None,
) -> ReparseResult:
    """Read the stored pages of the job's workspace again with the spec at
    ``spec_path``; commit what it gives. Blocks until done; no network.
    ``progress_mode``: see :func:`framework.progress.mode` (None: no progress);
    ``processes``: a number or ``auto`` (see :func:`processes_for`); ``every_kind``:
    read the pages of kinds whose digest did not change too (see :func:`_unchanged`);
    ``since``: a sample of the cores taken when the command started (for ``auto``: the
    window it measures, framework/crawl/cores.py), else one is taken now; ``spec``: the
    spec already loaded from ``spec_path`` (the command has it: not read twice)."""
    sample = since or CoreSample()  # for `auto`: the start-up is the measuring window
    spec = spec if spec is not None else load_spec(spec_path)
    # a database URL (str) is checked by its read-only open below
    if isinstance(workspace, Path) and not (workspace / STATE_FILE).is_file():
        raise WorkspaceError(
            f"no workspace at {workspace}: run `framework crawl {spec.name}` first"
        )
    job, settings = _compile(spec)
    spec_hash = "sha256:" + hashlib.sha256(spec_path.read_bytes()).hexdigest()
    digests = kind_fingerprints(job)
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        ensure_whole(ws, deep=False)  # never build on a workspace that lost commits
        n = processes_for(processes, ws.store.responses_size()[0], sample)
        # the kinds read field by field (framework/crawl/narrow.py); --all: none
        narrow = (
            NarrowPlan()
            if every_kind
            else narrow_plan(
                job,
                digests,
                ws.read_with(),
                ws.read_section,
                int(ws.store.hold_counts()["total"]),
                failed_fields(ws.events.newest_first(FAILED_EVENTS)),
            )
        )
    # what start-up built lives as long as the run, and the workers forked next inherit
    # it: the collector stops walking it (framework/heap.py)
    with ExitStack() as stack:  # closed in reverse: the workspace, the workers, the heap
        heap = FrozenHeap()
        heap.freeze()
        stack.callback(heap.thaw)
        # forks now: before a connection or thread exists to copy
        parser = _Parser(job, n, narrow)
        stack.callback(parser.close)
        ws = Workspace.open(workspace, create=False)
        stack.callback(ws.close)
        runtime = CrawlRuntime(ws, job, spec_hash, Limits(store_responses=False))
        with ws.lock("crawl"):
            every = progress.interval(progress_mode, settings.get(progress.INTERVAL_ENV))
            unchanged = frozenset() if every_kind else _unchanged(ws, digests)
            return _run(
                runtime,
                ws,
                spec_hash,
                parser,
                progress_mode,
                every,
                digests,
                unchanged,
                # why a changed kind is read whole: only the kinds this run reads
                {k: w for k, w in narrow.whole.items() if k not in unchanged},
            )


def _unchanged(ws: Workspace, digests: dict[str, str]) -> frozenset[str]:
    """The kinds every stored page of which was read with the digest the spec gives it
    now (``digests``, framework/crawl/fingerprint.py): reading them again would give
    what they gave. A workspace from before digests were kept names none: every page is
    read."""
    before = ws.read_with()
    return frozenset(k for k, d in digests.items() if before.get(k) == {d})


def _compile(spec: JobSpec) -> tuple[CompiledJob, dict[str, Any]]:
    job = CompiledJob(spec)
    settings = default_settings(spec.name)
    settings.update(spec.settings)
    job.guard.limits = _extract_limits(settings)
    try:  # what a gzip sitemap may decompress to, as the crawl reads it (runtime.py)
        job.guard.max_body = int(settings.get("DOWNLOAD_MAXSIZE", job.guard.max_body))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"DOWNLOAD_MAXSIZE: {exc}") from None
    return job, settings


# --------------------------------------------------------------------- parse


def parse(job: CompiledJob, row: Row, stored: StoredResponse) -> Parsed:
    """The crawl's read of one stored page (framework/crawl/outcome.py)."""
    try:
        return _whole(job, row, rebuild(stored))
    except StoredPageDamaged as exc:
        return damaged(row, stored, exc)


def damaged(row: Row, stored: StoredResponse, exc: StoredPageDamaged) -> Outcome:
    """A stored page that does not decompress: that row's ``damaged`` error, and the
    reparse goes on. Retryable: the next crawl fetches the page again (a reparse adds
    no attempt), which is what mends it."""
    return Outcome(
        row_id=row.id,
        ok=False,
        http_status=stored.status,
        error_kind=ErrorKind.DAMAGED,
        error=str(exc),
        retryable=ErrorKind.DAMAGED.retryable,
    )


def _whole(job: CompiledJob, row: Row, response: Response) -> Parsed:
    return OutcomeBuilder(job).read(row, response)


def parse_page(
    job: CompiledJob,
    narrow: Mapping[str, Narrowing],
    row: Row,
    stored: StoredResponse,
    item: StoredItemData | None,
) -> tuple[Parsed, bool]:
    """A stored page read field by field where its kind and ``item`` (the one linked to
    its row) allow (framework/crawl/narrow.py), else whole; and whether it was narrow."""
    try:
        response = rebuild(stored)
    except StoredPageDamaged as exc:
        return damaged(row, stored, exc), False
    narrowing = narrow.get(row.kind)
    if narrowing is not None and row.status is RowStatus.OK and response.status < 400:
        ctx = row.context
        kind = job.kinds[row.kind]

        def read(fields: FieldsOf) -> PageResult:
            return kind.parse(
                response,
                ctx.get("carry", {}),
                int(ctx.get("page", 1)),
                depth=int(ctx.get("depth", 0)),
                fields=fields,
            )

        result = narrowed(narrowing, item, read)
        if result is not None:
            if isinstance(response, TextResponse):
                response._cached_selector = None  # as OutcomeBuilder.read does: no cycle kept
            return result, True
    # the tree a failed narrow read built is reused; OutcomeBuilder.read frees it
    return _whole(job, row, response), False


_WORKER_JOB: CompiledJob | None = None  # a worker's compiled spec, inherited at fork
_WORKER_NARROW: Mapping[str, Narrowing] = {}  # and its kinds read field by field


def _parse_pages(
    job: CompiledJob, narrow: Mapping[str, Narrowing], pages: list[Page], items: Items
) -> tuple[list[Parsed], list[bool]]:
    """The parse of ``pages``, and for each whether it was read field by field."""
    out: list[Parsed] = []
    narrowed: list[bool] = []
    for row, stored in pages:
        parsed, was_narrow = parse_page(job, narrow, row, stored, items.get(row.id))
        out.append(parsed)
        narrowed.append(was_narrow)
    return out, narrowed


def _parse_chunk(pages: list[Page], items: Items) -> tuple[list[Parsed], list[bool], float]:
    """A worker's parse of ``pages``, which were narrow, and the CPU seconds it took
    (for the run's event)."""
    assert _WORKER_JOB is not None
    cpu = time.process_time()
    parsed, narrowed = _parse_pages(_WORKER_JOB, _WORKER_NARROW, pages, items)
    return parsed, narrowed, time.process_time() - cpu


def _ignore_interrupts() -> None:
    # Ctrl-C reaches the whole process group: the writer stops the workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Done:
    """A chunk parsed in this process, shaped like a worker's future."""

    def __init__(self, value: tuple[list[Parsed], list[bool]]) -> None:
        self.value = value

    def result(self) -> tuple[list[Parsed], list[bool], float]:
        return *self.value, 0.0  # the CPU is this process's own

    def done(self) -> bool:
        return True


class _Parser:
    """Parses chunks of pages in ``n`` processes: ``n - 1`` forked workers and the
    writing process, which parses a chunk no worker has started whenever it would
    otherwise wait for a worker's (see ``_run``): a third process on two cores would
    only share them, and every page it parses crosses a pipe twice. Results in
    submission order. A worker that dies (killed, out of memory) stops the run as a
    checkpoint: what was committed stays, the next reparse reads it all again."""

    def __init__(
        self, job: CompiledJob, n: int, narrow: Mapping[str, Narrowing] | None = None
    ) -> None:
        global _WORKER_JOB, _WORKER_NARROW
        self.job = job
        self.n = n
        self.narrow: Mapping[str, Narrowing] = narrow or {}
        self._pool: ProcessPoolExecutor | None = None
        if n > 1:
            _WORKER_JOB, _WORKER_NARROW = job, self.narrow
            self._pool = ProcessPoolExecutor(
                n - 1,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_ignore_interrupts,
            )
            # with fork, the first task starts every worker: now, while this process
            # has no SQLite connection or thread for them to inherit
            self._pool.submit(int).result()

    @property
    def in_flight_max(self) -> int:
        """Chunks submitted and not yet taken by the writer: enough that no worker waits,
        bounded memory (~650 pages with one worker). A flush commits up to
        ``BATCH_PAGES`` outcomes and submits nothing meanwhile: the workers need that
        many pages queued beyond their own two chunks each to stay busy through it
        (with 2 per worker alone they idled: ~7% of a reparse's wall time). Queued
        chunks cost nothing when the writer has time: it takes them back (``_run``)."""
        if self._pool is None:
            return 2 * self.n  # parsed at submission: nothing to keep busy
        return 2 * (self.n - 1) + -(-BATCH_PAGES // CHUNK_PAGES)

    def idle(self, pending: Any) -> bool:
        """Would taking ``pending`` (the oldest chunk in flight) wait for a worker?"""
        return self._pool is not None and not pending.done()

    @staticmethod
    def waiting(pending: Any) -> bool:
        """Is ``pending`` a chunk no worker has taken yet (it may be taken back)?"""
        return isinstance(pending, Future) and not (pending.running() or pending.done())

    @staticmethod
    def take_back(pending: Any) -> bool:
        """Withdraw ``pending`` from the workers; False when one took it meanwhile."""
        return isinstance(pending, Future) and pending.cancel()

    def here(self, pages: list[Page], items: Items) -> _Done:
        """Parse ``pages`` in this process, now."""
        return _Done(_parse_pages(self.job, self.narrow, pages, items))

    def submit(
        self, pages: list[Page], items: Items
    ) -> _Done | Future[tuple[list[Parsed], list[bool], float]]:
        if self._pool is None:
            return self.here(pages, items)
        return self._pool.submit(_parse_chunk, pages, items)

    def items(self, ws: Workspace, pages: list[Page]) -> Items:
        """The item linked to each row of ``pages`` that may be read field by field
        (an ok row of a narrowed kind); a row with two or more items has none here."""
        if not self.narrow:
            return {}
        ids = [r.id for r, _ in pages if r.kind in self.narrow and r.status is RowStatus.OK]
        if not ids:
            return {}
        out: Items = {}
        many: set[int] = set()
        for row_id, key, data, parts in ws.store.items_of_rows(ids):
            if row_id in out:
                many.add(row_id)
            out[row_id] = (key, data, parts)
        for row_id in many:
            del out[row_id]
        return out

    @staticmethod
    def parsed_here(pending: Any) -> bool:
        """Was ``pending`` parsed by the writing process (:meth:`here`)?"""
        return isinstance(pending, _Done)

    @staticmethod
    def chunks(pages: Iterator[Page], tally: dict[str, int]) -> Iterator[list[Page]]:
        """``pages`` counted and grouped ``CHUNK_PAGES`` at a time."""
        chunk: list[Page] = []
        for page in pages:
            tally["pages"] += 1
            chunk.append(page)
            if len(chunk) >= CHUNK_PAGES:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def close(self) -> None:
        global _WORKER_JOB, _WORKER_NARROW
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        _WORKER_JOB, _WORKER_NARROW = None, {}


_Writer = Writer  # by its old name (tests patch it)

__all__ = [
    "BATCH_PAGES",
    "BATCH_S",
    "CARRY_PENDING",
    "READ_AGAIN",
    "ReparseResult",
    "parse",
    "processes_for",
    "rebuild",
    "reparse",
]
