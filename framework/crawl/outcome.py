"""One path from a page to an :class:`~framework.workspace.records.Outcome`.

:class:`OutcomeBuilder` reads ``(row, response)`` under the spec: an HTTP error, a
page the spec cannot read, a sub-tab's part, or a page kind's records, discovered rows
and holds. The crawl (runtime.py), the reparse (its workers read, its writer builds),
``scrapy parse`` and ``framework preview`` all read pages through it, so they cannot
disagree on what a page means.

It commits nothing, opens nothing and writes no log line of its own. What a page kind's
outcome reports while it is built (found-nothing counts, drift, dropped records, change
limits against the stored item) goes to the :class:`PageReport` it is given; the crawl's
is :class:`framework.crawl.report.RunReport`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from scrapy.http import TextResponse
from w3lib.url import safe_url_string

from framework.crawl.page import CompiledJob, PageError, PageResult, Record
from framework.crawl.secrets import Secrets
from framework.spec.template import MissingValue
from framework.workspace import ErrorKind, ItemWrite, NewRow, Outcome, PartWrite, Row
from framework.workspace.holds import INVALID
from framework.workspace.jsonl import redact_url
from framework.workspace.records import HoldWrite

if TYPE_CHECKING:
    from scrapy.http import Response

    from framework.crawl.changes import ChangeLimits
    from framework.crawl.drift import Drift
    from framework.crawl.findings import Findings
    from framework.crawl.forms import Submission
    from framework.crawl.subtabs import Request

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)

# What reading a page gives before a page kind's records become an outcome: the
# finished outcome when the page is an error or a sub-tab's part, else the PageResult.
Read = Outcome | PageResult


@dataclass(frozen=True)
class TabOutcome(Outcome):
    """A sub-tab page's outcome, with the values of its rows that failed their type,
    ``(field, message)``: counted by :meth:`OutcomeBuilder.tab_read`, never committed
    (a store reads an Outcome's fields only). They ride on the outcome because that is
    what a reparse worker hands its writer (pickled): counted where the page's rows are,
    in the crawl and the reparse alike."""

    type_errors: tuple[tuple[str, str], ...] = ()


class PageReport(Protocol):
    """Where a page kind's outcome reports what it found while it is built."""

    findings: Findings
    drift: Drift
    drifted: bool  # a fallback selector gave a value of the page being built

    def fallbacks(self, kind: str, url: str, record: Record) -> None: ...

    def invalid(self, kind: str, url: str, record: Record) -> None: ...

    def review(self, record: Record, limits: ChangeLimits) -> HoldWrite | None: ...

    def held(self, row_id: int, notes: list[tuple[str, str, HoldWrite]]) -> None: ...


def hold_reasons(record: Record) -> list[dict[str, Any]]:
    """Every rule a record breaks, as a hold keeps them (holds.py)."""
    return [{"rule": r, "field": f, "value": v} for f, r, v in record.violations]


class OutcomeBuilder:
    """The spec's reading of pages: ``(row, response)`` -> outcome, no I/O."""

    def __init__(self, job: CompiledJob, secrets: Secrets | None = None) -> None:
        self.job = job
        # None: a reader of pages only (a reparse worker), never asked :meth:`as_requested`
        self.secrets = secrets

    def outcome(self, row: Row, response: Response, report: PageReport) -> Outcome:
        """The outcome of ``response`` for ``row``: what the crawl commits."""
        read = self.read(row, response)
        if isinstance(read, Outcome):
            return read
        return self.page_outcome(row, response.status, response.url, read, report)

    def read(self, row: Row, response: Response) -> Read:
        """The page read under the spec: an error or sub-tab outcome, else the page
        kind's PageResult (which :meth:`page_outcome` turns into one)."""
        try:
            return self._read(row, response)
        finally:
            # Scrapy's selector keeps `.response`: the page, its body and its lxml tree
            # refer to each other and would wait for the garbage collector. Nothing reads
            # the tree after this (a later `.selector` would build it again), so the
            # cycle is cut and they are freed when the page is done.
            if isinstance(response, TextResponse):
                response._cached_selector = None

    def _read(self, row: Row, response: Response) -> Read:
        status = response.status
        error: tuple[ErrorKind, str] | None = None
        if status == 429 or (status == 503 and "fw_retry_after" in response.meta):
            error = (ErrorKind.RATE_LIMITED, f"HTTP {status}")
        elif status >= 500:
            error = (ErrorKind.HTTP_5XX, f"HTTP {status}")
        elif status >= 400:
            error = (ErrorKind.HTTP_4XX, f"HTTP {status}")
        else:
            try:
                if row.kind in self.job.subtabs:
                    part, errors = self.job.subtabs[row.kind].read(response)
                    return TabOutcome(
                        row_id=row.id,
                        ok=True,
                        http_status=status,
                        parts=[PartWrite(row.context["item_key"], row.context["tab"], part)],
                        type_errors=tuple(errors),
                    )
                ctx = row.context
                return self.job.kinds[row.kind].parse(
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
        kind, detail = error
        return Outcome(
            row_id=row.id,
            ok=False,
            http_status=status,
            error_kind=kind,
            error=detail,
            retryable=kind.retryable,  # a 4xx (404, 410...) will not change by asking
        )

    def tab_read(self, row: Row, url: str, outcome: Outcome, findings: Findings) -> None:
        """Count a sub-tab page's rows for the found-nothing findings and its values
        that failed their type (a kind's pages are counted by :meth:`page_outcome`),
        given the outcome a page of any kind gave."""
        tab = self.job.subtabs.get(row.kind)
        if tab is not None and tab.fields is not None and outcome.ok and outcome.parts:
            value = outcome.parts[0].value
            findings.tab(row.kind, url, value, each=tab.spec.each is not None)
            # its rows are the kind's records (a tab of one mapping: one), and a row's
            # nested group is one field as a page kind's is (``group[].field``)
            errors = outcome.type_errors if isinstance(outcome, TabOutcome) else ()
            rows = len(value) if isinstance(value, list) else 1
            findings.type_failures(row.kind, url, rows, errors)

    def page_outcome(
        self, row: Row, status: int, url: str, result: PageResult, report: PageReport
    ) -> Outcome:
        """A page kind's records, discovered rows and holds as one outcome."""
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
        report.findings.page(
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
        # every record's values that failed their type, kept, held or dropped alike:
        # the one place a record's errors are noted (a rule broken is a hold, counted
        # once committed: RunReport.committed)
        report.findings.type_failures(
            row.kind, url, len(result.records), (e for r in result.records for e in r.errors)
        )
        if result.suspect is not None:  # no next page, yet a link that looks like one
            report.findings.note("pagination_suspect", row.kind, url, detail=result.suspect)
        listing = None
        if kind.spec.total is not None:  # what this page adds to its list (completeness.py)
            # its records when they are the items, else the distinct links it found
            records = kind.spec.emits and not single
            found = len(kept) if records else len({(k.kind, k.url) for k in result.links})
            listing = {"total": result.total, "found": found}
        drift = report.drift
        if kind.spec.emits and drift.watching(row.kind):
            for values in kept:
                drift.record(row.kind, url, values)
        source_type = self.job.spec.source_type
        for record in result.records:
            if record.fallbacks:
                report.drifted = True
                report.fallbacks(row.kind, url, record)
            if not record.valid:
                report.invalid(row.kind, url, record)
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
                held.append(
                    HoldWrite(
                        dedupe_key=record.dedupe_key,
                        source_type=source_type,
                        source_id=record.source_id or "",
                        data=record.values,
                        status=INVALID,
                        reasons=hold_reasons(record),
                    )
                )
                continue
            if kind.limits:  # over a change limit: the accepted version stays the item
                review = report.review(record, kind.limits)
                if review is not None:
                    held.append(review)
                    continue
            required_tabs = any(t.required for t in record.subtabs)
            items.append(
                ItemWrite(
                    dedupe_key=record.dedupe_key,
                    source_type=source_type,
                    source_id=record.source_id or "",
                    data=record.values,
                    complete=not required_tabs,
                )
            )
            for tab in record.subtabs:
                ctx = {"item_key": record.dedupe_key, "tab": tab.tab, "required": tab.required}
                new_rows.append(_request_row(tab, ctx))
        tracks_depth = self.job.tracks_depth
        for link in result.links:
            ctx = _carry(link.carry)
            if tracks_depth and link.depth:  # max_depth reads it after a resume
                ctx["depth"] = link.depth
            new_rows.append(NewRow(kind=link.kind, url=link.url, context=ctx))
        for link in result.next_pages:
            ctx = _carry(link.carry)
            ctx["page"] = page + 1
            if tracks_depth and link.depth:
                ctx["depth"] = link.depth
            # a `param` page's next page is its own request again (as_requested); for
            # a plain GET that is what a next page was anyway
            posted = row.method.upper() != "GET" or row.body is not None
            again = link.same_request and posted and self.as_requested(row.url, url)
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
            if tracks_depth:
                ctx["depth"] = int(row.context.get("depth", 0)) + 1
            new_rows.append(_request_row(sub, ctx))
        if held:
            report.held(row.id, [(row.kind, url, h) for h in held])
        return Outcome(
            row_id=row.id,
            ok=True,
            http_status=status,
            new_rows=new_rows,
            items=items,
            holds=held,
            listing=listing,
        )

    def as_requested(self, requested: str, url: str) -> bool:
        """Is ``url`` (the page's, after redirects) ``requested``, the row's own URL as
        it was sent? A page that was redirected was fetched by another request (a POST
        answered by a 303 is a GET of the new URL): a pagination repeating the row's
        method and body would send what the site never asked for, so its next page is
        a GET of the new URL. The reparse decides from the stored final URL, so both
        decide alike."""
        assert self.secrets is not None, "as_requested needs the job's secrets"
        return safe_url_string(self.secrets.mask(url)) == safe_url_string(requested)


def _carry(values: dict[str, Any]) -> dict[str, Any]:
    return {"carry": values} if values else {}


def _request_row(request: Request | Submission, context: dict[str, Any]) -> NewRow:
    """A sub-tab's or a form's request as a row: both are built whole (method, body
    and its type) by their compiler, so the row repeats them as they are."""
    return NewRow(
        kind=request.kind,
        url=request.url,
        method=request.method,
        body=request.body,
        body_type=request.body_type,
        context=context,
    )
