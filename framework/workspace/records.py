"""Small typed records that cross the workspace boundary.

The workspace stores three things: queue rows (one per list page, detail page and
sub-tab request), the attempts made on them, and items (one per dedupe key). These
dataclasses are what the crawl runtime hands to a store and what readers (status,
ship) get back. They carry no behaviour beyond their own canonical forms.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from framework.errors import StoredPageDamaged
from framework.redact import redact_url

# 2: the `responses` table (stored page bodies for `framework reparse`); a version 1
# workspace gains it, empty, the first time a writer opens it.
# 3: leases (rows' lease_owner, lease_expires_at, lease_token and the `workers` table:
# see framework.workspace.leases); an older workspace gains them, all free.
SCHEMA_VERSION = 3
# the context key of a list page's declared total and count (Outcome.listing): JSON in
# the row's context, so no schema change (an older framework reads it as unknown context)
LISTING = "listing"


class RowStatus(StrEnum):
    PENDING = "pending"
    OK = "ok"
    ERROR = "error"


class ErrorKind(StrEnum):
    """Typed failure notes. ``retryable`` says whether another attempt may help."""

    DNS = "dns"
    CONNECT = "connect"
    TIMEOUT = "timeout"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    RATE_LIMITED = "rate_limited"
    PARSE = "parse"
    VALIDATION = "validation"
    SCHEME = "scheme"  # a URL whose scheme is not http(s): never requested
    OFFSITE = "offsite"  # a URL (or a redirect hop) outside the job's allowed_domains
    # a hop from the job's public hosts to a loopback, private or link-local address
    PRIVATE_TARGET = "private_target"
    # the page stored in the workspace does not decompress (reparse): fetching it again mends it
    DAMAGED = "damaged"
    # the host answered, but not with HTTP the client can read (too many or too long
    # headers, a bad status line): counts toward max_attempts, never toward "host down"
    INVALID_RESPONSE = "invalid_response"
    REDIRECT_LOOP = "redirect_loop"  # more redirects than REDIRECT_MAX_TIMES: final
    OTHER = "other"

    @property
    def retryable(self) -> bool:
        # A 4xx (other than 429, which is RATE_LIMITED) or a page that does not hold the
        # data we expect will not change by asking again in the same run; the attempt
        # budget still lets `requeue` bring them back on purpose.
        return self not in _FINAL_KINDS


_FINAL_KINDS = frozenset(
    {ErrorKind.HTTP_4XX, ErrorKind.VALIDATION, ErrorKind.PARSE, ErrorKind.SCHEME, ErrorKind.OFFSITE}
    | {ErrorKind.PRIVATE_TARGET}
    # a redirect loop leads to the same loop when asked again
    | {ErrorKind.REDIRECT_LOOP}
)


def canonical_json(value: Any) -> str:
    """The one serialisation used for hashing: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(data: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an item's data (``sha256:<hex>``)."""
    return "sha256:" + hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewRow:
    """A request discovered by a page (or a start URL), not yet in the store.

    ``context`` is what the request needs to be rebuilt after a restart and to finish
    its record: carried fields from a list row, the item key and tab name of a
    sub-tab, the pagination counter. It must never hold secrets.
    """

    kind: str  # page kind ("list", "detail") or "<kind>.<tab>" for a sub-tab
    url: str
    method: str = "GET"
    body: str | None = None
    body_type: str | None = None  # "form" | "json" when body is set
    parent_id: int | None = None
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """Row identity: the same kind, method, URL and body is the same row."""
        raw = "\x1f".join((self.kind, self.method.upper(), self.url, self.body or ""))
        return hashlib.sha1(raw.encode("utf-8"), usedforsecurity=False).hexdigest()


class Link(NamedTuple):
    """A row as the page that found it first links it (``parent_id``): what
    ``framework reparse`` compares with the links the pages it reads give now."""

    id: int
    parent_id: int
    kind: str
    method: str
    url: str
    body: str | None
    status: RowStatus


@dataclass(frozen=True)
class Row:
    id: int
    kind: str
    url: str
    method: str
    body: str | None
    body_type: str | None
    parent_id: int | None
    status: RowStatus
    attempts: int
    retryable: bool
    last_error_kind: ErrorKind | None
    last_error: str | None
    last_http_status: int | None
    context: Mapping[str, Any]
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class ItemWrite:
    """An item produced by a page. ``complete`` is False while sub-tabs are pending."""

    dedupe_key: str
    source_type: str
    source_id: str
    data: Mapping[str, Any]
    complete: bool = True


@dataclass(frozen=True)
class HoldWrite:
    """A candidate item held back (``status`` ``invalid``: it broke a rule of the spec);
    ``reasons`` name each broken rule: ``{"rule", "field", "value"}``."""

    dedupe_key: str
    source_type: str
    source_id: str
    data: Mapping[str, Any]
    status: str
    reasons: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class PartWrite:
    """Sub-tab data merged into an existing item under ``name``."""

    dedupe_key: str
    name: str
    value: Any


@dataclass(frozen=True)
class ResponseWrite:
    """A response body kept for re-extraction (``framework reparse``): what a parser
    needs to read it again, nothing more (no cookies, no request headers)."""

    url: str  # the row's URL
    final_url: str  # after redirects: the base of relative links
    status: int
    content_type: str | None  # carries the declared encoding
    body: bytes  # as the parser saw it (after decompression); the store compresses it


@dataclass(frozen=True)
class StoredResponse:
    """A stored page as read back: its body still compressed until it is asked for, so
    a reparse hands its parse workers the small stored form and each worker inflates
    its own pages (the writing process never needs the body)."""

    row_id: int
    url: str
    final_url: str
    status: int
    content_type: str | None
    packed: bytes  # zlib, as stored
    stored_bytes: int  # compressed size on disk

    @property
    def body(self) -> bytes:
        """The body as the parser saw it."""
        try:
            return zlib.decompress(self.packed)
        except (zlib.error, TypeError) as exc:  # TypeError: no body at all (NULL)
            raise StoredPageDamaged(
                f"the stored page of row {self.row_id} is damaged ({exc}): it cannot be "
                "read again; the crawl fetches it again"
            ) from None


ERROR_DETAIL_MAX = 2000  # characters of an error detail kept per attempt


class Marks(NamedTuple):
    """What an outcome writes on its row, on every backend."""

    status: RowStatus
    error_kind: ErrorKind | None  # None when ok
    retryable: bool
    detail: str | None  # the error text, cut at ERROR_DETAIL_MAX


@dataclass(frozen=True)
class Outcome:
    """Everything one response produced; a store commits it in ONE transaction.

    ``ok=False`` records a failed attempt (typed error); the row stays retryable while
    its attempts are under the budget and ``retryable`` holds.
    """

    row_id: int
    ok: bool
    http_status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    retryable: bool = True
    new_rows: Sequence[NewRow] = ()
    items: Sequence[ItemWrite] = ()
    parts: Sequence[PartWrite] = ()
    # the page's body, kept in the same transaction (None: not stored)
    response: ResponseWrite | None = None
    # a re-extraction of a stored page (`framework reparse`): no request was made, so
    # the row's attempts and attempt history are left as they are
    reparse: bool = False
    # candidates kept aside instead of stored as items (framework/workspace/holds.py)
    holds: Sequence[HoldWrite] = ()
    # the fencing token of the worker's lease on the row (framework/workspace/leases.py):
    # the commit is refused when the row's lease was taken over since. None: no lease
    # (a single-process crawl holds the workspace alone), nothing is checked.
    lease_token: int | None = None
    # a list page's count, kept in its row's context under LISTING (the same
    # transaction): the total the page declares (None: not found) and the records or
    # links it yielded; framework/crawl/completeness.py compares a whole list's
    listing: Mapping[str, int | None] | None = None

    def item_keys(self) -> set[str]:
        """The item keys this outcome names itself: its items, parts, holds, and the
        items of the rows it found."""
        keys = {w.dedupe_key for w in self.items} | {p.dedupe_key for p in self.parts}
        keys.update(h.dedupe_key for h in self.holds)
        keys.update(
            str(r.context["item_key"])
            for r in self.new_rows
            if r.context.get("item_key") is not None
        )
        return keys

    def marks(self) -> Marks:
        """The row's status, error kind, retryability and error detail after this
        outcome: a failure without a kind is ``other``; a row is retryable only when
        both the outcome and its error kind allow it."""
        detail = (self.error or "")[:ERROR_DETAIL_MAX] or None
        if self.ok:
            return Marks(RowStatus.OK, None, True, detail)
        kind = self.error_kind or ErrorKind.OTHER
        return Marks(RowStatus.ERROR, kind, self.retryable and kind.retryable, detail)


@dataclass(frozen=True)
class CommitResult:
    status: RowStatus
    attempt: int  # the attempt number just recorded (1-based)
    inserted: Sequence[Row] = ()  # rows that did not exist before: schedule these
    items_new: int = 0
    items_changed: int = 0
    items_unchanged: int = 0
    completed: Sequence[str] = ()  # dedupe keys that became complete in this commit
    changed: Sequence[str] = ()  # dedupe keys whose stored content changed (not new ones)
    response_bytes: int = 0  # compressed bytes of the response body stored with it
    # rows this (reparse) outcome found again whose carried values it changed (carry.py)
    refreshed: Sequence[int] = ()


@dataclass(frozen=True)
class StoredItem:
    dedupe_key: str
    source_type: str
    source_id: str
    data: Mapping[str, Any]
    content_hash: str
    first_scraped: str
    last_scraped: str
    complete: bool
    row_id: int | None
    # The URL of the page whose response wrote the current content (``rows.url`` of
    # ``row_id``): metadata for exports and shipping, never part of ``data`` or its
    # hash, so a page that moved does not make its item "changed". None once the row is
    # gone (``--fresh``) until a crawl writes the item again.
    url: str | None = None


#: the key an item's page URL takes where the item is written flat (``framework export``,
#: the crawl's ``-o`` feed): the first one its data does not use
PAGE_URL_KEYS = ("url", "page_url")


def page_url_meta(data: Mapping[str, Any], url: str | None) -> dict[str, str | None]:
    """The page an item came from as metadata beside its keys: ``{"url": ...}``, or
    ``{"page_url": ...}`` when the record has a field ``url`` (its own fields win), or
    nothing when it has both. Written here once, so the export and the crawl's feed
    cannot name it differently; masked as everywhere the framework writes a URL."""
    for name in PAGE_URL_KEYS:
        if name not in data:
            return {name: redact_url(url) if url is not None else None}
    return {}
