"""Typed models of a job spec: the contract between YAML and the spider.

These models own the *shape* of a spec: every key, its type, its default. They forbid
unknown keys. This module holds page kinds and the job; a field and its value types are
:mod:`framework.spec.values`, forms and the login :mod:`framework.spec.forms` (both
importable from here too). Cross-field checks (selectors compile, templates name known
fields, page kinds named by ``to:`` exist) live in :mod:`framework.spec.validate`;
turning YAML into these models with ``file:line:col`` errors lives in
:mod:`framework.spec.load`. Nothing here does I/O.

Two ways to write pages:

* the short form, ``list:`` and ``detail:``, for the common list -> detail -> sub-tabs
  job; :func:`JobSpec.page_kinds` expands it into the general form;
* the general form, ``pages:``, named page kinds that chain to any depth through
  ``follow`` rules (``to: <kind>``) and pagination.
"""

from __future__ import annotations

import re
from datetime import date
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from framework.extract.fields import looks_like_xpath
from framework.project import JOB_NAME_RE
from framework.spec.forms import FormField as FormField  # X as X: re-exported
from framework.spec.forms import FormSpec as FormSpec
from framework.spec.forms import LoginSpec as LoginSpec
from framework.spec.forms import LoginSuccess as LoginSuccess
from framework.spec.forms import LoginToken as LoginToken
from framework.spec.forms import SessionExpired as SessionExpired
from framework.spec.render import RenderOptions  # `browser:` (owned by F, issue 11)
from framework.spec.values import SOURCE_KEYS as SOURCE_KEYS
from framework.spec.values import Embedded as Embedded
from framework.spec.values import FieldSpec as FieldSpec
from framework.spec.values import Languages
from framework.spec.values import Records as Records
from framework.spec.values import Replace as Replace
from framework.spec.values import Source as Source
from framework.spec.values import StrictModel as _Strict
from framework.spec.values import ValueType as ValueType

# The canonical prefix of every dedupe key: lowercase, no separator that could collide.
SOURCE_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
KIND_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class _OneOrMany(_Strict):
    """``blocked:`` as one rule or a list of them, ``required_any:`` as one group or a
    list of groups, wherever a model has them."""

    @field_validator("blocked", mode="before", check_fields=False)
    @classmethod
    def _blocked(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("required_any", mode="before", check_fields=False)
    @classmethod
    def _required_any(cls, value: Any) -> Any:
        """``required_any: [phone, email]`` is one group; a list of lists is several."""
        if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
            return [value]
        return value


class Render(StrEnum):
    HTTP = "http"
    PLAYWRIGHT = "playwright"


class Format(StrEnum):
    HTML = "html"
    JSON = "json"
    # a sitemap, a sitemap index or a robots.txt (framework/crawl/discovery.py)
    SITEMAP = "sitemap"


class FollowRule(_Strict):
    """Links on a page (or in a record) that lead to pages of another kind."""

    css: str | None = None
    xpath: str | None = None
    pattern: str | None = None  # a regex over every link's absolute URL
    to: str
    # regexes over a link's absolute URL: a link matching one is not followed by this rule
    deny: tuple[str, ...] = ()
    # the deepest page this rule may lead to, in links from a start URL (which is 0)
    max_depth: int | None = Field(default=None, ge=1)

    @field_validator("deny", mode="before")
    @classmethod
    def _deny_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_selector(self) -> FollowRule:
        given = [k for k in ("css", "xpath", "pattern") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a follow rule takes exactly one of css, xpath or pattern")
        return self


class StopWhen(_Strict):
    """When number/offset pagination stops (besides ``max_pages``)."""

    empty: bool = True  # the page has no records
    json_path: str | None = Field(default=None, alias="json")  # a JSON path whose value ...
    equals: Any = False  # ... equal to this means "no more"


class TotalSpec(FieldSpec):
    """``total:`` of a list kind: where its pages say how many records the list has
    ("Showing 1-20 of 2,000", "57 jobs", a JSON ``total``), read as a field is (an
    ``integer`` unless ``type`` says otherwise), and how far the records (or follow
    links) the list yields may be from it before the crawl reports ``total_mismatch``
    (framework/crawl/completeness.py)."""

    type: ValueType = ValueType.INTEGER
    # what the list may miss or exceed by: a count (2) or a share of the total ("1%")
    tolerance: int | str = Field(default=0)

    @field_validator("tolerance")
    @classmethod
    def _tolerance(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 0:
                raise ValueError("tolerance is a count (0 or more) or a share, e.g. 2%")
            return value
        text = value.strip()
        if not re.fullmatch(r"\d+(\.\d+)?%", text) or float(text[:-1]) > 100:
            raise ValueError("tolerance is a count (0 or more) or a share, e.g. 2%")
        return text

    def allowed(self, total: int) -> int:
        """How many records the list may miss or exceed, for a declared ``total``."""
        if isinstance(self.tolerance, int):
            return self.tolerance
        return int(total * float(self.tolerance[:-1]) / 100)


class Pagination(_Strict):
    """Next pages: a link (``next``), or a query parameter incremented until a stop."""

    next: str | None = None  # css (or xpath starting with / or ( ) of the next link
    param: str | None = None  # query parameter carrying the page number or offset
    start: int = 1
    step: int = 1
    max_pages: int | None = Field(default=None, ge=1)
    stop: StopWhen = StopWhen()

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"next": data}
        return data

    @model_validator(mode="after")
    def _one_way(self) -> Pagination:
        if (self.next is None) == (self.param is None):
            raise ValueError("pagination takes exactly one of `next` (a link) or `param`")
        return self


class Body(_Strict):
    """A request body template: a form (url-encoded) or a JSON document."""

    form: dict[str, str] | None = None
    json_body: Any = Field(default=None, alias="json")

    @model_validator(mode="after")
    def _one(self) -> Body:
        if (self.form is None) == (self.json_body is None):
            raise ValueError("a body takes exactly one of `form` or `json`")
        return self


class RateSpec(_Strict):
    """How fast one page kind (or the job) may be fetched: a gate of its own
    (framework/crawl/blocking.py), so its limits hold whatever else the job fetches."""

    # at most this many requests started per second (0.5: one every two seconds)
    per_second: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, ge=1)  # at most this many in flight

    @model_validator(mode="after")
    def _something(self) -> RateSpec:
        if self.per_second is None and self.concurrency is None:
            raise ValueError("a rate needs `per_second`, `concurrency` or both")
        return self


class BlockRule(_Strict):
    """What a soft ban looks like (a captcha, a "blocked" page): every condition given
    must hold. A response that matches stops the crawl as a checkpoint, its row pending."""

    name: str | None = None  # said in the message and the event; default: the conditions
    css: str | None = None  # an element on the page
    xpath: str | None = None
    status: tuple[int, ...] = ()  # one of these HTTP statuses
    url: str | None = None  # a regex searched in the URL the response came from (redirects)

    @field_validator("status", mode="before")
    @classmethod
    def _status_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) else value

    @model_validator(mode="after")
    def _some_condition(self) -> BlockRule:
        if self.css is None and self.xpath is None and not self.status and self.url is None:
            raise ValueError("a blocked rule needs at least one of css, xpath, status or url")
        return self


class SubtabSpec(_Strict):
    """An extra request per record (an AJAX tab). Its data lands in the record under
    the tab's name: a list of rows when ``each`` is given, else a mapping of fields."""

    url: str  # template over the record: "/cases/{id}/tab/rulings"
    method: Literal["GET", "POST"] = "GET"
    body: Body | None = None
    format: Format = Format.HTML
    each: str | Records | None = None  # rows: css/xpath for html, a JSON path for json
    fields: dict[str, FieldSpec] = {}
    required: bool = True  # the record is complete only when this tab is ok
    render: Render | None = None  # None: the job's (JSON tabs: http)
    browser: RenderOptions | None = None  # with render: playwright
    rate: RateSpec | None = None  # this tab's own rate limit (else the job's)

    @model_validator(mode="after")
    def _check(self) -> SubtabSpec:
        if self.body is not None and self.method == "GET":
            raise ValueError("a body needs `method: POST`")
        if self.each is None and not self.fields:
            raise ValueError("a sub-tab needs `each` (rows) or `fields`")
        return self


class SitemapOptions(_Strict):
    """How a page kind with ``format: sitemap`` reads its sitemaps (discovery.py)."""

    # regexes over the URL of a sitemap index's entry: only those matching one are
    # read; empty: every one (a robots.txt's Sitemap: lines are all read)
    follow: tuple[str, ...] = ()
    alternate: bool = False  # also the <xhtml:link rel="alternate"> URLs of an entry
    # entries whose <lastmod> is before this date are skipped (no lastmod: kept)
    modified_since: date | None = None

    @field_validator("follow", mode="before")
    @classmethod
    def _follow_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class PageKind(_OneOrMany):
    """One kind of page: its records, fields, follow rules, pagination and sub-tabs.

    A kind whose records have an ``id`` emits items. Without ``each`` the whole page is
    one record. Fields of a record that follows to another kind are carried into the
    records found there (detail values win).
    """

    format: Format = Format.HTML
    render: Render | None = None  # None: the job's render
    browser: RenderOptions | None = None  # with render: playwright
    # records on the page (css, xpath, or a JSON path for json; a mapping: records that
    # are data in the page, see Records)
    each: str | Records | None = None
    id: FieldSpec | None = None  # -> source_id; required when present
    fields: dict[str, FieldSpec] = {}
    follow: tuple[FollowRule, ...] = ()
    pagination: Pagination | None = None
    # how many records the list says it has: checked against what it yielded
    total: TotalSpec | None = None
    subtabs: dict[str, SubtabSpec] = {}
    sitemap: SitemapOptions | None = None  # with `format: sitemap`
    # groups of fields of which at least one must have a value (else the record is invalid)
    required_any: tuple[tuple[str, ...], ...] = ()
    forms: tuple[FormSpec, ...] = ()  # forms of the page to submit (crawl/forms.py)
    rate: RateSpec | None = None  # this kind's own rate limit (else the job's)
    # soft-ban rules of this kind (and its sub-tabs), besides the job's
    blocked: tuple[BlockRule, ...] = ()
    # sent with this kind's requests and its sub-tabs', over the job's; {env:NAME} ok
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}

    @field_validator("follow", mode="before")
    @classmethod
    def _follow_list(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return [value]
        return value

    @field_validator("forms", mode="before")
    @classmethod
    def _forms_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @property
    def emits(self) -> bool:
        return self.id is not None


class _ShortKind(_OneOrMany):
    """What ``list:`` and ``detail:`` both take: how the page is fetched, what a record
    needs. :meth:`JobSpec.page_kinds` carries each of them to the :class:`PageKind`."""

    format: Format = Format.HTML
    render: Render | None = None
    browser: RenderOptions | None = None
    required_any: tuple[tuple[str, ...], ...] = ()
    rate: RateSpec | None = None
    blocked: tuple[BlockRule, ...] = ()
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}


def _carried(short: _ShortKind) -> dict[str, Any]:
    """The keys of a short form that its page kind takes as they are."""
    return {name: getattr(short, name) for name in ("id", "fields", *_ShortKind.model_fields)}


class _ListKeys(_Strict):
    each: str | Records | None = None
    follow: str | None = None  # a css/xpath selector for the detail link, within the row
    next: str | Pagination | None = None
    total: TotalSpec | None = None  # how many records the list says it has
    id: FieldSpec | None = None
    fields: dict[str, FieldSpec] = {}


class _DetailKeys(_Strict):
    id: FieldSpec
    fields: dict[str, FieldSpec] = {}
    subtabs: dict[str, SubtabSpec] = {}


# Each short form's own keys come first (the shared ones after them, in the schema and
# the generated reference), hence their own keys in a base listed last.
class ListShort(_ShortKind, _ListKeys):
    """Short form of a list page: ``each`` row, ``follow`` link to the detail page,
    ``next`` link to the next list page, and fields taken from the row itself."""


class DetailShort(_ShortKind, _DetailKeys):
    pass


class KeySpec(_Strict):
    """How the dedupe key is built: a template over the record, normalised."""

    template: str = "{source_type}:{source_id}"
    lowercase: bool = False  # lowercase the id part (ids that are case-insensitive)
    # Other jobs with this source_type write the same keys on purpose (`framework validate`
    # refuses a shared source_type unless every job involved says so).
    shared: bool = False

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"template": data}
        return data


class ShipSettings(_Strict):
    """Defaults for `framework ship` (flags win)."""

    endpoint: str | None = None
    token_env: str | None = None
    batch_size: int | None = Field(default=None, ge=1)
    fallback_path: str | None = None


class DriftSpec(_Strict):
    """When a field's fill rate fell enough to report drift (framework/crawl/drift.py)."""

    # percentage points below the previous crawl's rate ("25%": 0.9 -> 0.6 is drift)
    fill_drop: str = "25%"
    min_records: int = Field(default=10, ge=1)  # both crawls read at least this many
    # the share of a kind's pages or records a whole crawl may lose against the last
    # whole crawl ("25%": 200 list pages -> 140 is drift): a `next` that broke overnight
    volume_drop: str = "25%"

    @field_validator("fill_drop", "volume_drop")
    @classmethod
    def _percent(cls, value: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?%", value.strip()) or float(value.strip()[:-1]) > 100:
            raise ValueError("a percentage, e.g. 25%")
        return value.strip()

    @property
    def drop(self) -> float:
        return float(self.fill_drop[:-1]) / 100

    @property
    def volume(self) -> float:
        return float(self.volume_drop[:-1]) / 100


class JobSpec(_OneOrMany):
    """A whole job, as written in ``projects/<job>/job.yaml``."""

    name: str
    source_type: str
    start_urls: tuple[str, ...] = Field(min_length=1)
    start: str | None = None  # the page kind start URLs are; default: `list` or the first kind
    allowed_domains: tuple[str, ...] | None = None
    render: Render = Render.HTTP
    max_attempts: int = Field(default=3, ge=1, le=100)
    # Keep each fetched page's body (compressed) so `framework reparse` can re-extract
    # without fetching; false saves the disk (FRAMEWORK_STORE_RESPONSES overrides).
    store_responses: bool = True
    # A crawl that stores no item exits 4 unless the spec says that is expected.
    expect_empty: bool = False
    key: KeySpec = KeySpec()
    list_: ListShort | None = Field(default=None, alias="list")
    detail: DetailShort | None = None
    pages: dict[str, PageKind] = {}
    # Sent with every request; values may use {env:NAME} (resolved by the crawl).
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}  # the same, as cookies (never stored in the jar)
    login: LoginSpec | None = None  # a login before the crawl (framework/crawl/session.py)
    # Only the spec settings validate allows (framework.spec.validate.SPEC_SETTINGS).
    settings: dict[str, Any] = {}
    ship: ShipSettings = ShipSettings()
    description: str | None = None
    # dateparser's languages for every date field that names none (`languages: [id]`)
    languages: Languages = ()
    drift: DriftSpec = DriftSpec()
    # one rate limit shared by every request of a kind without a `rate:` of its own
    rate: RateSpec | None = None
    # soft-ban rules of every page kind and sub-tab (framework/crawl/blocking.py)
    blocked: tuple[BlockRule, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not JOB_NAME_RE.match(value):
            raise ValueError("a job name is letters, digits, '_' or '-' (at most 64)")
        return value

    @field_validator("source_type")
    @classmethod
    def _source_type(cls, value: str) -> str:
        if not SOURCE_TYPE_RE.match(value):
            raise ValueError("a source_type is lowercase letters, digits, '.', '_' or '-'")
        return value

    @model_validator(mode="after")
    def _forms(self) -> JobSpec:
        short = self.list_ is not None or self.detail is not None
        if short and self.pages:
            raise ValueError("write pages either as `list`/`detail` or as `pages`, not both")
        if not short and not self.pages:
            raise ValueError("a job needs pages: `list` and/or `detail`, or `pages`")
        return self

    def page_kinds(self) -> dict[str, PageKind]:
        """The general form of this spec's pages (expanding `list`/`detail`)."""
        if self.pages:
            return dict(self.pages)
        kinds: dict[str, PageKind] = {}
        if self.list_ is not None:
            lst = self.list_
            follow: tuple[FollowRule, ...] = ()
            if lst.follow is not None:
                sel = lst.follow
                rule = (
                    FollowRule(xpath=sel, to="detail")
                    if looks_like_xpath(sel)
                    else FollowRule(css=sel, to="detail")
                )
                follow = (rule,)
            pagination = Pagination(next=lst.next) if isinstance(lst.next, str) else lst.next
            kinds["list"] = PageKind(
                **_carried(lst),
                each=lst.each,
                follow=follow,
                pagination=pagination,
                total=lst.total,
            )
        if self.detail is not None:
            kinds["detail"] = PageKind(**_carried(self.detail), subtabs=self.detail.subtabs)
        return kinds

    def kind_paths(self) -> dict[str, tuple[str | int, ...]]:
        """Where each page kind is written: ``pages.<name>``, or ``list``/``detail``."""
        if self.pages:
            return {name: ("pages", name) for name in self.pages}
        short = {"list": self.list_, "detail": self.detail}
        return {name: (name,) for name, form in short.items() if form is not None}

    def start_kind(self) -> str:
        kinds = self.page_kinds()
        if self.start is not None:
            return self.start
        if "list" in kinds:
            return "list"
        return next(iter(kinds))
