"""Re-extraction of the stored pages with the current spec: no request is made.

The crawl keeps each page's body in the workspace (the ``responses`` table, see
``docs/workspace.md``). :func:`reparse` turns every stored body back into the Scrapy
response the spider saw (same class, URL, status and content type, so the same
encoding) and runs it through the crawl's own path, :meth:`CrawlRuntime.outcome_for`,
then commits it with :meth:`CrawlRuntime.commit_reparse`. So items are updated in place
(changed content gets a new content hash and ships again, unchanged content is not
touched), follow links and sub-tab requests the new spec finds become pending rows
for the next crawl, and a page the new spec cannot read becomes an error row, exactly
as if it had been fetched now.

Pages are read in row order, so a detail page is read before its sub-tabs (whose parts
are merged into its item). Only rows that are ok, or failed to be read (parse or
validation errors), are read again: pending rows will be fetched anyway, and a page
that failed to download has no body. The run is recorded as ``reparse_started`` /
``reparse_finished`` events with the same counts, warnings and fill counts a crawl
records, and the spec's hash is recorded, so the next crawl does not announce the
change again. It takes the workspace's crawl lock: no crawl runs meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy.http import Headers, Response
from scrapy.responsetypes import responsetypes

from framework import progress
from framework.crawl.page import CompiledJob
from framework.crawl.runtime import CrawlRuntime, Limits, nothing_extracted
from framework.errors import UsageError, WorkspaceError
from framework.extract.patterns import Limits as ExtractLimits
from framework.settings import default_settings
from framework.spec import load_spec
from framework.workspace import ErrorKind, RowStatus, Workspace
from framework.workspace.integrity import ensure_whole
from framework.workspace.records import Row, StoredResponse
from framework.workspace.workspace import STATE_FILE

logger = logging.getLogger(__name__)

# Errors that a different spec may turn into a success; the others are about the
# download (and such rows have no stored body anyway).
READ_AGAIN = frozenset({ErrorKind.PARSE, ErrorKind.VALIDATION})


@dataclass(frozen=True)
class ReparseResult:
    job: str
    workspace: Path
    counts: dict[str, Any]
    warnings: list[dict[str, Any]]
    nothing_extracted: bool


def rebuild(stored: StoredResponse) -> Response:
    """The Scrapy response a stored page was: the class the downloader would pick for
    its content type and body (HtmlResponse, TextResponse, XmlResponse, JSON...)."""
    headers = Headers({"Content-Type": stored.content_type} if stored.content_type else {})
    cls = responsetypes.from_args(headers=headers, url=stored.final_url, body=stored.body)
    # no Request: extraction reads only the response (building one costs a URL
    # normalisation per page, a tenth of the reparse)
    return cls(url=stored.final_url, status=stored.status, headers=headers, body=stored.body)


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


def reparse(spec_path: Path, workspace: Path, progress_mode: str | None = None) -> ReparseResult:
    """Read every stored page of the job's workspace again with the spec at
    ``spec_path``; commit what it gives. Blocks until done; no network.
    ``progress_mode``: see :func:`framework.progress.mode` (None: no progress)."""
    spec = load_spec(spec_path)
    if not (workspace / STATE_FILE).is_file():
        raise WorkspaceError(
            f"no workspace at {workspace}: run `framework crawl {spec.name}` first"
        )
    job = CompiledJob(spec)
    settings = default_settings(spec.name)
    settings.update(spec.settings)
    job.guard.limits = _extract_limits(settings)
    spec_hash = "sha256:" + hashlib.sha256(spec_path.read_bytes()).hexdigest()
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        ensure_whole(ws, deep=False)  # never build on a workspace that lost commits
    ws = Workspace.open(workspace, create=False)
    runtime = CrawlRuntime(ws, job, spec_hash, Limits(store_responses=False))
    try:
        with ws.lock("crawl"):
            every = progress.interval(progress_mode, settings.get(progress.INTERVAL_ENV))
            return _run(runtime, ws, spec_hash, progress_mode, every)
    finally:
        ws.close()


def _run(
    runtime: CrawlRuntime, ws: Workspace, spec_hash: str, progress_mode: str | None, every: float
) -> ReparseResult:
    spec = runtime.spec
    stored, size = ws.store.responses_size()
    previous = ws.spec_hash()
    runtime.event("reparse_started", spec_hash=spec_hash, previous=previous, stored=stored)
    logger.info("reparse %s: %d stored pages (%.1f MB)", spec.name, stored, size / 2**20)
    ws.record_spec(spec_hash)
    started = time.monotonic()
    pages = skipped = unknown = newly_failed = 0
    meter = progress.Meter(
        f"reparse {spec.name}",
        stored,
        "pages",
        progress_mode,
        every=every,
        detail=lambda: _progress_detail(runtime),
    )
    with meter:
        for row, body in ws.store.iter_responses():
            meter.advance()
            if not _read_again(row):
                skipped += 1
                continue
            if row.kind not in runtime.job.kinds and row.kind not in runtime.job.subtabs:
                unknown += 1  # a kind the spec no longer has: nothing can read it
                continue
            pages += 1
            outcome = runtime.outcome_for(row, rebuild(body))
            runtime.commit_reparse(row, outcome)
            if not outcome.ok and row.status is RowStatus.OK:
                newly_failed += 1
    items = ws.store.item_counts()
    emitting = [n for n, k in runtime.job.kinds.items() if k.spec.emits]
    runtime.findings.finish(emitting)
    empty = nothing_extracted(items, spec.expect_empty)
    c = runtime.counters
    counts: dict[str, Any] = {
        "pages": pages,
        "ok": c.ok,
        "errors": c.errors,
        "errors_by_kind": c.by_error,
        "newly_failed": newly_failed,  # ok before, unreadable with this spec
        "skipped": skipped,
        "unknown_kind": unknown,
        "rows_new": c.rows_new,
        "items_new": c.items_new,
        "items_changed": c.items_changed,
        "items_unchanged": c.items_unchanged,
        "items_completed": c.items_completed,
        "records_invalid": c.records_invalid,
        "fallbacks": c.fallbacks,
    }
    warnings = runtime.findings.warnings()
    runtime.event(
        "reparse_finished",
        duration_s=round(time.monotonic() - started, 3),
        counts=counts,
        items=items,
        warnings=warnings,
        fill=runtime.findings.fill(),
        **({"nothing_extracted": True} if empty else {}),
    )
    if unknown:
        logger.warning(
            "%d stored pages are of kinds the spec no longer has: left as they were", unknown
        )
    return ReparseResult(spec.name, ws.path, counts, warnings, empty)


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


__all__ = ["READ_AGAIN", "ReparseResult", "rebuild", "reparse"]
