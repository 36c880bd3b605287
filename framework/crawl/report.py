"""What a run tells about the pages it read: dropped records, fallback selectors
(drift), holds (invalid, review), and the findings of ``run_finished``.

:class:`RunReport` is the :class:`~framework.crawl.outcome.PageReport` of the crawl and
the reparse: the outcome builder hands it what a page found while the outcome is built;
a hold is counted and told only once its outcome is committed (:meth:`RunReport.committed`),
so a page that ``--halt-on-drift`` or a refused commit drops reports none. It writes
events and log lines; it commits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from framework.crawl import completeness
from framework.crawl.drift import Drift
from framework.crawl.findings import FOUND_NOTHING_EVENT, Findings
from framework.crawl.verdict import exit_code, row_totals
from framework.errors import EXIT_HALTED, EXIT_OK
from framework.workspace.fill import EXTRACTION_EVENTS, last_extraction
from framework.workspace.holds import INVALID, REVIEW
from framework.workspace.jsonl import redact_url
from framework.workspace.records import HoldWrite, RowStatus

if TYPE_CHECKING:
    from framework.crawl.blocking import Block
    from framework.crawl.changes import ChangeLimits
    from framework.crawl.counters import RunCounters
    from framework.crawl.group import GroupCommit
    from framework.crawl.page import CompiledJob, Record
    from framework.workspace import Workspace

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)
# how many crawls back a kind's last whole read is looked for (each a run_finished)
VOLUME_LOOKBACK = 50


class RunReport:
    def __init__(
        self,
        job: CompiledJob,
        ws: Workspace,
        counters: RunCounters,
        event: Callable[..., None],
        group: GroupCommit[Any, Any],
    ) -> None:
        self.job = job
        self.spec = job.spec
        self.ws = ws
        self.counters = counters
        self.event = event
        self.group = group
        # found-nothing warnings and fill counts of this run (see findings.py)
        self.findings = Findings(event, logger)
        # selector drift: fallbacks that won and fill rates below the last crawl's
        d = self.spec.drift
        self.drift = Drift(event, logger, fill_drop=d.drop, min_records=d.min_records)
        self.drifted = False  # the page being built had a fallback win (drift)
        self._fallbacks_seen: set[tuple[str, str, int]] = set()
        self._rules_seen: set[tuple[str, str, str]] = set()  # (kind, field, rule) warned
        # the holds a row's outcome carries, with its kind and URL, until it is committed
        self._hold_notes: dict[int, list[tuple[str, str, HoldWrite]]] = {}
        self.items_at_end: dict[str, int] = {}  # the workspace's, at the run's end
        self.mismatched = 0  # lists whose count differs from their declared total

    # ------------------------------------------------- while an outcome is built
    def fallbacks(self, kind: str, url: str, record: Record) -> None:
        for fld, index, expr in record.fallbacks:
            self.counters.fallbacks += 1
            first = self.first_selector(kind, fld) if "[" not in fld else []
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

    def invalid(self, kind: str, url: str, record: Record) -> None:
        # said (and recorded as an event) once per kind and missing fields, counted
        # always: a wrong selector on 100,000 pages is one warning with a count
        self.counters.records_invalid += 1
        missing = ", ".join(record.missing)
        if self.findings.note("records_dropped", kind, url, detail=missing):
            self.event("record_invalid", url=url, missing=record.missing, errors=record.errors)
        logger.debug(
            "record dropped at %s: missing required field(s) %s%s",
            redact_url(url),
            missing,
            "".join(f"; {f}: {m}" for f, m in record.errors),
        )

    def review(self, record: Record, limits: ChangeLimits) -> HoldWrite | None:
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

    def held(self, row_id: int, notes: list[tuple[str, str, HoldWrite]]) -> None:
        self._hold_notes[row_id] = notes

    def dropped(self, row_id: int) -> None:
        """The row's outcome was not committed: its holds were never written."""
        self._hold_notes.pop(row_id, None)

    # ------------------------------------------------------ once it is committed
    def committed(self, row_id: int) -> None:
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
                if said:  # its event goes with its warning
                    continue
                name = "item_invalid"
                text = (
                    "record %s of %s breaks rule %s of field %r (value %r) at %s: stored "
                    "as invalid, not shipped"
                )
                shown: tuple[Any, ...] = (first["rule"], first["field"], first["value"])
            else:
                self.counters.items_review += 1
                name = "item_review_required"
                text = (
                    "record %s of %s: field %r %s (%r -> %r) at %s: held for `framework "
                    "review`, the accepted version still ships"
                )
                shown = (first["field"], first["rule"], first["was"], first["value"])
            if not said:
                logger.warning(text, hold.dedupe_key, kind, *shown, redact_url(url))
            self.event(name, kind=kind, key=hold.dedupe_key, url=url, reasons=list(hold.reasons))

    # ------------------------------------------------------------ the run's start
    def spec_changed(self, previous: str, spec_hash: str, fresh: bool) -> None:
        """Announce a spec other than the last run's (before it is recorded: a crash in
        between announces it twice, never not at all), with the advice that fits."""
        self.event("spec_changed", spec_hash=spec_hash, previous=previous)
        if fresh:  # every page is fetched again with it: nothing to advise
            logger.info(
                "the spec changed since the last run; this --fresh run reads every page with it"
            )
            return
        logger.warning(
            "the spec changed since the last run: pages already fetched keep what the "
            "old spec extracted; `framework reparse %s` re-extracts the stored pages "
            "without fetching, `framework crawl --fresh %s` fetches everything again",
            self.spec.name,
            self.spec.name,
        )

    # ------------------------------------------------------------ the run's end
    def first_selector(self, kind: str, field: str) -> list[str]:
        """A field's sources as labels (``css: .amount::text``), for drift reports."""
        spec = self.job.kinds[kind].spec
        fs = spec.id if field == "id" else spec.fields.get(field)
        return [f"{s.kind}: {s.expr}" for s in fs.sources] if fs is not None else []

    def last_fill(self) -> dict[str, Any]:
        """The fill counts of the last crawl or reparse (its finishing event), if any:
        what this run's fill rates are compared with (read from the log's end)."""
        event = self.ws.events.last(EXTRACTION_EVENTS)
        return last_extraction(event)["fill"] if event is not None else {}

    def run_finished(
        self, reason: str, worker: dict[str, Any], duration_s: float, blocked: dict[str, Any]
    ) -> None:
        """The crawl's last event: its reason and exit code, counts, rows, items and
        findings (what ``framework status`` reads)."""
        store = self.ws.store
        counts = store.row_counts()
        items = store.item_counts()
        self.items_at_end = dict(items)
        # the holds the workspace keeps: a drained crawl with some needs a human
        code = exit_code(reason, *row_totals(counts), store.hold_counts()["total"])
        found = self.finish(items, code, counts)
        self.event(
            "run_finished",
            reason=reason,
            # a list short of (or over) its declared total needs a human, as a drained
            # crawl with held records does (completeness.py)
            exit_code=EXIT_HALTED
            if found.get("nothing_extracted") or (code == EXIT_OK and self.mismatched)
            else code,
            **worker,
            duration_s=duration_s,
            counts=self.counters.as_event(),
            rows={k: {str(st): n for st, n in v.items()} for k, v in counts.items()},
            items=items,
            **found,
            **blocked,
        )

    def finish(
        self,
        items: Mapping[str, int],
        code: int,
        counts: Mapping[str, Mapping[RowStatus, int]] | None = None,
    ) -> dict[str, Any]:
        """The end-of-run findings, as the run_finished event's extra fields
        (``counts``: the workspace's rows by kind and status, for the volume drift)."""
        emitting = [n for n, k in self.job.kinds.items() if k.spec.emits]
        self.findings.finish(emitting)
        # every list against its declared total, from the workspace (resume-proof)
        lists = completeness.check(self.job, self.ws.store, self.findings, logger)
        self.mismatched = lists.mismatched
        found: dict[str, Any] = {
            "warnings": self.findings.warnings(),
            "fill": self.findings.fill(),
            # every field whose values failed their type, over the warning's share or not
            "type_failed": self.findings.type_failed(),
        }
        found["drift"] = self.drift.finish(found["fill"], self.first_selector)
        if counts is not None:
            whole = self._read_whole(counts)
            if whole:
                found["volume"] = whole
                found["drift"] += self.drift.volume(
                    whole, self._last_volume(set(whole)), self.spec.drift.volume, self.pages_of
                )
        fresh = len(found["warnings"])
        self._carry_unread(found)
        # totals were compared again over the whole workspace: a carried one is stale
        found["warnings"][fresh:] = [
            w for w in found["warnings"][fresh:] if w.get("what") != "total_mismatch"
        ]
        if lists.lists:
            found["completeness"] = lists.as_dict()
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

    def _read_whole(
        self, counts: Mapping[str, Mapping[RowStatus, int]]
    ) -> dict[str, dict[str, int]]:
        """The kinds this run read every page of (none pending, each ok one read now: a
        ``--fresh`` crawl or a first one), with their pages and records: a resumed run
        read only the rest of a kind, which says nothing about its size."""
        whole: dict[str, dict[str, int]] = {}
        for kind, read in self.findings.volume().items():
            rows = counts.get(kind, {})
            ok = rows.get(RowStatus.OK, 0)
            if ok and not rows.get(RowStatus.PENDING, 0) and read["pages"] >= ok:
                whole[kind] = read
        return whole

    def _last_volume(self, kinds: set[str]) -> dict[str, Mapping[str, Any]]:
        """Per kind, the pages and records of the last crawl that read it whole (the
        newest ``volume`` of the ``run_finished`` events, a bounded way back)."""
        found: dict[str, Mapping[str, Any]] = {}
        for n, event in enumerate(self.ws.events.newest_first(("run_finished",))):
            volume = event.get("volume")
            if isinstance(volume, Mapping):
                for kind in kinds - set(found):
                    if isinstance(volume.get(kind), Mapping):
                        found[kind] = volume[kind]
            if len(found) == len(kinds) or n >= VOLUME_LOOKBACK:
                break
        return found

    def pages_of(self, kind: str) -> list[str]:
        """A few URLs of the pages of ``kind`` read this run (for a report)."""
        return self.findings.urls(kind)

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
        for failed in last["type_failed"]:
            kind = failed.get("kind")
            if kind in known and kind not in read:
                found["type_failed"].append(failed)
                carried.add(kind)
        if carried:
            found["carried"] = sorted(carried)


def blocked_summary(b: Block | None) -> dict[str, Any]:
    """The soft ban that stopped the run, for run_finished (and so `status`)."""
    if b is None:
        return {}
    return {"blocked": {"url": redact_url(b.url), "rule": b.rule, "status": b.status}}


def nothing_extracted(items: Mapping[str, int], expect_empty: bool) -> bool:
    """A run that would drain cleanly but left the workspace without a single item
    (every selector wrong, every record dropped) is not a success unless the spec
    says an empty result is expected (``expect_empty: true``)."""
    return not expect_empty and not sum(items.values())
