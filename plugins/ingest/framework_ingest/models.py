"""The wire models of the ingest contract (pydantic): what comes in, what goes out.

They are the single source of the request validation and of the OpenAPI description
(:mod:`framework_ingest.openapi` builds the document from their JSON schemas). This module
owns shapes and field rules only: no storage, no HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

# No NUL anywhere in a key: PostgreSQL text cannot hold it.
SourceType = Annotated[
    str, StringConstraints(min_length=1, max_length=100, pattern=r"^[^:\s\x00]+$")
]
SourceId = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"^[^\x00]+$")]
DedupeKey = Annotated[str, StringConstraints(min_length=3, max_length=601, pattern=r"^[^\x00]+$")]
ContentHash = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
]
# The page an item came from: an absolute http(s) URL without whitespace or control
# characters (what a crawl can have fetched). 8 KiB is more than browsers and servers
# take in a request line, so any page the crawl could fetch fits.
PAGE_URL_MAX = 8192
PageUrl = Annotated[
    str,
    StringConstraints(
        min_length=8,
        max_length=PAGE_URL_MAX,
        pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f]+$",
    ),
]
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]+$"
IdempotencyKey = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=IDEMPOTENCY_KEY_PATTERN)
]

ItemStatus = Literal["accepted", "duplicate", "updated"]
BatchStatus = Literal["accepted", "duplicate", "updated", "invalid", "conflict"]
DownstreamStatus = Literal["queued", "running", "done", "failed"]


class ItemIn(BaseModel):
    """One version of one datum. ``dedupe_key`` must be ``{source_type}:{source_id}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dedupe_key: DedupeKey = Field(description="`{source_type}:{source_id}`, the upsert key")
    source_type: SourceType
    source_id: SourceId
    content_hash: ContentHash = Field(
        description="The shipper's hash of `data`; same key and hash is a duplicate"
    )
    scraped_at: AwareDatetime = Field(description="RFC 3339 time with an offset")
    data: dict[str, Any] = Field(description="The item's fields, any JSON object")
    url: PageUrl | None = Field(
        default=None,
        description="The page the item came from (metadata: not part of `content_hash`)",
    )


class BatchItemIn(ItemIn):
    """A batch element: an item, optionally naming its own idempotency key."""

    idempotency_key: IdempotencyKey | None = Field(
        default=None,
        description="Plays the role of the `Idempotency-Key` header for this element",
    )


class ProblemField(BaseModel):
    field: str = Field(description="Dotted path of the offending field ('' for the body)")
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None
    errors: list[ProblemField] | None = None


class ItemResult(BaseModel):
    """The answer to one stored item."""

    status: ItemStatus
    dedupe_key: str
    content_hash: str
    version: int = Field(description="1 for the first version, +1 per content change")


class BatchResult(BaseModel):
    """The answer for one batch element, at the element's position."""

    index: int
    status: BatchStatus
    status_code: int = Field(description="What the single-item route would have answered")
    dedupe_key: str | None = None
    content_hash: str | None = None
    version: int | None = None
    replayed: bool | None = Field(
        default=None, description="true: the stored answer to this element's idempotency key"
    )
    problem: Problem | None = None


class BatchResponse(BaseModel):
    results: list[BatchResult]


class ItemOut(BaseModel):
    """A stored item with its downstream (handoff) state."""

    dedupe_key: str
    source_type: str
    source_id: str
    content_hash: str
    scraped_at: str
    data: dict[str, Any] | None = Field(description="null once retention purged a done item")
    url: str | None = Field(description="The page the stored version came from, if sent")
    version: int
    received_at: str
    updated_at: str
    status: DownstreamStatus
    attempts: int
    claimed_at: str | None
    finished_at: str | None
    last_error: str | None
    purged_at: str | None = Field(
        description="When retention dropped this done item's data (the key row stays)"
    )


EventType = Literal["accepted", "updated", "claimed", "done", "failed", "reaped"]


class Event(BaseModel):
    """One change at the door, in commit order; consumers deduplicate by ``seq``."""

    seq: int = Field(description="Strictly increasing, without holes")
    type: EventType
    dedupe_key: str
    version: int = Field(description="The item version the change concerns")
    content_hash: str | None = Field(default=None, description="accepted / updated only")
    attempts: int | None = Field(default=None, description="handoff events only")
    at: str


class EventPage(BaseModel):
    events: list[Event]
    next_after: int = Field(description="Pass as `after` to get the next page")
    last_seq: int = Field(description="The last sequence handed out so far")


CONSUMER_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"


class CursorIn(BaseModel):
    """A consumer's acknowledgement: every event up to ``last_seq`` is processed."""

    model_config = ConfigDict(extra="forbid")

    last_seq: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]


class Cursor(BaseModel):
    name: str
    last_seq: int
    updated_at: str


class CursorList(BaseModel):
    consumers: list[Cursor]


class SourceStats(BaseModel):
    total: int
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0


class Stats(BaseModel):
    items: int
    history: int
    by_status: dict[str, int]
    by_source_type: dict[str, SourceStats]


class Health(BaseModel):
    status: Literal["ok"]
    database: str
