"""Re-extraction of the stored pages with the current spec: no request is made.

The crawl keeps each page's body in the workspace (the ``responses`` table, see
``docs/workspace.md``). :func:`reparse` turns every stored body back into the Scrapy
response the spider saw (same class, URL, status and content type, so the same
encoding) and runs it through the crawl's own path, :meth:`CrawlRuntime.outcome_for`,
then commits it with :meth:`CrawlRuntime.commit_reparses`. So items are updated in
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
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from scrapy.http import Headers, Response, TextResponse
from scrapy.responsetypes import responsetypes
from w3lib.encoding import http_content_type_encoding, read_bom

from framework import progress
from framework.crawl.cores import CoreSample, idle_cores
from framework.crawl.fingerprint import kind_fingerprints, kind_sections
from framework.crawl.narrow import Narrowing, StoredItemData, narrowed
from framework.crawl.narrow import Plan as NarrowPlan
from framework.crawl.narrow import plan as narrow_plan
from framework.crawl.page import CompiledJob, FieldsOf, PageResult
from framework.crawl.runtime import CrawlRuntime, Limits, nothing_extracted
from framework.errors import Checkpoint, StoredPageDamaged, UsageError, WorkspaceError
from framework.extract.patterns import Limits as ExtractLimits
from framework.heap import FrozenHeap
from framework.settings import default_settings
from framework.spec import load_spec
from framework.spec.models import JobSpec
from framework.workspace import ErrorKind, RowStatus, Workspace
from framework.workspace.fill import EXTRACTION_EVENTS, last_extraction
from framework.workspace.integrity import ensure_whole
from framework.workspace.jsonl import redact_url
from framework.workspace.records import Outcome, Row, StoredResponse, canonical_json
from framework.workspace.workspace import STATE_FILE

logger = logging.getLogger(__name__)

# Errors that a different spec may turn into a success; the others are about the
# download (and such rows have no stored body anyway).
READ_AGAIN = frozenset({ErrorKind.PARSE, ErrorKind.VALIDATION})

BATCH_PAGES = 500  # outcomes per transaction ($FRAMEWORK_REPARSE_BATCH: tests)...
BATCH_S = 1.0  # ...or fewer, when that many seconds passed since the group's first
CHUNK_PAGES = 64  # pages per task handed to a worker (amortises the pipe)
UNLINKED_EXAMPLES = 5  # URLs of rows no page links any more, in the run's event
AUTO_MIN_PAGES = 1000  # `auto` below this many stored pages: no workers (not worth a fork)
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
) -> ReparseResult:
    """Read the stored pages of the job's workspace again with the spec at
    ``spec_path``; commit what it gives. Blocks until done; no network.
    ``progress_mode``: see :func:`framework.progress.mode` (None: no progress);
    ``processes``: a number or ``auto`` (see :func:`processes_for`); ``every_kind``:
    read the pages of kinds whose digest did not change too (see :func:`_unchanged`);
    ``since``: a sample of the cores taken when the command started (for ``auto``: the
    window it measures, framework/crawl/cores.py), else one is taken now."""
    sample = since or CoreSample()  # for `auto`: the start-up is the measuring window
    spec = load_spec(spec_path)
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


def _carried(ws: Workspace, kinds: frozenset[str]) -> dict[str, Any]:
    """The last run's fill counts and warnings of ``kinds`` (pages this run leaves
    unread, which would give them again): ``framework status`` reads the last run's as
    the job's, so a reparse of one kind does not blank the others'."""
    if not kinds:
        return {"fill": {}, "warnings": []}
    # from the log's end: what was written since the last finished run, not the whole log
    event = ws.events.last(EXTRACTION_EVENTS)
    last = last_extraction(event or {})
    return {
        "fill": {k: v for k, v in last["fill"].items() if k in kinds},
        "warnings": [w for w in last["warnings"] if w.get("kind") in kinds],
    }


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
Page = tuple[Row, StoredResponse]
Items = dict[int, StoredItemData]  # the item linked to a row, for rows read field by field
# What the parse of a page gives: the finished outcome when the page is an error or a
# sub-tab's part, else the PageResult for the writer to turn into one.
Parsed = Outcome | PageResult


class _ParseOnly:
    """Stands in for the runtime in :meth:`CrawlRuntime.outcome_for`, so a worker runs
    the crawl's own parse and error handling; the step that needs the runtime (counts,
    warnings, change limits against the store) is handed back undone."""

    def __init__(self, job: CompiledJob) -> None:
        self.job = job

    _outcome = CrawlRuntime._outcome

    def _page_outcome(self, row: Row, status: int, url: str, result: PageResult) -> PageResult:
        return result


def parse(job: CompiledJob, row: Row, stored: StoredResponse) -> Parsed:
    """The crawl's parse of one stored page (see :class:`_ParseOnly`)."""
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
    return cast(Parsed, CrawlRuntime.outcome_for(cast(Any, _ParseOnly(job)), row, response))


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
                response._cached_selector = None  # as outcome_for does: no cycle kept
            return result, True
    # the tree a failed narrow read built is reused; outcome_for frees it
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

    def close(self) -> None:
        global _WORKER_JOB, _WORKER_NARROW
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        _WORKER_JOB, _WORKER_NARROW = None, {}


# ---------------------------------------------------------------------- run
Identity = tuple[str, str, str, str]  # a row's kind, method, URL and body: its fingerprint


def _identity(kind: str, method: str, url: str, body: str | None) -> Identity:
    return (kind, method.upper(), url, body or "")


class _Writer:
    """Turns parsed pages into outcomes in row order and commits them in groups.

    It also keeps, for the pages read in this run, the values each carries into the
    rows it found (framework/workspace/carry.py). A row parsed with other carried values
    than its parent now gives it was parsed with a stale context: its result is dropped
    (``stale``), and the run reads it again once its parent's commit refreshed it. So is
    a row whose parent was dropped: its parent's values are not final yet (a chain of
    next pages that pass carried values on)."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime
        self.batch = int(os.environ.get("FRAMEWORK_REPARSE_BATCH") or BATCH_PAGES)
        self.group: list[tuple[Row, Outcome]] = []
        self.started = 0.0
        self.newly_failed = 0  # ok before, unreadable with this spec
        self.damaged = 0  # stored pages that do not decompress: their rows' errors
        self.carried: dict[int, dict[Identity, Any]] = {}  # parent row id -> found -> carry
        self.stale: set[int] = set()  # rows dropped: to read again in the next pass
        self.refreshed: set[int] = set()  # rows whose carried values a commit changed
        self.refreshed_ever: set[int] = set()  # the same over the whole run
        self.committed: set[int] = set()  # rows whose outcome this pass committed
        # what the pages read ok in this run link now, and those pages (their links
        # are known): the rows they found before and no longer link are reported. The
        # identities' hashes: a million links in tens of MB, not hundreds; a collision
        # would only leave one row unreported
        self.linked: set[int] = set()
        self.read_ok: set[int] = set()

    def page(self, row: Row, stored: StoredResponse, parsed: Parsed) -> bool:
        """Take a parsed page; False: dropped as stale (read again in the next pass)."""
        runtime = self.runtime
        if self._stale(row):
            self.stale.add(row.id)
            return False
        if isinstance(parsed, Outcome):
            outcome = parsed
            runtime.tab_read(row, stored.final_url, outcome)
        else:
            kind = runtime.job.kinds[row.kind]
            if kind.limits and self.group:
                self.flush()  # its records are compared with the items stored before it
            outcome = runtime._page_outcome(row, stored.status, stored.final_url, parsed)
        if outcome.ok and outcome.new_rows:
            # as the store will compare them: masked like the commit (runtime.secrets)
            found: dict[Identity, Any] = {}
            for new in runtime.secrets.mask_outcome(outcome).new_rows:
                ident = _identity(new.kind, new.method, new.url, new.body)
                found.setdefault(ident, new.context.get("carry") or {})
            self.carried[row.id] = found
            self.linked.update(map(hash, found))
        if not self.group:
            self.started = time.monotonic()
        self.group.append((row, outcome))
        if len(self.group) >= self.batch or time.monotonic() - self.started >= BATCH_S:
            self.flush()
        return True

    def _stale(self, row: Row) -> bool:
        """Was ``row`` parsed with carried values its parent, read in this run, no
        longer gives it, or was its parent dropped? (The parent is read first: its id is
        lower.)"""
        if row.parent_id in self.stale:
            return True
        found = self.carried.get(row.parent_id) if row.parent_id is not None else None
        if not found:
            return False
        now = found.pop(_identity(row.kind, row.method, row.url, row.body), None)
        # compared as the store compares them: their canonical JSON (carry.py)
        return now is not None and canonical_json(now) != canonical_json(
            row.context.get("carry") or {}
        )

    def flush(self) -> None:
        if not self.group:
            return
        group, self.group = self.group, []
        results = self.runtime.commit_reparses(group)
        for (row, outcome), res in zip(group, results, strict=True):
            self.committed.add(row.id)
            if outcome.ok:
                self.read_ok.add(row.id)
            self.refreshed.update(res.refreshed)
            self.refreshed_ever.update(res.refreshed)
            if outcome.error_kind is ErrorKind.DAMAGED:
                self.damaged += 1  # the workspace's fault, not the spec's
            elif not outcome.ok and row.status is RowStatus.OK:
                self.newly_failed += 1

    def unlinked(self, ws: Workspace) -> dict[str, Any]:
        """The rows that the page which found them, read ok in this run, no longer links,
        nor does any other page read in this run: a fix of a ``follow``, ``next`` or
        sub-tab rule that no longer reaches them. They stay as they are (their items
        too: nothing is deleted); pending ones would still be fetched by the next crawl.
        Pages of kinds left unread may link them still: their rows are not judged."""
        by_status: dict[str, int] = {}
        examples: list[str] = []
        for link in ws.store.iter_links(self.read_ok) if self.read_ok else ():
            if hash(_identity(link.kind, link.method, link.url, link.body)) in self.linked:
                continue
            by_status[link.status.value] = by_status.get(link.status.value, 0) + 1
            if len(examples) < UNLINKED_EXAMPLES:
                examples.append(link.url)
        return {"rows": sum(by_status.values()), "by_status": by_status, "examples": examples}

    def next_pass(self) -> list[int]:
        """The rows to read again, after a pass is committed: those dropped as stale and
        those a commit refreshed that this pass did not read after it (rows of kinds left
        unread, rows read before their parent's commit). Starts the next pass."""
        # the lowest row a pass reads has its parent's final values: it is committed
        assert self.committed or not self.stale, "a reparse pass dropped every row it read"
        again = sorted((self.stale | self.refreshed) - self.committed)
        self.stale, self.refreshed, self.committed = set(), set(), set()
        return again


def _run(
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
    writer = _Writer(runtime)
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
        chunks["writer" if isinstance(pending, _Done) else "workers"] += 1
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
        run_pass(_chunks(ws, runtime, tally, meter.advance, unchanged), meter.advance)
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
            run_pass(_again(ws, runtime, sorted(ids | whole), tally, whole), lambda: None)
    ws.settle_read_with(digests)  # every stored page of every kind now read with these
    unlinked = writer.unlinked(ws)
    pages, skipped, unknown = tally["pages"], tally["skipped"], tally["unknown"]
    items = ws.store.item_counts()
    emitting = [n for n, k in runtime.job.kinds.items() if k.spec.emits]
    runtime.findings.finish(emitting)
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
        "warnings": [w for w in carried["warnings"] if w.get("kind") not in read_late],
    }
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
        **({"carried": sorted(carried["fill"])} if carried["fill"] else {}),
        **({"unlinked": unlinked} if unlinked["rows"] else {}),
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
    )


def _chunks(
    ws: Workspace,
    runtime: CrawlRuntime,
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

    return _in_chunks(read(), tally)


def _again(
    ws: Workspace,
    runtime: CrawlRuntime,
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

    return _in_chunks(read(), tally)


def _in_chunks(pages: Iterator[Page], tally: dict[str, int]) -> Iterator[list[Page]]:
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


__all__ = ["READ_AGAIN", "ReparseResult", "parse", "processes_for", "rebuild", "reparse"]
