"""The spider class generated for a job spec (no code written to files).

:func:`spider_class` makes one Scrapy spider class per spec. Each request carries its
workspace row; responses and failures go to :class:`~framework.crawl.runtime.CrawlRuntime`,
which commits the outcome and answers which rows to fetch next and which items to emit.
The spider only turns rows into Scrapy requests and hands back what the runtime says.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import scrapy
from scrapy import signals
from scrapy.exceptions import CloseSpider
from scrapy.http import Request
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from framework.crawl.addresses import address_class_of, policy_of
from framework.crawl.blocking import MIDDLEWARE, MIDDLEWARE_ORDER, Slots
from framework.crawl.handled import Handled
from framework.crawl.outcome import OutcomeBuilder
from framework.crawl.page import SELECTOR_REFUSALS, CompiledJob, job_domains
from framework.crawl.politeness import Abandoned
from framework.crawl.runtime import REASON_FINISHED, CrawlRuntime
from framework.crawl.safety import host_of, shown
from framework.crawl.secrets import Secrets
from framework.crawl.session import REASON_LOGIN_FAILED, Session
from framework.crawl.stopping import SignalStop
from framework.errors import UsageError
from framework.extract.patterns import Limits
from framework.plugins import RequestMeta, load_renderer
from framework.settings import UNDER_PROJECT, UNDER_PROJECT_PRIORITY, default, default_settings
from framework.spec.models import JobSpec
from framework.spec.render import RENDERER, rendered_kinds
from framework.spec.template import MissingValue

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

    from framework.workspace import Row

logger = logging.getLogger(__name__)

# Depth-first bias: finish records (sub-tabs, details) before opening more list pages,
# so an interrupted crawl leaves few half-done records...
PRIORITY_SUBTAB = 20
PRIORITY_EMITTING = 10
PRIORITY_OTHER = 0
# ...but the next page of a paginated kind goes first while the scheduler holds fewer
# than CHAIN_AHEAD requests: list pages are a chain (page k+1 is known only from page
# k), and sent behind the details each one found, the chain, not the CPU, set the pace
# of a crawl in several processes (docs/benchmarks.md, "Several processes"). The bound
# keeps the requests waiting in memory, and the half-done records, few.
PRIORITY_CHAIN = 30
CHAIN_AHEAD = 64


class JobSpider(scrapy.Spider):
    """Base of every generated spider; subclasses set ``spec`` and ``spec_path``."""

    spec: ClassVar[JobSpec]
    spec_path: ClassVar[Path]
    compiled: ClassVar[CompiledJob]
    secrets: ClassVar[Secrets]
    slots: ClassVar[Slots]  # per page kind rate limits (crawl/blocking.py)
    # row kind -> meta of a rendered request; None when the job renders nothing
    render_meta: ClassVar[RequestMeta | None] = None
    runtime: CrawlRuntime
    session: Session | None = None  # the spec's `login:` (crawl/session.py)
    close_reason: str | None = None
    # FRAMEWORK_PARSE_ONLY (`scrapy parse`, `framework preview`): extract, commit nothing
    parse_only: bool = False
    # the job's defaults (of custom_settings) that rank under the project's settings
    # module: the table's defaults the spec and the renderer leave alone
    under_project: ClassVar[frozenset[str]] = frozenset()
    _refusals_told: set[tuple[str, str]]

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        """The job's settings at the spider's priority, but for :attr:`under_project`:
        those go in under the project's settings module, so that the operator's module
        sets any limit the spec leaves out (past the spec's ceilings too;
        framework.settings says the precedence)."""
        custom = dict(cls.custom_settings or {})
        below = {name: custom.pop(name) for name in cls.under_project if name in custom}
        settings.setdict(below, priority=UNDER_PROJECT_PRIORITY)
        settings.setdict(custom, priority="spider")

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> JobSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        s = crawler.settings
        guard = cls.compiled.guard
        try:
            guard.limits = Limits(
                timeout=s.getfloat(
                    "FRAMEWORK_EXTRACT_TIMEOUT", default("FRAMEWORK_EXTRACT_TIMEOUT")
                ),
                max_matches=s.getint("FRAMEWORK_MAX_MATCHES", default("FRAMEWORK_MAX_MATCHES")),
                max_chars=s.getint(
                    "FRAMEWORK_MAX_MATCH_CHARS", default("FRAMEWORK_MAX_MATCH_CHARS")
                ),
                max_item_bytes=s.getint(
                    "FRAMEWORK_MAX_ITEM_BYTES", default("FRAMEWORK_MAX_ITEM_BYTES")
                ),
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        guard.on_refused = spider._on_refused
        guard.policy = policy_of(crawler)  # resolves the start hosts, once per crawl
        spider._refusals_told = set()
        if crawler.settings.getbool("FRAMEWORK_PARSE_ONLY", default("FRAMEWORK_PARSE_ONLY")):
            # set by `scrapy parse` (framework.scrapy_commands) and `framework preview`:
            # no runtime, so the workspace is never opened and no run is recorded
            spider.parse_only = True
            spider.session = spider._new_session(crawler, lambda *a, **k: None, [])
            return spider
        fresh = kwargs.get("fresh")  # `-a fresh=1` on `scrapy crawl`
        spider.runtime = CrawlRuntime.from_crawler(
            crawler,
            cls.compiled,
            cls.spec_path,
            fresh=None if fresh is None else str(fresh).lower() not in ("0", "", "false", "no"),
        )
        crawler.signals.connect(spider._on_closed, signal=signals.spider_closed)
        spider.session = spider._new_session(
            crawler, spider.runtime.event, [spider.runtime.secrets]
        )
        spider.runtime.group.may_wait = spider._may_wait
        return spider

    def _may_wait(self, work: bool, waiting: int) -> bool:
        """Whether a commit group of ``waiting`` outcomes may wait for more: only while
        requests are in flight or other responses are being handled (else none can
        join), and, when the group holds rows it found (``work``), only while the
        scheduler has a full round of requests for the downloader meanwhile (else the
        downloader would idle for them)."""
        engine = self.crawler.engine
        if engine is None:
            return False
        slot = engine.scraper.slot
        # the scraper's active responses include the ones waiting in the group
        if not engine.downloader.active and not (slot is not None and len(slot.active) > waiting):
            return False
        if not work:
            return True
        scheduler: Any = engine.scheduler
        return scheduler is not None and len(scheduler) >= engine.downloader.total_concurrency

    def _backlog_short(self) -> bool:
        """Whether the scheduler holds fewer than ``CHAIN_AHEAD`` requests."""
        engine = self.crawler.engine
        scheduler: Any = engine.scheduler if engine is not None else None
        return scheduler is None or len(scheduler) < CHAIN_AHEAD

    def _on_refused(self, url: str, why: str) -> None:
        """A discovered link that will not become a row (another scheme, another host,
        a selected element or value that is not a link): said once per scheme, host or
        element, counted always (``links_refused`` at the end)."""
        if why in SELECTOR_REFUSALS:
            target = url if why == "not_a_link" else ""
        else:
            target = url.partition(":")[0].lower() if why == "scheme" else host_of(url)
        if (why, target) in self._refusals_told:
            return
        self._refusals_told.add((why, target))
        if why in SELECTOR_REFUSALS:  # the spec's mistake, not the site's: a warning
            logger.warning(
                "a follow or next selector selected %s (first: %s); not requested, counted",
                SELECTOR_REFUSALS[why].format(target=target),
                shown(url),
            )
        else:
            what = {
                "scheme": f"scheme {target!r}",
                "userinfo": f"URLs with user:password@ at {target!r}",
                "private_target": f"the {address_class_of(target)} address {target!r}",
            }.get(why, f"off-site host {target!r}")
            logger.info(
                "refused links to %s (first: %s); they are counted, not followed", what, shown(url)
            )
        if not self.parse_only:
            self.runtime.event("link_refused", why=why, target=target, url=shown(url))

    # ------------------------------------------------------------------ requests
    async def start(self) -> AsyncIterator[Any]:
        if self.parse_only:  # a dry run of the start pages (`scrapy parse` brings its own)
            for url in self.spec.start_urls:
                yield self.parse_request(self.compiled.start_kind, url)
            return
        self.runtime.heap.freeze()  # start-up is done: what it built lives as long as the run
        # the login comes before any other request, and before any row is touched
        if self.session is not None and not await self.session.start():
            if self.session.failed is None:
                return  # stopping (a signal) while logging in: the rows wait
            self.runtime.stop_reason = REASON_LOGIN_FAILED
            raise CloseSpider(REASON_LOGIN_FAILED)
        if self.runtime.claiming:  # one of `--processes N`: rows by lease (workers.py)
            async for row in self.runtime.claimed_rows():
                request = self._request(row)
                if request is None:
                    break  # --max-requests reached: the rest stay pending
                yield request
            return
        for row in self.runtime.start_rows():
            request = self._request(row)
            if request is None:
                break  # --max-requests reached: the rest stay pending for the next run
            yield request

    def _new_session(
        self, crawler: Crawler, event: Callable[..., None], masks: list[Secrets]
    ) -> Session | None:
        """The spec's ``login:`` (crawl/session.py); a preview logs in too."""
        login = self.spec.login
        if login is None:
            return None
        return Session(
            login,
            start_url=self.spec.start_urls[0],
            secrets=self.secrets,
            headers=self.spec.headers,
            crawler=crawler,
            event=event,
            stop=self._stop_for_session,
            masks=masks,
            limits=self.compiled.guard.limits,
        )

    def _stop_for_session(self, reason: str) -> None:
        """A session lost mid-crawl (a login that failed, logins that kept expiring):
        stop now; the requests waiting for it are dropped unsent, their rows pending."""
        runtime = getattr(self, "runtime", None)  # none in a preview
        if runtime is not None and runtime.stop_reason is None:
            runtime.stop_reason = reason
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason=reason))

    def _request(self, row: Row) -> Request | None:
        if not self.runtime.may_issue():
            return None
        headers: dict[str, str] = {}
        if row.body_type == "form":
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif row.body_type == "json":
            headers["Content-Type"] = "application/json"
        if row.kind in self.compiled.subtabs:
            priority = PRIORITY_SUBTAB
        elif self.compiled.kinds[row.kind].pagination is not None and self._backlog_short():
            priority = PRIORITY_CHAIN
        elif self.compiled.kinds[row.kind].spec.emits:
            priority = PRIORITY_EMITTING
        else:
            priority = PRIORITY_OTHER
        if row.attempts:
            priority -= 1  # a retry waits behind fresh work, as Scrapy's own retries do
        meta: dict[str, Any] = {"fw_row": row, **self.slots.meta(row.kind)}
        if self.render_meta is not None:
            meta.update(self.render_meta(row.kind))  # the renderer plugin's (playwright)
        until = self.runtime.not_before_for(row)  # Retry-After, or the retry's backoff
        if until is not None:
            meta["fw_not_before"] = until
        url, body, headers = self.secrets.resolve(row, headers)  # {env:NAME} -> values
        return Request(
            url,
            method=row.method,
            body=body,
            headers=headers or None,
            callback=self._on_response,
            errback=self._on_failure,
            priority=priority,
            dont_filter=True,  # the rows are the dedupe
            meta=meta,
        )

    # ----------------------------------------------------------------- responses
    def _on_response(self, response: Response) -> Iterator[Any] | AsyncIterator[Any]:
        row: Row = response.meta["fw_row"]
        stop = SignalStop.of(self.crawler)
        if stop is not None and stop.past_grace():
            # Stopping, and past the grace: reading this page could take the whole
            # extract budget, and every page downloaded before the stop would too.
            # Nothing of it is committed, so its row stays pending for the next run.
            return iter(())
        return self._after_commit(self.runtime.on_response(row, response))

    def _on_failure(self, failure: Failure) -> Iterator[Any] | AsyncIterator[Any]:
        if failure.check(Abandoned):
            return iter(())  # never sent: no attempt to record, the row stays pending
        request = failure.request  # type: ignore[attr-defined]
        row: Row = request.meta["fw_row"]
        return self._after_commit(self.runtime.on_failure(row, failure))

    def _after_commit(self, got: Handled | Deferred[Handled]) -> Iterator[Any] | AsyncIterator[Any]:
        """What the runtime hands back, once the outcome is committed: at once when its
        group was committed already, else an async iterator that waits for the group
        (Scrapy awaits callbacks that are async generators)."""
        if isinstance(got, Handled):
            return self._hand_back(got)
        return self._wait_commit(got)

    async def _wait_commit(self, pending: Deferred[Handled]) -> AsyncIterator[Any]:
        handled = await maybe_deferred_to_future(pending)
        for out in self._hand_back(handled):
            yield out

    def _hand_back(self, handled: Handled) -> Iterator[Any]:
        yield from handled.items
        for row in handled.rows:
            request = self._request(row)
            if request is not None:
                yield request
        if handled.stop is not None and self.runtime.stop_reason is None:
            self.runtime.stop_reason = handled.stop
            # Scrapy's public way to stop from a callback (or errback): after this
            # page's items and requests above, which are already committed.
            raise CloseSpider(handled.stop)

    # ------------------------------------------------------------ scrapy parse
    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """What a page gives, committed nowhere (``scrapy parse --spider JOB URL``).

        The page kind is the request's (``fw_kind`` meta), else ``-a kind=K``, else the
        job's start kind. Records the crawl would store come back as items (a dropped
        one is a warning), the follow, pagination and sub-tab links as requests to this
        callback (so ``--depth 2`` parses the next pages as their kinds); a sub-tab
        kind gives one item, ``{"tab": kind, "value": ...}``. Nothing shown carries a
        resolved ``{env:NAME}`` value."""
        kind = str(
            response.meta.get("fw_kind") or getattr(self, "kind", "") or self.compiled.start_kind
        )
        mask = self.secrets.mask_value
        if response.status >= 400:  # the crawl records an error row, extracting nothing
            logger.warning(
                "HTTP %d from %s: nothing extracted", response.status, shown(response.url)
            )
            return
        if kind in self.compiled.subtabs:
            yield mask({"tab": kind, "value": self.compiled.subtabs[kind].parse(response)})
            return
        known = ", ".join([*self.compiled.kinds, *self.compiled.subtabs])
        if kind not in self.compiled.kinds:
            raise UsageError(f"{self.name} has no page kind {kind!r} (kinds: {known})")
        page = int(response.meta.get("fw_page", 1))
        compiled = self.compiled.kinds[kind]
        try:
            result = compiled.parse(response, response.meta.get("fw_carry", {}), page)
        except MissingValue as exc:  # a page parsed alone lacks what its parent carries
            from framework.crawl.preview import not_carried

            carry = json.dumps({"fw_carry": {exc.name: "VALUE"}})
            given = f"scrapy parse --meta '{carry}' gives it"
            logger.error("%s", not_carried(self.compiled.spec, kind, exc, given))
            return
        each = compiled.spec.each
        if not result.matched and (each is not None or compiled.spec.emits):
            # said as `framework preview` says it: Scrapy's own output is two empty lists
            # (a kind that only links on, with neither, has no record to find)
            logger.warning(
                "no records at %s read as kind %r%s; -a kind=K reads it as another (%s)",
                shown(response.url),
                kind,
                f": each ({getattr(each, 'label', each)}) matched nothing" if each else "",
                known,
            )
        for record in result.records:
            if not record.valid:
                logger.warning(
                    "record dropped at %s: missing required field(s) %s",
                    shown(response.url),
                    ", ".join(record.missing),
                )
                continue
            if record.dedupe_key is None:
                continue  # its values travel on with its links, as in the crawl
            yield mask(
                {
                    "dedupe_key": record.dedupe_key,
                    "source_type": self.spec.source_type,
                    "source_id": record.source_id or "",
                    **record.values,
                }
            )
            for tab in record.subtabs:
                yield self.parse_request(tab.kind, tab.url, tab.method, tab.body, tab.body_type)
        for link in result.links:
            yield self.parse_request(link.kind, link.url, carry=link.carry)
        asked: tuple[str, str | None, str | None] | None = response.meta.get("fw_request")
        # the crawl's test (OutcomeBuilder.as_requested): a `param` pagination repeats
        # the page's own request (method, body, body_type: masked) unless the page came
        # by a redirect
        again: tuple[str, str | None, str | None] = ("GET", None, None)
        if asked and OutcomeBuilder(self.compiled, self.secrets).as_requested(
            response.meta["fw_url"], response.url
        ):
            again = asked
        for link in result.next_pages:
            how = again if link.same_request else ("GET", None, None)
            yield self.parse_request(link.kind, link.url, *how, carry=link.carry, page=page + 1)

    def parse_request(
        self,
        kind: str,
        url: str,
        method: str = "GET",
        body: str | None = None,
        body_type: str | None = None,
        *,
        carry: dict[str, Any] | None = None,
        page: int = 1,
    ) -> Request:
        """A request to :meth:`parse`, sent as the crawl sends a row's (``{env:NAME}``
        resolved, the job's headers), shown with its references masked back."""
        headers: dict[str, str] = {}
        if body_type == "form":
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body_type == "json":
            headers["Content-Type"] = "application/json"
        sent_url, sent_body, sent_headers = self.secrets.resolve_request(
            kind, url, body, body_type, headers
        )
        meta: dict[str, Any] = {
            "fw_kind": kind,
            "fw_carry": carry or {},
            "fw_page": page,
            "fw_request": (method, body, body_type),
            "fw_url": url,  # as the row would keep it: what as_requested compares
        }
        if self.render_meta is not None:
            meta.update(self.render_meta(kind))
        request = _MaskedRequest(
            sent_url,
            method=method,
            body=sent_body,
            headers=sent_headers or None,
            callback=self.parse,
            dont_filter=True,
            meta=meta,
        )
        request.masker = self.secrets.mask
        return request

    def _on_closed(self, spider: scrapy.Spider, reason: str) -> None:
        if spider is not self:
            return
        refused = dict(self.compiled.guard.refused)
        if refused:
            self.runtime.event("links_refused", counts=refused)
            for why, n in refused.items():
                self.crawler.stats.set_value(f"framework/links_refused/{why}", n)
        final = self.runtime.close(reason)
        type(self).close_reason = final
        stats = self.crawler.stats
        stats.set_value("framework/close_reason", final)
        for name, value in vars(self.runtime.counters).items():
            if isinstance(value, int):
                stats.set_value(f"framework/{name}", value)
        for kind, n in self.runtime.counters.by_error.items():
            stats.set_value(f"framework/errors/{kind}", n)
        group = self.runtime.group
        stats.set_value("framework/commit_group_outcomes", group.entries)
        for why, n in group.flushes.items():
            stats.set_value(f"framework/commit_groups/{why}", n)
        logger.info("job %s closed: %s", self.name, final)
        self._feed_of_this_run(stats.get_value("item_scraped_count", 0))

    def _feed_of_this_run(self, sent: int) -> None:
        """An -o/-O feed holds the records this run completed, not the workspace's
        items: on a finished workspace it is empty. Said when it holds fewer."""
        if not self.crawler.settings.getdict("FEEDS"):
            return
        stored = self.runtime.items_at_end.get("complete", 0)
        if stored > sent:
            logger.warning(
                "the -o/-O feed holds the %d records this run completed; the workspace "
                "holds %d complete items: `framework export %s -o FILE` writes them all",
                sent,
                stored,
                self.name,
            )


def spider_class(spec: JobSpec, spec_path: Path, workspace_root: Path) -> type[JobSpider]:
    """A spider class for ``spec``; its default JOBDIR is ``<workspace_root>/<name>``."""
    # Rendering (issue 11): a renderer plugin, found through an entry point, gives the
    # settings of a job that renders and the meta of each rendered request.
    render_settings, render_meta = _rendering(spec)
    settings = default_settings(spec.name)
    settings["FRAMEWORK_MAX_ATTEMPTS"] = spec.max_attempts
    settings["JOBDIR"] = str(workspace_root / spec.name)
    _merge(settings, render_settings)  # the spec's own settings win over the renderer's
    slots = Slots(spec)
    if slots:  # per page kind rate limits: a gate of their own (crawl/blocking.py)
        settings["DOWNLOADER_MIDDLEWARES"] = {
            **settings["DOWNLOADER_MIDDLEWARES"],
            MIDDLEWARE: MIDDLEWARE_ORDER,
        }
    settings.update(spec.settings)
    under = UNDER_PROJECT - set(spec.settings) - set(render_settings)
    if "max_attempts" in spec.model_fields_set:  # FRAMEWORK_MAX_ATTEMPTS, said in the spec
        under -= {"FRAMEWORK_MAX_ATTEMPTS"}
    attrs: dict[str, Any] = {
        "name": spec.name,
        "spec": spec,
        "spec_path": spec_path,
        "compiled": CompiledJob(spec),
        "secrets": Secrets.from_spec(spec, where=str(spec_path)),  # before any request
        "slots": slots,
        "render_meta": None if render_meta is None else staticmethod(render_meta),
        "custom_settings": settings,
        "under_project": frozenset(under),
        # enforced on every request and redirect hop by framework.crawl.safety
        "allowed_domains": job_domains(spec),
        "__module__": __name__,
    }
    return type(f"{_camel(spec.name)}Spider", (JobSpider,), attrs)


def _rendering(spec: JobSpec) -> tuple[dict[str, Any], RequestMeta | None]:
    """The renderer's settings and request meta, or nothing when no page renders."""
    rendered = rendered_kinds(spec)
    if not rendered:
        return {}, None
    renderer = load_renderer(RENDERER, spec.settings)
    return renderer.scrapy_settings(spec.settings), renderer.request_meta(rendered)


class _MaskedRequest(Request):
    """A request whose printed form (``scrapy parse`` prints requests) names its
    ``{env:NAME}`` references, never their values."""

    masker: Callable[[str], str] | None = None

    def __repr__(self) -> str:
        text = super().__repr__()
        return self.masker(text) if self.masker is not None else text

    __str__ = __repr__


def _merge(settings: dict[str, Any], extra: dict[str, Any]) -> None:
    """``extra`` over ``settings``; mappings (DOWNLOAD_HANDLERS) are merged key by key, so
    the renderer's http handlers keep the defaults' refusal of file:, data:, ftp: ..."""
    for key, value in extra.items():
        base = settings.get(key)
        if isinstance(base, dict) and isinstance(value, dict):
            settings[key] = {**base, **value}
        else:
            settings[key] = value


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.replace("-", "_").split("_") if p)


__all__ = ["REASON_FINISHED", "JobSpider", "spider_class"]
