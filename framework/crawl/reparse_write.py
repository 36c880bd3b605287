"""The reparse's writing side: parsed pages become outcomes in row order and are
committed in groups, as a crawl commits them but with no attempt counted and nothing
logged as a request (none was made).

The parse side (which may run in worker processes) is framework/crawl/reparse.py; the
outcome of a page is built by the crawl's one path (framework/crawl/outcome.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from framework.crawl.narrow import StoredItemData
from framework.crawl.outcome import Read
from framework.workspace import ErrorKind, RowStatus, Workspace, redact
from framework.workspace.jsonl import redact_url
from framework.workspace.records import (
    CommitResult,
    Outcome,
    Row,
    StoredResponse,
    canonical_json,
)

if TYPE_CHECKING:
    from framework.crawl.runtime import CrawlRuntime

BATCH_PAGES = 500  # outcomes per transaction ($FRAMEWORK_REPARSE_BATCH: tests)...
BATCH_S = 1.0  # ...or fewer, when that many seconds passed since the group's first
UNLINKED_EXAMPLES = 5  # URLs of rows no page links any more, in the run's event

Page = tuple[Row, StoredResponse]
Items = dict[int, StoredItemData]  # the item linked to a row, for rows read field by field
# What the parse of a page gives: the finished outcome when the page is an error or a
# sub-tab's part, else the PageResult for the writer to turn into one.
Parsed = Read


class ReparseCommit:
    """Commits reparsed pages' outcomes and counts them as the crawl's counters."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime
        # a reparse's items by what it did to them, each counted once: a detail page
        # read again unchanged whose sub-tab then changes its item is one changed item
        self._changed: set[str] = set()
        self._unchanged: set[str] = set()
        self._unchanged_n = 0  # on pages that also gave new items (see _count)

    def many(self, pages: Sequence[tuple[Row, Outcome]]) -> list[CommitResult]:
        """The outcomes of stored pages read again, in ONE transaction, in order (a later
        page sees what an earlier one wrote); all or none. Its events are written once
        the transaction is committed, so a killed reparse leaves none for pages whose
        outcome was lost."""
        outcomes = [
            dataclasses.replace(self.runtime.secrets.mask_outcome(o), reparse=True)
            for _, o in pages
        ]
        results = self.runtime.ws.store.commit_many(outcomes)
        out: list[CommitResult] = []
        events: list[dict[str, Any]] = []  # one write for the group's events
        for (row, _), outcome, res in zip(pages, outcomes, results, strict=True):
            # refused (None) only by a lease's fencing: a reparse holds the crawl lock
            assert res is not None, f"the reparse commit of row {row.id} was refused"
            self._count(row, outcome, res, events)
            out.append(res)
        if events:  # each built redacted (see _count)
            self.runtime.ws.events.append_many(events, redacted=True)
        return out

    def _count(
        self, row: Row, outcome: Outcome, res: CommitResult, events: list[dict[str, Any]]
    ) -> None:
        """Count a reparsed page's outcome; its events go to ``events``, redacted: the
        one for changed items (one per page that changed) has only its URL and its keys
        to mask, the generic walk is for the rare failed row."""
        c = self.runtime.counters
        c.outcome(outcome, res)  # counted as the crawl counts a committed outcome
        if not outcome.ok and row.status is RowStatus.OK:
            key = str(outcome.error_kind)
            events.append(
                redact(
                    self.runtime._event_line(
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
        self.runtime.report.committed(row.id)
        changed, unchanged = self._changed, self._unchanged
        changed.update(res.changed)
        unchanged.difference_update(res.changed)
        if outcome.items and res.items_unchanged:
            if res.items_new:  # which of the others are new the result does not say:
                self._unchanged_n += res.items_unchanged  # counted, not named
            else:
                unchanged.update(w.dedupe_key for w in outcome.items if w.dedupe_key not in changed)
        c.items_changed = len(changed)
        c.items_unchanged = len(unchanged) + self._unchanged_n
        if res.changed:
            events.append(
                self.runtime._event_line(
                    "items_changed",
                    url=redact_url(row.url),
                    row=row.id,
                    keys=[redact_url(k) for k in res.changed],
                )
            )
        c.items_completed += len(res.completed)


Identity = tuple[str, str, str, str]  # a row's kind, method, URL and body: its fingerprint


def _identity(kind: str, method: str, url: str, body: str | None) -> Identity:
    return (kind, method.upper(), url, body or "")


class Writer:
    """Turns parsed pages into outcomes in row order and commits them in groups.

    It also keeps, for the pages read in this run, the values each carries into the
    rows it found (framework/workspace/carry.py). A row parsed with other carried values
    than its parent now gives it was parsed with a stale context: its result is dropped
    (``stale``), and the run reads it again once its parent's commit refreshed it. So is
    a row whose parent was dropped: its parent's values are not final yet (a chain of
    next pages that pass carried values on)."""

    def __init__(self, runtime: CrawlRuntime) -> None:
        self.runtime = runtime
        self.commit = ReparseCommit(runtime)
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
            runtime.outcomes.tab_read(row, stored.final_url, outcome, runtime.findings)
        else:
            kind = runtime.job.kinds[row.kind]
            if kind.limits and self.group:
                self.flush()  # its records are compared with the items stored before it
            outcome = runtime.outcomes.page_outcome(
                row, stored.status, stored.final_url, parsed, runtime.report
            )
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
        results = self.commit.many(group)
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
