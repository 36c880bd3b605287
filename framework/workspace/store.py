"""The storage contract of a workspace.

A :class:`Store` keeps queue rows, their attempts and items. The embedded backend is
SQLite in WAL mode (:mod:`framework.workspace.sqlite`), the shared one PostgreSQL
(:mod:`framework.workspace.postgres`); both write their SQL once
(:mod:`framework.workspace.sql`, ``read``, ``write``). :class:`Leases` is one crawl
worker's side of the lease protocol on a store (:mod:`framework.workspace.leases`).
Everything outside the backends is typed against these two. Rules every backend keeps:

* :meth:`Store.commit` is ONE transaction: the row's outcome, the rows it discovered
  and the items (and item parts) it produced become visible together or not at all.
  A crash at any instant leaves either the state before or the state after.
* Rows are unique by :attr:`NewRow.fingerprint`; inserting a known row is a no-op and
  the row is not returned as ``inserted`` (so nothing is fetched twice).
* Items are unique by dedupe key. Writing identical content changes nothing (not even
  ``last_scraped``); different content replaces data and ``content_hash``.
  ``complete`` is recomputed from the rows (the item's row ok and all its required
  sub-tab rows ok), never incremented.
* Readers stream: no method loads a whole table into memory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from framework.workspace.records import (
    CommitResult,
    Link,
    NewRow,
    Outcome,
    Row,
    RowStatus,
    StoredItem,
    StoredResponse,
)

if TYPE_CHECKING:
    from framework.workspace.holds import Hold


@dataclass(frozen=True)
class RequeueFilter:
    """Which rows `requeue` puts back to pending. All given conditions must hold."""

    errors: bool = False  # rows in status error
    exhausted: bool = False  # error rows whose attempts reached the budget
    kind: str | None = None
    url_contains: str | None = None


class Store(Protocol):
    readonly: bool

    # lifecycle ---------------------------------------------------------------
    def close(self) -> None: ...

    def quick_check(self) -> str | None:
        """None when the stored pages are sound, else the first problem found."""
        ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def set_metas(self, values: Mapping[str, str]) -> None:
        """Several meta values in one transaction."""
        ...

    def metas(self, prefix: str) -> dict[str, str]:
        """Every meta key that starts with ``prefix``, and its value."""
        ...

    def delete_metas(self, keys: Sequence[str]) -> None:
        """Remove meta keys (absent ones are no error), in one transaction."""
        ...

    # queue -------------------------------------------------------------------
    def seed(self, rows: Sequence[NewRow]) -> list[Row]:
        """Insert start rows; return those that were new."""
        ...

    def resumable(self, max_attempts: int) -> Iterator[Row]:
        """Stream every pending row, and every error row that is retryable with
        attempts < max_attempts, oldest first. Costs O(rows returned), not O(table):
        backed by an index on status."""
        ...

    def commit(self, outcome: Outcome) -> CommitResult: ...

    def commit_many(self, outcomes: Sequence[Outcome]) -> list[CommitResult | None]:
        """A group of outcomes in ONE transaction (the crawl's group commit), results
        in the same order; None for an outcome refused by its lease's fence."""
        ...

    def get_row(self, row_id: int) -> Row | None: ...

    def max_row_id(self) -> int:
        """The highest row id (0 when empty): rows above it at a run's start were
        discovered by that run."""
        ...

    def requeue(self, which: RequeueFilter, max_attempts: int) -> int:
        """Put matching rows back to pending (attempt history kept); return the count."""
        ...

    def refund(self, attempts: Mapping[int, int]) -> None:
        """Give attempts back (row id -> how many; never below 0): the attempts that a
        host outage spent, so an outage never exhausts a row. The history keeps them."""
        ...

    def reset_rows(self) -> None:
        """Forget every row and attempt (items stay): a fresh run over the same items."""
        ...

    # reading -----------------------------------------------------------------
    def row_counts(self) -> dict[str, dict[RowStatus, int]]:
        """{kind: {status: count}}."""
        ...

    def iter_rows(
        self, status: RowStatus | None = None, kind: str | None = None
    ) -> Iterator[Row]: ...

    def iter_links(self, parents: Collection[int]) -> Iterator[Link]:
        """The rows that one of ``parents`` found first (their ``parent_id``), in id
        order."""
        ...

    def attempts(self, row_id: int) -> list[Mapping[str, Any]]: ...

    def misbehaving(self, limit: int = 10) -> list[Row]:
        """Rows with at least one failed attempt, worst first (errors, then attempts)."""
        ...

    def counts(self, max_attempts: int) -> dict[str, int]:
        """{"pending", "retryable", "exhausted"}: what the next run would fetch, and
        the error rows it would not."""
        ...

    def exhausted(self, max_attempts: int, limit: int | None = None) -> list[Row]: ...

    def failures(self, row_id: int) -> int:
        """How many attempts of the row failed."""
        ...

    def incomplete_keys(self, limit: int) -> list[str]: ...

    def item_counts(self) -> dict[str, int]:
        """{"complete": n, "incomplete": m}."""
        ...

    def iter_items(
        self,
        complete_only: bool = True,
        after: str | None = None,
        only: Sequence[str] | None = None,
    ) -> Iterator[StoredItem]:
        """Items in dedupe-key order, streamed in bounded chunks (keyset pagination).
        ``after`` resumes after that key; ``only`` restricts to those keys."""
        ...

    def get_item(self, dedupe_key: str) -> StoredItem | None: ...

    def items_of_rows(self, row_ids: Collection[int]) -> list[tuple[int, str, str, str | None]]:
        """``(row_id, dedupe_key, data, parts)`` of the items linked to ``row_ids`` (data
        and parts as stored: JSON text), in no set order."""
        ...

    def ok_attempts(self, row_ids: Sequence[int]) -> dict[int, int]:
        """How many ``ok`` attempts each of those rows has (rows without one absent)."""
        ...

    def fill_counts(self) -> dict[str, dict[str, Any]]:
        """Per page kind: stored items, and per field how many hold a value."""
        ...

    # stored responses --------------------------------------------------------
    def responses_size(self) -> tuple[int, int]:
        """(stored responses, their compressed bytes)."""
        ...

    def iter_responses(
        self, skip_kinds: Collection[str] = ()
    ) -> Iterator[tuple[Row, StoredResponse]]:
        """Every stored response with its row, by row id, but those of ``skip_kinds``."""
        ...

    def responses_for(self, ids: Collection[int]) -> Iterator[tuple[Row, StoredResponse]]:
        """The stored responses of the rows ``ids`` (those that have one), by row id."""
        ...

    def responses_of(self, kinds: Collection[str]) -> int:
        """How many stored responses belong to rows of ``kinds``."""
        ...

    # held candidates (holds.py) -----------------------------------------------
    def hold_counts(self, keys: int = 0) -> dict[str, Any]: ...

    def iter_holds(self, status: str | None = None, key: str | None = None) -> Iterator[Hold]: ...

    def decide_hold(self, key: str, accept: bool) -> Hold: ...


class Leases(Protocol):
    """One crawl worker's side of the lease protocol (docs/scaling.md), on either
    store: :class:`framework.workspace.leases.SqliteLeases`,
    :class:`framework.workspace.postgres_leases.PgLeases`."""

    worker_id: int
    lease_seconds: float
    tokens: dict[int, int]  # row id -> the token this worker holds it by

    def register(self) -> int: ...

    def claim(self, limit: int, max_attempts: int, first: Sequence[str] = ()) -> list[Row]: ...

    def claim_ids(self, ids: Sequence[int]) -> set[int]: ...

    def token(self, row_id: int) -> int | None: ...

    def done(self, row_id: int) -> None: ...

    def heartbeat(self) -> set[int]: ...

    def claim_passed_over(self, max_attempts: int) -> bool: ...

    def others_working(self, max_attempts: int) -> bool: ...

    def stop(self) -> None: ...
