"""What one page gives under a spec, field by field, with nothing written anywhere.

``framework preview`` fetches one page the way the crawl would (the job's spider class
in parse-only mode: its settings, headers, ``{env:NAME}`` credentials, robots.txt and
safety middleware; no crawl runtime, so the workspace is never opened) or reads a
saved file, then explains it: per record and field the value, which source of the
fallback list gave it (a later one means the layout changed), what came out empty,
failed its type or broke a rule; and the follow, pagination and sub-tab requests the
page would make. The extraction is the crawl's own (:class:`CompiledKind.parse`); the
explanation comes from running each compiled field once more on the same scopes.

It must not write to the workspace, and nothing it returns carries a resolved
credential (every value is masked back to its ``{env:NAME}`` reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from scrapy.http import TextResponse

from framework.crawl.outcome import hold_reasons
from framework.crawl.page import CompiledJob, PageError
from framework.errors import FrameworkError, UsageError
from framework.extract.fields import FAILED, FOUND, Extraction, FieldExtractor, Scope
from framework.extract.hints import script_data
from framework.extract.patterns import Limits
from framework.settings import default_settings
from framework.spec.models import JobSpec, Render
from framework.spec.template import MissingValue

if TYPE_CHECKING:
    from scrapy.http import Response

__all__ = [
    "FieldTrace",
    "Preview",
    "RecordTrace",
    "explain",
    "fetch",
    "from_file",
    "not_carried",
]


@dataclass
class FieldTrace:
    name: str
    outcome: str  # found | default | empty | failed | carried
    value: Any = None
    source: str | None = None  # the source that gave the value ("css: h1::text")
    source_index: int | None = None  # its place in the fallback list (0: the first)
    required: bool = False
    error: str | None = None  # why the value failed (type, min/max)

    @property
    def fallback(self) -> bool:
        return bool(self.source_index)


@dataclass
class RecordTrace:
    index: int
    fields: list[FieldTrace]
    dedupe_key: str | None = None
    source_id: str | None = None
    stored: bool = False  # whether the crawl would store it as an item
    # the rules it breaks ({"rule", "field", "value"}): the crawl holds it as invalid
    # (stored aside, never shipped) exactly when this is not empty
    held: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # required fields with no value
    errors: list[tuple[str, str]] = field(default_factory=list)  # (field, why), nested too
    subtabs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Preview:
    job: str
    kind: str
    url: str
    origin: str  # "fetched" or the file read
    status: int | None = None
    size: int = 0
    error: str | None = None  # the page could not be read (HTTP error, not JSON ...)
    records: list[RecordTrace] = field(default_factory=list)
    follow: list[dict[str, Any]] = field(default_factory=list)
    next: list[dict[str, Any]] = field(default_factory=list)
    # form submissions (forms:): kind, method, url, body and the values carried on
    forms: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    # the first refused value of each reason (a URL, "<div>", the markup a selector gave)
    refused_first: dict[str, str] = field(default_factory=dict)
    tab_value: Any = None  # a sub-tab kind's value
    each: str | None = None  # the kind's `each` (what finds its records), when it has one
    matched: int = 0  # what `each` matched (a kind with no fields keeps no record of them)
    # whether the kind reads records at all (each, id or fields): a sitemap's, or a
    # page that only links on, has none to miss
    reads_records: bool = True
    # the kinds a follow rule read on this page leads to but found no link to
    follow_empty: list[str] = field(default_factory=list)
    # the kind's `next` selector when it found no next page here (a list's last page
    # has none; a wrong selector has none on any page, and the crawl ends at page 1)
    next_empty: str | None = None
    # a selector for a next-looking link when `next` found none (crawl/nextlink.py)
    next_suspect: str | None = None
    # the list's size as this page declares it (`total:`), when the kind has one
    total: int | None = None
    total_declared: bool = False  # the kind has a `total:` (None above: not found)
    # where the page keeps data in scripts, when `each` found nothing (extract/hints.py)
    script_data: dict[str, list[str]] | None = None

    @property
    def missing_required(self) -> bool:
        return any(r.missing for r in self.records)

    @property
    def each_empty(self) -> bool:
        """The kind's ``each`` matched nothing on a page that could be read."""
        return self.each is not None and not self.matched and not self.error

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for rec, traced in zip(out["records"], self.records, strict=True):
            rec["errors"] = [{"field": f, "error": m} for f, m in traced.errors]
            for f, t in zip(rec["fields"], traced.fields, strict=True):
                f["fallback"] = t.fallback
        out["missing_required"] = self.missing_required
        out["each_empty"] = self.each_empty
        return out


class _Tracing(FieldExtractor):
    """The kind's own extractor that also keeps, per scope, what each field did."""

    __slots__ = ("runs",)

    def __init__(self, inner: FieldExtractor) -> None:
        self._fields = inner._fields
        self.runs: list[list[tuple[Any, int, Any, int]]] = []

    def extract(self, scope: Scope) -> Extraction:
        self.runs.append([(cf, *cf.run(scope)) for cf in self._fields])
        return super().extract(scope)


def kinds_of(spec: JobSpec) -> list[str]:
    job = CompiledJob(spec)
    return [*job.kinds, *job.subtabs]


def check_kind(spec: JobSpec, kind: str | None) -> str:
    """``kind`` when the spec has it (default: the start kind), else a UsageError."""
    known = kinds_of(spec)
    if kind is None:
        return spec.start_kind()
    if kind not in known:
        raise UsageError(f"{spec.name} has no page kind {kind!r} (kinds: {', '.join(known)})")
    return kind


def choose_kind(spec: JobSpec, url: str) -> tuple[str, str]:
    """The kind a page at ``url`` is read as when no ``--kind`` is given, and a line
    saying why: a start URL is the start kind; else the kind the job's follow rules with
    a ``pattern`` lead ``url`` to (one kind; ``deny`` honoured); else the start kind, and
    the line names the other kinds ``--kind`` can give."""
    from framework.extract.patterns import SafeRegex

    start = spec.start_kind()
    if url in spec.start_urls:
        return start, f"read as kind {start!r} (a start URL)"
    found: dict[str, str] = {}  # kind -> the pattern that leads there
    for name, kind in spec.page_kinds().items():
        for rule in kind.follow:
            if rule.pattern is None or rule.to in found:
                continue
            if SafeRegex(rule.pattern).search(url) and not any(
                SafeRegex(d).search(url) for d in rule.deny
            ):
                found[rule.to] = f"{name}.follow pattern {rule.pattern!r}"
    others = ", ".join(k for k in kinds_of(spec))
    if len(found) == 1:
        [(chosen, why)] = found.items()
        return chosen, f"read as kind {chosen!r}: the URL matches {why} (--kind: {others})"
    if found:
        which = ", ".join(sorted(found))
        return start, (
            f"read as the start kind {start!r}: the URL matches the follow patterns of "
            f"several kinds ({which}); --kind chooses one"
        )
    return start, (
        f"read as the start kind {start!r}: no follow pattern of the job matches the URL "
        f"(--kind: {others})"
    )


def explain(
    spec: JobSpec,
    kind: str,
    response: Response,
    *,
    origin: str,
    mask: Any = None,
    carry: Mapping[str, Any] | None = None,
) -> Preview:
    """The preview of ``response`` read as page kind ``kind`` (as the crawl reads it).
    ``carry``: the values the page that links here would carry in (a list row's fields),
    which a page previewed alone does not have."""
    job = CompiledJob(spec)
    job.guard.limits = _limits(spec)
    report = Preview(
        spec.name, kind, response.url, origin, status=response.status, size=len(response.body)
    )

    def refused(value: str, why: str) -> None:  # the first of each reason, to show it
        report.refused_first.setdefault(why, value)

    job.guard.on_refused = refused
    if response.status >= 400:
        report.error = (
            f"HTTP {response.status}: the crawl records an error row and extracts nothing"
        )
        return _masked(report, mask)
    try:
        if kind in job.subtabs:
            report.tab_value = job.subtabs[kind].parse(response)
            return _masked(report, mask)
        compiled = job.kinds[kind]
        report.reads_records = bool(
            compiled.spec.each is not None or compiled.spec.emits or compiled.spec.fields
        )
        tracer = _Tracing(compiled.fields)
        compiled.fields = tracer
        id_tracer = None
        if compiled.id is not None:
            id_tracer = _Tracing(compiled.id)
            compiled.id = id_tracer
        result = compiled.parse(response, dict(carry or {}), 1)
    except PageError as exc:
        report.error = str(exc)
        return _masked(report, mask)
    except MissingValue as exc:  # the crawl's row would have it, carried from its parent
        report.error = not_carried(spec, kind, exc)
        return _masked(report, mask)
    emits = compiled.spec.emits
    each = compiled.spec.each
    single = each is None
    if each is not None:  # as the crawl's each_empty warning names it
        report.each = str(getattr(each, "label", each))
    for i, record in enumerate(result.records):
        traces: list[FieldTrace] = []
        if id_tracer is not None and i < len(id_tracer.runs):
            traces.extend(_traces(id_tracer.runs[i]))
        traces.extend(_traces(tracer.runs[i]))
        own = {t.name for t in traces}
        traces.extend(
            FieldTrace(name, "carried", value)
            for name, value in (carry or {}).items()
            if name not in own
        )
        # the crawl's test (OutcomeBuilder.page_outcome): a kept record with an id that
        # breaks a rule (a field's, `required_any`, an absent `expected`) is held
        kept = record.valid and record.dedupe_key is not None
        held = hold_reasons(record) if kept else []
        report.records.append(
            RecordTrace(
                index=i,
                fields=traces,
                dedupe_key=record.dedupe_key,
                source_id=record.source_id,
                stored=kept and not held,
                held=held,
                missing=list(record.missing),
                errors=list(record.errors),
                subtabs=[
                    {"kind": t.kind, "method": t.method, "url": t.url, "body": t.body}
                    for t in record.subtabs
                ]
                if record.valid
                else [],
            )
        )
        if single and emits and not record.valid:
            report.error = (
                "missing required field(s) "
                + ", ".join(record.missing)
                + ": the crawl records this page as a validation error"
            )
    report.matched = result.matched
    if report.each_empty and isinstance(response, TextResponse) and not compiled.is_json:
        rendered = (compiled.spec.render or spec.render) is Render.PLAYWRIGHT
        found = script_data(response.selector, rendered=rendered)
        if found:
            report.script_data = asdict(found)
    report.follow_empty = sorted(to for to, n in result.follows.items() if not n)
    report.follow = [{"kind": link.kind, "url": link.url} for link in result.links]
    report.next = [{"kind": link.kind, "url": link.url} for link in result.next_pages]
    pg = compiled.spec.pagination
    if pg is not None and pg.next is not None and not result.next_pages:
        report.next_empty = pg.next
    report.next_suspect = result.suspect
    report.total_declared = compiled.spec.total is not None
    report.total = result.total
    report.forms = [
        {"kind": f.kind, "method": f.method, "url": f.url, "body": f.body, "carry": f.carry}
        for f in result.forms
    ]
    report.refused = dict(job.guard.refused)
    return _masked(report, mask)


def not_carried(spec: JobSpec, kind: str, exc: MissingValue, given: str | None = None) -> str:
    """What to say when a template needs a value this page does not extract: in the
    crawl it comes from the page that links here (a list row's fields are carried into
    the pages it leads to), which a page previewed alone lacks. ``given``: how to give
    it (default: preview's ``--carry``)."""
    given = given or f"preview with --carry {exc.name}=VALUE to give it"
    others = [
        name for name, k in spec.page_kinds().items() if name != kind and exc.name in k.fields
    ]
    if not others:
        return f"{exc}; {given}"
    where = ", ".join(f"{name}.fields.{exc.name}" for name in others)
    return (
        f"template {exc.template!r} needs {{{exc.name}}}, which {kind!r} pages do not "
        f"extract: the crawl carries it from the page that links here ({where}); {given}"
    )


def _traces(runs: list[tuple[Any, int, Any, int]]) -> list[FieldTrace]:
    out: list[FieldTrace] = []
    for cf, outcome, value, index in runs:
        trace = FieldTrace(cf.name, "found", required=cf.required)
        if outcome == FOUND:
            if cf._child is not None:  # a nested group: its rows' values
                trace.value = [sub.values for sub in value]
                trace.source = f"each: {cf._each_label}"
            else:
                trace.value = value
                trace.source = cf.sources[index].label
                trace.source_index = index
                broken = cf.rules.check(value, cf.many) if cf.rules is not None else None
                if broken is not None:  # kept, but the crawl would hold the record
                    trace.outcome = "failed"
                    trace.error = (
                        f"breaks rule {broken[0]} ({broken[1]!r}): the record is held as invalid"
                    )
        elif outcome == FAILED:
            trace.outcome = "failed"
            trace.error = str(value)
            trace.source = cf.sources[index].label
            trace.source_index = index
        elif cf.has_default:
            trace.outcome = "default"
            trace.value = cf.default
        else:
            trace.outcome = "empty"
            trace.value = [] if cf.many or cf._child is not None else None
        out.append(trace)
    return out


def _limits(spec: JobSpec) -> Limits:
    s: Mapping[str, Any] = {**default_settings(spec.name), **spec.settings}
    return Limits(
        timeout=float(s["FRAMEWORK_EXTRACT_TIMEOUT"]),
        max_matches=int(s["FRAMEWORK_MAX_MATCHES"]),
        max_chars=int(s["FRAMEWORK_MAX_MATCH_CHARS"]),
        max_item_bytes=int(s["FRAMEWORK_MAX_ITEM_BYTES"]),
    )


def _masked(report: Preview, mask: Any) -> Preview:
    """The report with every resolved credential put back as its reference."""
    if mask is None:
        return report
    report.url = mask(report.url)
    report.error = mask(report.error) if report.error else report.error
    report.tab_value = mask(report.tab_value)
    report.follow = mask(report.follow)
    report.next = mask(report.next)
    report.refused_first = mask(report.refused_first)
    for rec in report.records:
        rec.dedupe_key = mask(rec.dedupe_key)
        rec.source_id = mask(rec.source_id)
        rec.subtabs = mask(rec.subtabs)
        rec.errors = [(f, mask(m)) for f, m in rec.errors]
        rec.held = mask(rec.held)
        for t in rec.fields:
            t.value = mask(t.value)
            t.error = mask(t.error) if t.error else t.error
    return report


# ---------------------------------------------------------------------- input
def from_file(path: Path, url: str) -> Response:
    """A saved page as the response it was (``url`` resolves its relative links)."""
    from scrapy.responsetypes import responsetypes

    try:
        body = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    cls = responsetypes.from_args(filename=str(path), body=body, url=url)
    return cls(url=url, body=body, status=200)


def _absolute(spec: JobSpec, url: str) -> None:
    """A UsageError when ``url`` cannot be requested as written: no scheme (a path, or
    ``host:port/path``: answered with the URL it may have meant), or an http(s) URL
    with no host. Other schemes are the crawl's to refuse, as on any page."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # http://[::1 : a bracket left open
        raise UsageError(f"{url!r} is not a URL; expected http(s)://host/path") from None
    if parts.scheme in ("http", "https"):
        if host:
            return
        raise UsageError(f"{url!r} names no host; expected http(s)://host/path")
    if "://" in url or parts.scheme in ("data", "mailto", "javascript", "tel"):
        return  # file:, ftp:, data:... refused by the crawl's own rules, said there
    first = url.split("/", 1)[0]
    if url.startswith("/") or not any(c in first for c in ".:"):  # a path: on the site
        hint = f"on the job's site: {urljoin(spec.start_urls[0], url)}" if spec.start_urls else ""
    else:  # host[:port]/path
        hint = f"did you mean http://{url}?"
    raise UsageError(
        f"{url!r} is not an absolute URL; expected http(s)://host/path"
        + (f"; {hint}" if hint else "")
    )


def fetch(
    spec: JobSpec,
    spec_path: Path,
    root: Path,
    kind: str,
    url: str,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> Response:
    """One request for ``url`` through the job's own spider, settings and middlewares,
    in parse-only mode (no workspace); the response, or a FrameworkError saying why
    there is none (refused, robots.txt, unreachable)."""
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings

    from framework import scrapy_settings
    from framework.crawl.failures import classify_failure
    from framework.crawl.spider import spider_class

    _absolute(spec, url)
    base = spider_class(spec, spec_path, root / "var")
    got: dict[str, Any] = {}

    class PreviewSpider(base):  # type: ignore[valid-type,misc]
        async def start(self) -> Any:
            request = self.parse_request(kind, url)
            yield request.replace(callback=self.keep, errback=self.failed)

        def keep(self, response: Response) -> None:
            got["response"] = response

        def failed(self, failure: Any) -> None:
            got["failure"] = failure

    settings = Settings()
    settings.setmodule(scrapy_settings, priority="project")
    settings.setdict(
        {"FRAMEWORK_PARSE_ONLY": True, "LOG_LEVEL": "ERROR", **(overrides or {})},
        priority="cmdline",
    )
    process = CrawlerProcess(settings)
    process.crawl(PreviewSpider)
    process.start(install_signal_handlers=True)
    if "response" in got:
        response: Response = got["response"]
        return response
    failure = got.get("failure")
    if failure is None:
        raise FrameworkError(f"no response for {base.secrets.mask(url)}")
    why = failure.value
    if type(why).__name__ == "IgnoreRequest" and "robots" in str(why).lower():
        raise FrameworkError(f"robots.txt forbids {base.secrets.mask(url)}")
    kind_of, note = classify_failure(failure)
    raise FrameworkError(f"could not fetch {base.secrets.mask(url)}: {kind_of}: {note}")
