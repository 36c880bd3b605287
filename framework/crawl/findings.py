"""Found-nothing warnings and fill rates of one run (a crawl or a reparse).

A selector that matches nothing is not an error of the page, so nothing else would
say it: this module counts, per page kind, the pages read, the records kept and, per
field, how many of them hold a value, and notes the ways a spec can come back empty:

``each_empty``
    a page whose ``each`` matched nothing (the last page of a "until empty"
    pagination is the expected end, not a finding);
``records_dropped``
    records dropped for a missing required field;
``page_all_dropped``
    an ``each`` page whose records were all dropped (the row is ok: its links and
    next pages were read, but it gave nothing);
``kind_empty``
    a kind that emits records, whose pages this run gave none (at the end); also a
    sub-tab with ``each`` whose every page this run gave no row;
``field_empty``
    a field empty in every record of its kind this run (at the end); a sub-tab's rows
    are records of the sub-tab's kind (``detail.hearings``), so a tab selector that
    matches nothing in any row is said as well, though the detail item still has the
    tab (a list of rows of nulls);
``follow_empty``
    a ``follow`` rule (of a kind, to a kind) that found no link on any page of its
    kind read this run (at the end): a wrong link selector or pattern, or a sitemap
    that lists nothing, would otherwise end the crawl at its first pages in silence;
``type_failed``
    values of a field that failed their type (a ``ConversionError``: ``Record.errors``),
    counted over every record of every page read, kept, held or dropped, with the
    first URLs and one failure's message (the raw text it quotes). Every such field is
    in the run's ``type_failed`` list, which ``framework status`` shows beside the fill
    rate; one that failed on more than ``TYPE_FAILED_SHARE`` of its kind's records is
    a warning as well (at the end). A value that converted but breaks a rule is not
    counted here: its record is held, and counted as ``items_invalid`` (report.py).

A 100,000-page crawl must not write 100,000 warnings: each finding (its name, kind
and field) is logged and recorded as one event the first time, then only counted; the
run's summary (``run_finished`` / ``reparse_finished``) carries every finding with its
count and its first few URLs, and the fill counts behind ``framework status``'s fill
rates. It writes nothing itself: the caller hands it a logger and an event function.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from framework.redact import REDACTED, is_secret_key, redact_url

EXAMPLES_MAX = 3  # URLs kept per finding
FOUND_NOTHING_EVENT = "found_nothing"
# A field whose values fail their type in more than this share of its kind's records
# is a warning in the log. A few odd values ("N/A", "TBA") are the site's data, and
# status shows their count beside the fill rate whatever the share; past one record in
# ten a format, a locale or a type that does not fit the site is the likelier cause.
# A constant, not a setting: like EXAMPLES_MAX it shapes the report, never the harvest
# or the exit code, and the reparse (which reads no Scrapy setting) must judge alike.
TYPE_FAILED_SHARE = 0.10
TEXT_MAX = 200  # characters of a failure's message kept as its sample
_ROW_INDEX = re.compile(r"\[\d+\]")


def filled(value: Any) -> bool:
    """Whether a field holds a value: not null, "", [] or {} (a 0 or false is one)."""
    return value is not None and value != "" and value != [] and value != {}


@dataclass
class Finding:
    what: str
    kind: str
    fld: str | None = None  # "field" in its dict form
    detail: str | None = None
    count: int = 0
    examples: list[str] = field(default_factory=list)
    # type_failed: one failure's message (the raw text it quotes, masked) and the
    # records of the kind read this run (what the count is a share of)
    text: str | None = None
    records: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"what": self.what, "kind": self.kind}
        if self.fld is not None:
            out["field"] = self.fld
        if self.detail is not None:
            out["detail"] = self.detail
        out["count"] = self.count
        if self.records is not None:
            out["records"] = self.records
        out["examples"] = list(self.examples)
        if self.text is not None:
            out["text"] = self.text
        return out


@dataclass
class _KindFill:
    emits: bool = False
    pages: int = 0
    records: int = 0
    fields: Counter[str] = field(default_factory=Counter)
    seen: set[str] = field(default_factory=set)  # every field name met
    urls: list[str] = field(default_factory=list)  # first pages read, as examples
    # per follow target: pages that read a rule to it, and the links those found
    follow_pages: Counter[str] = field(default_factory=Counter)
    follow_links: Counter[str] = field(default_factory=Counter)
    each: bool = False  # a sub-tab's: its value is a list of rows


_MESSAGES = {
    "each_empty": "`each` of {kind} matched nothing",
    "records_dropped": "{kind} records dropped: missing required field(s) {detail}",
    "page_all_dropped": "every record of a {kind} page was dropped (missing required fields)",
    "kind_empty": "{kind} pages gave no records this run",
    "field_empty": "field {field!r} of {kind} is empty in every record this run",
    "follow_empty": "`follow` of {kind} {detail} gave no link to follow on any page this run",
    # framework/crawl/nextlink.py, completeness.py
    "pagination_suspect": "pagination of {kind} found no next page on a page with a link "
    "that looks like one (try `{detail}`)",
    "total_mismatch": "{kind} list does not hold the total its pages declare: {detail}",
    "type_failed": "field {field!r} of {kind} failed its type",
}


class Findings:
    def __init__(
        self,
        event: Callable[..., None],
        log: logging.Logger,
        *,
        type_failed_share: float = TYPE_FAILED_SHARE,
    ) -> None:
        self._event = event
        self._log = log
        self._found: dict[tuple[str, str, str | None, str | None], Finding] = {}
        self._kinds: dict[str, _KindFill] = {}
        self._tabs: dict[str, _KindFill] = {}  # sub-tab kinds with fields, by kind
        self._share = type_failed_share
        # type failures by (kind, field), and every record read per kind (kept, held
        # or dropped: a failed required value drops its record, and still counts)
        self._failed: dict[tuple[str, str], Finding] = {}
        self._checked: Counter[str] = Counter()

    # ------------------------------------------------------------------- pages
    def page(
        self,
        kind: str,
        url: str,
        *,
        emits: bool,
        each: bool,
        values: Iterable[Mapping[str, Any]],
        dropped: int,
        end_of_pages: bool,
        follows: Mapping[str, int] | None = None,
        matched: int | None = None,
    ) -> None:
        """One page of ``kind`` read: the values of the records it kept (the items of
        an emitting kind) and how many it dropped. ``end_of_pages``: an empty page is
        the expected end of its list. ``follows``: the links it found per follow
        target, for the rules it read (``PageResult.follows``). ``matched``: what its
        ``each`` matched (``PageResult.matched``; else the records kept and dropped): a
        list kind with no fields keeps no record, yet an ``each`` of it that matches
        nothing finds nothing to follow."""
        fill = self._kinds.get(kind)
        if fill is None:  # not setdefault: a _KindFill (three Counters) per page is waste
            fill = self._kinds[kind] = _KindFill()
        fill.pages += 1
        if follows:
            fill.follow_pages.update(follows.keys())
            fill.follow_links.update(follows)
        fill.emits = emits
        if len(fill.urls) < EXAMPLES_MAX:
            fill.urls.append(url)
        kept = 0
        for record in values:
            kept += 1
            if emits:  # fill rates are of the records that become items
                fill.seen.update(record)
                fill.fields.update(k for k, v in record.items() if filled(v))
        if emits:
            fill.records += kept
        found = matched if matched is not None else kept + dropped
        if each and found == 0 and not end_of_pages:
            self.note("each_empty", kind, url)
        elif each and dropped and kept == 0:
            self.note("page_all_dropped", kind, url)

    def tab(self, kind: str, url: str, value: Any, *, each: bool) -> None:
        """One page of sub-tab ``kind`` (one with fields) read: its value, a list of
        row mappings (``each``) or one mapping. Its fill counts stay out of the fill
        rates (those are of items); they feed the end-of-run findings only."""
        fill = self._tabs.get(kind)
        if fill is None:
            fill = self._tabs[kind] = _KindFill(each=each)
        fill.pages += 1
        if len(fill.urls) < EXAMPLES_MAX:
            fill.urls.append(url)
        for row in value if isinstance(value, list) else [value]:
            if isinstance(row, Mapping):
                fill.records += 1
                fill.seen.update(row)
                fill.fields.update(k for k, v in row.items() if filled(v))

    def type_failures(
        self, kind: str, url: str, records: int, errors: Iterable[tuple[str, str]]
    ) -> None:
        """One page of ``kind`` read: how many records it gave (kept, held or dropped)
        and the values of them that failed their type, ``(field, message)`` as
        ``Record.errors`` has them (a nested group's ``group[2].field`` counts as
        ``group[].field``: its rows are one field). Each (kind, field) is told once, as
        an event and an info line; whether it is a warning is judged at the end."""
        self._checked[kind] += records
        for name, message in errors:
            fld = _ROW_INDEX.sub("[]", name) if "[" in name else name
            found = self._failed.get((kind, fld))
            if found is None:
                text = _sample(fld, message)
                found = self._failed[(kind, fld)] = Finding("type_failed", kind, fld, text=text)
                self._log.info(
                    "%s: %s, e.g. at %s (said once; counted in the run's summary and "
                    "`framework status`, a warning past %d%% of the records)",
                    _MESSAGES["type_failed"].format(kind=kind, field=fld, detail=None),
                    text,
                    redact_url(url),
                    round(100 * self._share),
                )
                self._event(
                    FOUND_NOTHING_EVENT,
                    what="type_failed",
                    kind=kind,
                    field=fld,
                    url=url,
                    text=text,
                )
            found.count += 1
            if len(found.examples) < EXAMPLES_MAX and url not in found.examples:
                found.examples.append(url)

    def note(
        self, what: str, kind: str, url: str, *, fld: str | None = None, detail: str | None = None
    ) -> bool:
        """Count a finding; log it and record its event the first time only (True)."""
        key = (what, kind, fld, detail)
        found = self._found.get(key)
        first = found is None
        if found is None:
            found = self._found[key] = Finding(what, kind, fld, detail)
        found.count += 1
        if len(found.examples) < EXAMPLES_MAX:
            found.examples.append(url)
        if first:
            self._log.warning(
                "%s, e.g. at %s (said once; counted in the run's summary and `framework status`)",
                _MESSAGES[what].format(kind=kind, field=fld, detail=detail),
                redact_url(url),
            )
            self._event(
                FOUND_NOTHING_EVENT,
                what=what,
                kind=kind,
                **({"field": fld} if fld is not None else {}),
                **({"detail": detail} if detail is not None else {}),
                url=url,
            )
        return first

    # --------------------------------------------------------------------- end
    def finish(self, emitting: Iterable[str]) -> None:
        """The end-of-run findings: follow rules that found no link, emitting kinds that
        gave nothing, fields never filled."""
        for kind, read in sorted(self._kinds.items()):
            for to in sorted(read.follow_pages):
                if read.follow_links[to] == 0:
                    pages = read.follow_pages[to]
                    self._announce("follow_empty", kind, None, pages, read.urls, f"to {to}")
        for kind in emitting:
            fill = self._kinds.get(kind)
            if fill is None or not fill.pages:
                continue
            if fill.records == 0:
                self._announce("kind_empty", kind, None, fill.pages, fill.urls)
                continue
            for name in sorted(fill.seen):
                if fill.fields[name] == 0:
                    self._announce("field_empty", kind, name, fill.records, fill.urls)
        for kind, tab in sorted(self._tabs.items()):
            if tab.records == 0:
                if tab.each:  # a tab of one mapping always has its record
                    self._announce("kind_empty", kind, None, tab.pages, tab.urls)
                continue
            for name in sorted(tab.seen):
                if tab.fields[name] == 0:
                    self._announce("field_empty", kind, name, tab.records, tab.urls)
        for (kind, fld), failed in sorted(self._failed.items()):
            records = failed.records = self._checked[kind]
            if failed.count <= self._share * records:
                continue  # counted in type_failed(), not a warning
            self._found[("type_failed", kind, fld, None)] = failed
            self._log.warning(
                "%s in %d of %d records (%d%%; a warning past %d%%), e.g. %s at %s: a "
                "format, a locale or a type that does not fit the site?",
                _MESSAGES["type_failed"].format(kind=kind, field=fld, detail=None),
                failed.count,
                records,
                round(100 * failed.count / records) if records else 100,
                round(100 * self._share),
                failed.text,
                redact_url(failed.examples[0]),
            )

    def _announce(
        self,
        what: str,
        kind: str,
        fld: str | None,
        count: int,
        urls: list[str],
        detail: str | None = None,
    ) -> None:
        # count: the pages (kind_empty, follow_empty) or records (field_empty) that
        # gave nothing
        self._found[(what, kind, fld, detail)] = Finding(what, kind, fld, detail, count, list(urls))
        self._log.warning(
            "%s (%d %s), e.g. at %s",
            _MESSAGES[what].format(kind=kind, field=fld, detail=detail),
            count,
            ("record" if what == "field_empty" else "page") + ("" if count == 1 else "s"),
            redact_url(urls[0]),
        )
        self._event(
            FOUND_NOTHING_EVENT,
            what=what,
            kind=kind,
            **({"field": fld} if fld is not None else {}),
            **({"detail": detail} if detail is not None else {}),
            count=count,
            examples=list(urls),
        )

    # ---------------------------------------------------------------- summary
    def warnings(self) -> list[dict[str, Any]]:
        return [f.as_dict() for f in self._found.values()]

    def type_failed(self) -> list[dict[str, Any]]:
        """Every field whose values failed their type this run, over the share or not:
        kind, field, the failed values (``count``), the kind's records read,
        ``examples`` (URLs) and one failure's ``text``."""
        out = []
        for (kind, _), failed in sorted(self._failed.items()):
            failed.records = self._checked[kind]
            out.append(failed.as_dict())
        return out

    def type_failed_count(self) -> int:
        """The values that failed their type this run, all fields together."""
        return sum(f.count for f in self._failed.values())

    def fill(self) -> dict[str, dict[str, Any]]:
        """Per emitting kind read this run: pages, records kept, and per field the
        records holding a value (the fill rate is that over ``records``)."""
        return {
            kind: {
                "pages": f.pages,
                "records": f.records,
                "fields": {name: f.fields[name] for name in sorted(f.seen)},
            }
            for kind, f in sorted(self._kinds.items())
            if f.emits
        }

    def volume(self) -> dict[str, dict[str, int]]:
        """Per page kind read this run: its pages, and the records it kept (0 for a
        kind whose records are not items): what a whole crawl is compared with."""
        kinds = sorted(self._kinds.items())
        return {kind: {"pages": f.pages, "records": f.records} for kind, f in kinds}

    def urls(self, kind: str) -> list[str]:
        """The first few URLs of ``kind`` read this run."""
        fill = self._kinds.get(kind)
        return list(fill.urls) if fill is not None else []

    def kinds_read(self) -> set[str]:
        """The page and sub-tab kinds this run read a page of."""
        return set(self._kinds) | set(self._tabs)

    def records(self) -> int:
        return sum(f.records for f in self._kinds.values())


def _sample(fld: str, message: str) -> str:
    """A failure's message as the run's summary keeps it: under a field named like a
    secret (redact.py's names: ``token``, ``api_key`` ...) the raw text it quotes is
    masked whole, since the message would carry the value out of the item; a URL's
    credentials as everywhere. The crawl's events and log mask ``{env:...}`` values
    on their way out, the reparse's printed summary in reparse_run.py."""
    if is_secret_key(fld.rsplit(".", 1)[-1]):
        return f"{message.split(':', 1)[0]}: {REDACTED}"
    text = redact_url(message)
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 1] + "\u2026"


__all__ = [
    "EXAMPLES_MAX",
    "FOUND_NOTHING_EVENT",
    "TYPE_FAILED_SHARE",
    "Finding",
    "Findings",
    "filled",
]
