"""Typed models of a job spec: the contract between YAML and the spider.

These models own the *shape* of a spec: every key, its type, its default. They forbid
unknown keys. Cross-field checks (selectors compile, templates name known fields,
page kinds named by ``to:`` exist) live in :mod:`framework.spec.validate`; turning YAML
into these models with ``file:line:col`` errors lives in :mod:`framework.spec.load`.
Nothing here does I/O.

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
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from framework.extract.fields import looks_like_xpath
from framework.project import JOB_NAME_RE
from framework.spec.render import RenderOptions  # `browser:` (owned by F, issue 11)

# The canonical prefix of every dedupe key: lowercase, no separator that could collide.
SOURCE_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
KIND_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

# Which keys of a field are *sources*; their order as written is the fallback order.
SOURCE_KEYS = ("css", "xpath", "json", "re", "url", "embedded", "pairs", "count", "const")


def _check_languages(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple) and value:
        from framework.extract.convert import known_language

        unknown = [v for v in value if isinstance(v, str) and not known_language(v)]
        if unknown:
            raise ValueError(
                f"unknown language(s) {', '.join(map(repr, unknown))}: "
                "dateparser's codes, e.g. en, id, de, pt"
            )
    return value


def _any_groups(value: Any) -> Any:
    """``required_any: [phone, email]`` is one group; a list of lists is several."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return [value]
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ValueType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    DATE = "date"
    DATETIME = "datetime"
    URL = "url"
    PRICE = "price"  # {"amount": number, "currency": str | None}, by price-parser


class Render(StrEnum):
    HTTP = "http"
    PLAYWRIGHT = "playwright"


class Format(StrEnum):
    HTML = "html"
    JSON = "json"
    # a sitemap, a sitemap index or a robots.txt (framework/crawl/discovery.py)
    SITEMAP = "sitemap"


class Embedded(_Strict):
    """JSON or a JavaScript literal embedded in the page, then a JSON path into it.

    Where the literal is: ``script`` (a css/xpath selector of the ``<script>`` whose
    text it is), ``var`` (the first assignment to that name in a script: ``data`` finds
    ``var data = [...]``, ``__STATE__`` finds ``window.__STATE__ = {...}``), or ``re``
    (a regex over the page text, or over the ``script``'s text; its group 1 or group
    ``json`` is the literal). ``var`` and ``re`` are each combinable with ``script``.
    The literal is JSON, or JavaScript that is not JSON (single quotes, unquoted keys,
    trailing commas: read by chompjs)."""

    re: str | None = None
    script: str | None = None
    var: str | None = None
    path: str = "$"

    @model_validator(mode="after")
    def _where(self) -> Embedded:
        if self.re is None and self.script is None and self.var is None:
            raise ValueError("`embedded` needs `script`, `var` or `re` (where the JSON is)")
        if self.re is not None and self.var is not None:
            raise ValueError("`embedded` takes `var` or `re`, not both")
        return self


class Records(_Strict):
    """Records that are data in the page rather than elements of it (an ``each``
    mapping): an embedded document (its ``path`` leads to the records, or to the list
    of them), or the JSON-LD or microdata objects of one type (``Quote``,
    ``https://schema.org/Quote``; ``"*"``: every top-level object). Each record is a
    JSON value: its fields are read with ``json:`` paths."""

    embedded: Embedded | None = None
    jsonld: str | None = None
    microdata: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Records:
        given = [k for k in ("embedded", "jsonld", "microdata") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "`each` as a mapping takes exactly one of embedded, jsonld or microdata"
            )
        return self

    @property
    def label(self) -> str:
        if self.embedded is not None:
            e = self.embedded
            where = " ".join(
                f"{k}={v}" for k, v in (("script", e.script), ("var", e.var), ("re", e.re)) if v
            )
            return f"embedded {where} -> {e.path}"
        if self.jsonld is not None:
            return f"jsonld {self.jsonld}"
        return f"microdata {self.microdata}"


class Replace(_Strict):
    """A regex substitution applied after whitespace normalisation."""

    pattern: str
    to: str = ""


class Source(_Strict):
    """One way to find a value. A field has one or more, tried in order."""

    kind: Literal["css", "xpath", "json", "re", "url", "embedded", "pairs", "count", "const"]
    # css/xpath/json/re/url/count: the expression; embedded: an Embedded; pairs: a
    # mapping {each, key, value}; const: any value
    expr: Any


class FieldSpec(_Strict):
    """One field of a record.

    Written in YAML either as a bare string (a CSS selector) or as a mapping with one
    or more *source* keys (``css``, ``xpath``, ``json``, ``re``, ``url``, ``embedded``,
    ``count``, ``const``), each a string or a list of fallbacks. Sources are tried in the
    order written; the first that yields a value wins, and a fallback that is not the
    first is reported (the layout changed). ``fields`` + ``each`` make a nested group of
    repeated rows (a table becomes a list of records).
    """

    sources: tuple[Source, ...] = ()
    type: ValueType = ValueType.STRING
    many: bool = False  # a list of values instead of the first one
    required: bool = False
    default: Any = None
    # normalisation (strings, before type conversion)
    strip: bool = True
    collapse: bool = True  # runs of whitespace -> one space
    lowercase: bool = False
    replace: tuple[Replace, ...] = ()
    # type details
    date_format: str | None = Field(default=None, alias="format")
    absolute: bool = True  # url: resolve against the page URL
    # date/datetime: dateparser's languages for dates the fixed forms miss ("12 Januari
    # 2024" with [id]); empty: the job's `languages`
    languages: tuple[str, ...] = ()
    # date/datetime: the order numeric dates are written in (12/01/2024); default: the
    # one the languages agree on, else day first (framework/extract/convert.py)
    date_order: Literal["DMY", "MDY", "YMD"] | None = None
    # number/integer/price: "63K", "1.2M", "2bn", "3 million" are read (else they fail)
    magnitude: bool = False
    # number/integer/price: which number of a range or a was/now text ("$20, now $15")
    pick: Literal["first", "last", "min", "max"] | None = None
    # price: the amount of a text that says "free" (0); unset, such a text fails
    free: int | float | None = None
    min: float | None = None
    max: float | None = None
    # rules on the converted value (a `many` field: on each value); a record that breaks
    # one is stored as `invalid`, naming the rule and the value, and never shipped
    pattern: str | None = None  # a regex the text of the value must contain (re.search)
    enum: tuple[Any, ...] | None = None  # the only values allowed
    min_length: int | None = Field(default=None, ge=0)  # of a text value
    max_length: int | None = Field(default=None, ge=0)
    # the one value this field must have (an absent value breaks it too): protects a
    # record's identity, e.g. the court a case must belong to
    expected: Any = None
    # change limits on a re-crawl of the same key (framework/crawl/changes.py): a
    # candidate over one is held as `review_required`, the accepted version ships on
    max_change: str | float | None = None  # "50%" of the old value, or an absolute amount
    frozen: bool = False  # the value must never change once stored
    # nested group of repeated rows (a mapping: records from data in the page)
    each: str | Records | None = None
    fields: dict[str, FieldSpec] | None = None
    # a value for templates (sub-tab URLs and bodies, the key, carried values), never
    # stored in the item nor part of its content hash (a CSRF token, a view state)
    helper: bool = False

    @model_validator(mode="before")
    @classmethod
    def _gather_sources(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"sources": [{"kind": "css", "expr": data}]}
        if not isinstance(data, dict) or "sources" in data:
            return data
        out: dict[str, Any] = {}
        sources: list[dict[str, Any]] = []
        for key, value in data.items():  # YAML mapping order is the fallback order
            if key in SOURCE_KEYS:
                if key in ("embedded", "pairs", "const") or not isinstance(value, list):
                    sources.append({"kind": key, "expr": value})
                else:
                    sources.extend({"kind": key, "expr": v} for v in value)
            else:
                out[key] = value
        out["sources"] = sources
        if "type" not in out and sources and all(s["kind"] == "count" for s in sources):
            out["type"] = ValueType.INTEGER  # a count is a number, not the text "5"
        return out

    @field_validator("languages", mode="before")
    @classmethod
    def _languages(cls, value: Any) -> Any:
        return _check_languages(value)

    @field_validator("max_change")
    @classmethod
    def _max_change(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if not re.fullmatch(r"\d+(\.\d+)?%", text):
                raise ValueError("max_change is a percentage (`50%`) or a number")
            return text
        if isinstance(value, int | float) and value < 0:
            raise ValueError("max_change is at least 0")
        return value

    @model_validator(mode="after")
    def _check(self) -> FieldSpec:
        if self.fields is not None:
            if self.each is None:
                raise ValueError("a nested group needs `each` (which elements are its rows)")
        elif not self.sources and self.default is None:
            raise ValueError(
                "a field needs a source (css, xpath, json, re, url, embedded, count or const)"
            )
        return self


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


def _rules_list(value: Any) -> Any:
    """``blocked:`` is one rule or a list of them."""
    return [value] if isinstance(value, dict) else value


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


class FormField(_Strict):
    """What one named field of a submitted form carries (``forms: [{fields: ...}]``).

    Exactly one of ``value`` (a template over the page's context: a constant,
    ``{author}``, ``{env:NAME}``), ``values`` (one request per value) or ``options``
    (one request per ``<option>`` of the form's ``<select>`` of that name). The short
    forms: a string is a ``value``, a list is ``values``."""

    value: str | None = None
    values: tuple[str, ...] | None = None
    options: bool = False
    exclude: tuple[str, ...] = ()  # option values never submitted (empty ones never are)
    carry: str | None = None  # the submitted value reaches the next page's records as this
    carry_label: str | None = None  # ... and the chosen option's text as this

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"value": data}
        if isinstance(data, list | tuple):
            return {"values": data}
        return data

    @model_validator(mode="after")
    def _one(self) -> FormField:
        given = [k for k in ("value", "values") if getattr(self, k) is not None]
        given += ["options"] if self.options else []
        if len(given) != 1:
            raise ValueError("a form field takes exactly one of value, values or options")
        if self.values is not None and not self.values:
            raise ValueError("`values` needs at least one value")
        if self.exclude and not self.options:
            raise ValueError("`exclude` goes with `options: true`")
        if self.carry_label is not None and not self.options:
            raise ValueError("`carry_label` goes with `options: true`")
        return self

    @property
    def fans_out(self) -> bool:
        return self.options or self.values is not None


class FormSpec(_Strict):
    """A form of the page submitted as ``FormRequest.from_response`` would: the page's
    own inputs (hidden ones such as ``__VIEWSTATE`` included) as they are, the named
    ``fields`` set on top; the response is a page of kind ``to``."""

    css: str | None = None  # the form, or an element inside it (Scrapy's formcss)
    xpath: str | None = None  # ... (formxpath)
    index: int | None = Field(default=None, ge=0)  # the n-th <form> of the page (formnumber)
    to: str
    fields: dict[str, FormField] = {}
    click: dict[str, str | int] | None = None  # attributes of the submit element (clickdata)
    dont_click: bool = False  # submit without any submit element's name=value
    method: Literal["GET", "POST"] | None = None  # None: the form's own method
    required: bool = True  # a page without the form is an error (else: no request)
    max_requests: int = Field(default=1000, ge=1)  # per page; over it the page is an error

    @model_validator(mode="after")
    def _where(self) -> FormSpec:
        given = [k for k in ("css", "xpath", "index") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError("a form is found by one of css, xpath or index")
        if self.click is not None and self.dont_click:
            raise ValueError("`click` and `dont_click: true` contradict each other")
        return self


class LoginSuccess(_Strict):
    """How a login proves it worked (every key given must hold); none given: the answer
    is below 400 and is not the login page again (its URL, its form)."""

    css: str | None = None  # must match on the page the login ends on
    cookie: str | None = None  # a cookie of this name must be in the jar afterwards
    status: int | None = Field(default=None, ge=100, le=599)  # the final answer's status


class SessionExpired(_Strict):
    """How a page says the session is gone (any one is enough): its row is fetched
    again after a new login, neither failed nor counted as an attempt."""

    status: tuple[int, ...] = (401, 403)
    # a regex searched in a redirect's target and in the final URL; default: the login
    # page's own URL (a redirect to the login form)
    url: str | None = None
    css: str | None = None  # matches on a page only a logged-out visitor sees

    @field_validator("status", mode="before")
    @classmethod
    def _status_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) else value


class LoginToken(_Strict):
    """A session that is a token in the login's JSON answer (not a cookie), sent as a
    header with every page request from then on."""

    json_path: str = Field(alias="json")  # where the token is in the answer: $.token
    header: str = "Authorization"
    value: str = "Bearer {token}"  # what the header says; {token} is the token


class LoginSpec(_Strict):
    """A login run before any other request of a crawl (and on every resume), and again
    whenever a page says the session expired (framework/crawl/session.py)."""

    url: str  # the login page (form) or endpoint (json); a path joins the first start URL
    form: str | None = None  # CSS selector of the form on the login page
    fields: dict[str, str] = {}  # form fields to fill: constants or {env:NAME}
    json_body: Any = Field(default=None, alias="json")  # POST this document instead
    success: LoginSuccess = LoginSuccess()
    expired: SessionExpired = SessionExpired()
    token: LoginToken | None = None  # the session is a token in the answer, not a cookie
    # new logins in a row with no page fetched between them before the run stops
    max_relogins: int = Field(default=3, ge=1, le=100)

    @model_validator(mode="after")
    def _one_way(self) -> LoginSpec:
        if (self.form is None) == (self.json_body is None):
            raise ValueError("a login takes exactly one of `form` (a selector) or `json`")
        if self.fields and self.form is None:
            raise ValueError("`fields` fill a login form: use them with `form`")
        return self


class PageKind(_Strict):
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

    @field_validator("blocked", mode="before")
    @classmethod
    def _blocked(cls, value: Any) -> Any:
        return _rules_list(value)

    @field_validator("required_any", mode="before")
    @classmethod
    def _required_any(cls, value: Any) -> Any:
        return _any_groups(value)

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


class ListShort(_Strict):
    """Short form of a list page: ``each`` row, ``follow`` link to the detail page,
    ``next`` link to the next list page, and fields taken from the row itself."""

    each: str | Records | None = None
    follow: str | None = None  # a css/xpath selector for the detail link, within the row
    next: str | Pagination | None = None
    id: FieldSpec | None = None
    fields: dict[str, FieldSpec] = {}
    format: Format = Format.HTML
    render: Render | None = None
    browser: RenderOptions | None = None
    required_any: tuple[tuple[str, ...], ...] = ()
    rate: RateSpec | None = None
    blocked: tuple[BlockRule, ...] = ()
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}

    @field_validator("required_any", mode="before")
    @classmethod
    def _required_any(cls, value: Any) -> Any:
        return _any_groups(value)

    @field_validator("blocked", mode="before")
    @classmethod
    def _blocked(cls, value: Any) -> Any:
        return _rules_list(value)


class DetailShort(_Strict):
    id: FieldSpec
    fields: dict[str, FieldSpec] = {}
    subtabs: dict[str, SubtabSpec] = {}
    format: Format = Format.HTML
    render: Render | None = None
    browser: RenderOptions | None = None
    required_any: tuple[tuple[str, ...], ...] = ()
    rate: RateSpec | None = None
    blocked: tuple[BlockRule, ...] = ()
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}

    @field_validator("required_any", mode="before")
    @classmethod
    def _required_any(cls, value: Any) -> Any:
        return _any_groups(value)

    @field_validator("blocked", mode="before")
    @classmethod
    def _blocked(cls, value: Any) -> Any:
        return _rules_list(value)


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

    @field_validator("fill_drop")
    @classmethod
    def _percent(cls, value: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?%", value.strip()) or float(value.strip()[:-1]) > 100:
            raise ValueError("fill_drop is a percentage, e.g. 25%")
        return value.strip()

    @property
    def drop(self) -> float:
        return float(self.fill_drop[:-1]) / 100


class JobSpec(_Strict):
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
    languages: tuple[str, ...] = ()
    drift: DriftSpec = DriftSpec()
    # one rate limit shared by every request of a kind without a `rate:` of its own
    rate: RateSpec | None = None
    # soft-ban rules of every page kind and sub-tab (framework/crawl/blocking.py)
    blocked: tuple[BlockRule, ...] = ()

    @field_validator("blocked", mode="before")
    @classmethod
    def _blocked(cls, value: Any) -> Any:
        return _rules_list(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not JOB_NAME_RE.match(value):
            raise ValueError("a job name is letters, digits, '_' or '-' (at most 64)")
        return value

    @field_validator("languages", mode="before")
    @classmethod
    def _languages(cls, value: Any) -> Any:
        return _check_languages(value)

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
                format=lst.format,
                render=lst.render,
                browser=lst.browser,
                each=lst.each,
                id=lst.id,
                fields=lst.fields,
                follow=follow,
                pagination=pagination,
                required_any=lst.required_any,
                rate=lst.rate,
                blocked=lst.blocked,
                headers=lst.headers,
                cookies=lst.cookies,
            )
        if self.detail is not None:
            d = self.detail
            kinds["detail"] = PageKind(
                format=d.format,
                render=d.render,
                browser=d.browser,
                id=d.id,
                fields=d.fields,
                subtabs=d.subtabs,
                required_any=d.required_any,
                rate=d.rate,
                blocked=d.blocked,
                headers=d.headers,
                cookies=d.cookies,
            )
        return kinds

    def start_kind(self) -> str:
        kinds = self.page_kinds()
        if self.start is not None:
            return self.start
        if "list" in kinds:
            return "list"
        return next(iter(kinds))
