"""The ingest contract in SQL: upsert on the dedupe key, idempotency keys, reads.

The upsert is ONE statement (``INSERT ... ON CONFLICT (dedupe_key) DO UPDATE ... WHERE
the hash changed RETURNING version``), so two writers can never both "insert" a key:
``version == 1`` came back -> accepted; ``version > 1`` -> updated (a trigger has copied
the previous version into ``item_history``); no row -> duplicate. An update puts the
item back to downstream status ``queued`` (attempts 0): it is a new version to consume.
The page ``url`` (metadata, not in ``content_hash``) is written with the content: a
duplicate, whatever its ``url``, changes nothing, so a page that moved is no new version.

Idempotency keys on the single-item route are registered "in flight" in their own
committed transaction first, so a concurrent request with the same key sees them (409);
the response is stored in the same transaction as the item, so it exists exactly when
the item was written. This module owns the SQL of items and idempotency keys; the
handoff SQL lives in :mod:`framework_ingest.handoff`; it must not know about HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from framework_ingest import events
from framework_ingest.db import Backend, Row, Tx, format_time, utcnow
from framework_ingest.errors import TransactionConflict
from framework_ingest.problems import problem
from framework_ingest.validate import ItemInvalid, Prepared

UPSERT = """
INSERT INTO items (dedupe_key, source_type, source_id, content_hash, scraped_at, data,
                   url, received_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (dedupe_key) DO UPDATE SET
    source_type = excluded.source_type, source_id = excluded.source_id,
    content_hash = excluded.content_hash, scraped_at = excluded.scraped_at,
    data = excluded.data, url = excluded.url, updated_at = excluded.updated_at,
    version = items.version + 1,
    status = 'queued', attempts = 0, claimed_at = NULL, finished_at = NULL, last_error = NULL,
    claim_id = NULL, purged_at = NULL
WHERE items.content_hash <> excluded.content_hash
RETURNING version
"""

_CLAIM_KEY = """
INSERT INTO idempotency_keys (key, fingerprint, dedupe_key, created_at) VALUES (?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET created_at = excluded.created_at
WHERE idempotency_keys.status_code IS NULL
  AND idempotency_keys.fingerprint = excluded.fingerprint
  AND idempotency_keys.created_at < ?
RETURNING key
"""

ITEM_COLUMNS = (
    "dedupe_key, source_type, source_id, content_hash, scraped_at, data, url, version, "
    "received_at, updated_at, status, attempts, claimed_at, finished_at, last_error, purged_at"
)

STATUSES = ("queued", "running", "done", "failed")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one item's request comes to: the status code and body to answer with."""

    status_code: int
    body: dict[str, Any]
    replayed: bool = False


def upsert_params(p: Prepared, now: str) -> tuple[Any, ...]:
    i = p.item
    return (
        i.dedupe_key,
        i.source_type,
        i.source_id,
        i.content_hash,
        p.scraped_at,
        p.data_text,
        i.url,
        now,
        now,
    )


def _result(p: Prepared, rows: list[Row], tx: Tx) -> Outcome:
    key, content_hash = p.item.dedupe_key, p.item.content_hash
    if rows:
        version = int(rows[0][0])
        status, code = ("accepted", 201) if version == 1 else ("updated", 200)
    else:
        found = tx.execute("SELECT version FROM items WHERE dedupe_key = ?", (key,))
        version, status, code = int(found[0][0]), "duplicate", 200
    body = {"status": status, "dedupe_key": key, "content_hash": content_hash, "version": version}
    return Outcome(code, body)


class IngestStore:
    """Stores items through a :class:`Backend`. Thread-safe; one per app."""

    def __init__(self, backend: Backend, *, in_flight_timeout: float = 60.0) -> None:
        self.backend = backend
        self.in_flight_timeout = in_flight_timeout
        # Test seam: called with the idempotency key after it was registered in flight
        # and before the item is written, so a test can hold a request there.
        self.on_in_flight: Callable[[str], None] | None = None

    # -- writes -----------------------------------------------------------------------

    def put(self, p: Prepared) -> Outcome:
        """Store one item (the single-item route)."""
        if p.idempotency_key is None:
            return retrying(lambda: self._put_plain(p))
        return self._put_keyed(p)

    def _put_plain(self, p: Prepared) -> Outcome:
        now = utcnow()
        with self.backend.transaction() as tx:
            outcome = _result(p, tx.execute(UPSERT, upsert_params(p, now)), tx)
            events.append(tx, _events_of([outcome.body]), now)
        return outcome

    def _put_keyed(self, p: Prepared) -> Outcome:
        assert p.idempotency_key is not None
        with self.backend.transaction() as tx:
            earlier = self._claim_key(tx, p)
        if earlier is not None:
            return earlier
        if self.on_in_flight is not None:
            self.on_in_flight(p.idempotency_key)
        key = p.idempotency_key

        def write() -> Outcome:
            now = utcnow()
            with self.backend.transaction() as tx:
                outcome = _result(p, tx.execute(UPSERT, upsert_params(p, now)), tx)
                self._store_response(tx, key, outcome)
                events.append(tx, _events_of([outcome.body]), now)
            return outcome

        try:
            outcome = retrying(write)
        except BaseException:
            self._release_key(p.idempotency_key)
            raise
        return outcome

    def put_batch(self, entries: Sequence[Prepared | ItemInvalid]) -> list[dict[str, Any]]:
        """Store a batch's valid entries in one transaction; invalid ones answer their problem.

        Returns one result per entry, in order."""
        return retrying(lambda: self._put_batch(entries))

    def _put_batch(self, entries: Sequence[Prepared | ItemInvalid]) -> list[dict[str, Any]]:
        results: list[dict[str, Any] | None] = [None] * len(entries)
        # Rows are written in key order (stable, so one key's versions keep their order):
        # concurrent batches then lock rows in the same order and cannot deadlock.
        valid = sorted(
            ((i, e) for i, e in enumerate(entries) if isinstance(e, Prepared)),
            key=lambda ie: ie[1].item.dedupe_key,
        )
        now = utcnow()
        with self.backend.transaction() as tx:
            if not any(e.idempotency_key for _, e in valid):
                # No keys to check in between: let the backend pipeline the upserts.
                all_rows = tx.execute_each(UPSERT, [upsert_params(e, now) for _, e in valid])
                duplicates = [
                    e.item.dedupe_key
                    for (_, e), rows in zip(valid, all_rows, strict=True)
                    if not rows
                ]
                versions = self._versions(tx, duplicates)
                for (i, e), rows in zip(valid, all_rows, strict=True):
                    results[i] = _batch_result(i, e, rows, versions)
            else:
                for i, e in valid:
                    results[i] = self._batch_one(tx, i, e, now)
            # In the order the rows were written (key order), last in the transaction.
            written = [results[i] for i, _ in valid]
            events.append(tx, _events_of(r for r in written if r and not r.get("replayed")), now)
        for i, entry in enumerate(entries):
            if isinstance(entry, ItemInvalid):
                results[i] = {
                    "index": i,
                    "status": "invalid",
                    "status_code": int(entry.problem["status"]),  # 422, or 413: too large
                    "dedupe_key": entry.dedupe_key,
                    "problem": entry.problem,
                }
        return [r for r in results if r is not None]

    def _batch_one(self, tx: Tx, index: int, e: Prepared, now: str) -> dict[str, Any]:
        if e.idempotency_key is not None:
            earlier = self._claim_key(tx, e)
            if earlier is not None:
                return _from_outcome(index, e.item.dedupe_key, earlier)
        rows = tx.execute(UPSERT, upsert_params(e, now))
        outcome = _result(e, rows, tx)
        if e.idempotency_key is not None:
            self._store_response(tx, e.idempotency_key, outcome)
        return _from_outcome(index, e.item.dedupe_key, outcome)

    @staticmethod
    def _versions(tx: Tx, keys: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, version in tx.execute(
                f"SELECT dedupe_key, version FROM items WHERE dedupe_key IN ({marks})", chunk
            ):
                found[key] = int(version)
        return found

    # -- idempotency keys ---------------------------------------------------------------

    def _claim_key(self, tx: Tx, p: Prepared) -> Outcome | None:
        """Register ``p``'s idempotency key; None if it is now ours, else the answer."""
        key = p.idempotency_key
        assert key is not None
        fingerprint = p.fingerprint()
        now = datetime.now(UTC)
        stale = format_time(now - timedelta(seconds=self.in_flight_timeout))
        claimed = tx.execute(
            _CLAIM_KEY, (key, fingerprint, p.item.dedupe_key, format_time(now), stale)
        )
        if claimed:
            return None
        rows = tx.execute(
            "SELECT fingerprint, status_code, response FROM idempotency_keys WHERE key = ?",
            (key,),
        )
        if not rows or rows[0][1] is None:
            if rows and rows[0][0] != fingerprint:
                return _reused(key)
            body = problem(
                409,
                "idempotency-key-in-flight",
                "another request with this Idempotency-Key is being processed; retry",
            )
            return Outcome(409, body)
        stored_fingerprint, status_code, response = rows[0]
        if stored_fingerprint != fingerprint:
            return _reused(key)
        return Outcome(int(status_code), json.loads(response), replayed=True)

    @staticmethod
    def _store_response(tx: Tx, key: str, outcome: Outcome) -> None:
        tx.execute(
            "UPDATE idempotency_keys SET status_code = ?, response = ?, completed_at = ? "
            "WHERE key = ?",
            (outcome.status_code, json.dumps(outcome.body), utcnow(), key),
        )

    def _release_key(self, key: str) -> None:
        try:
            with self.backend.transaction() as tx:
                tx.execute(
                    "DELETE FROM idempotency_keys WHERE key = ? AND status_code IS NULL", (key,)
                )
        except Exception:  # noqa: S110 - the original error matters more; the key goes stale
            pass

    # -- signatures ---------------------------------------------------------------------

    def remember_signatures(self, signatures: Sequence[str], until: float) -> bool:
        """Record verified signatures until ``until`` (unix time); False when any of them
        was recorded before (a replay). One table for every server process."""
        expires = format_time(datetime.fromtimestamp(until, UTC))

        def record() -> bool:
            with self.backend.transaction() as tx:
                fresh = True
                for signature in signatures:
                    rows = tx.execute(
                        "INSERT INTO used_signatures (signature, expires_at) VALUES (?, ?) "
                        "ON CONFLICT (signature) DO NOTHING RETURNING signature",
                        (signature, expires),
                    )
                    fresh = fresh and bool(rows)
                return fresh

        return retrying(record)

    # -- reads --------------------------------------------------------------------------

    def get(self, dedupe_key: str) -> dict[str, Any] | None:
        with self.backend.transaction(write=False) as tx:
            rows = tx.execute(
                f"SELECT {ITEM_COLUMNS} FROM items WHERE dedupe_key = ?", (dedupe_key,)
            )
        if not rows:
            return None
        return item_dict(rows[0])

    def history(self, dedupe_key: str) -> list[dict[str, Any]]:
        with self.backend.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT version, content_hash, scraped_at, data, stored_at, replaced_at "
                "FROM item_history WHERE dedupe_key = ? ORDER BY version, id",
                (dedupe_key,),
            )
        return [
            {
                "version": r[0],
                "content_hash": r[1],
                "scraped_at": r[2],
                "data": json.loads(r[3]),
                "stored_at": r[4],
                "replaced_at": r[5],
            }
            for r in rows
        ]

    def stats(self) -> dict[str, Any]:
        with self.backend.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT source_type, status, COUNT(*) FROM items GROUP BY source_type, status"
            )
            history = int(tx.execute("SELECT COUNT(*) FROM item_history")[0][0])
        by_status = dict.fromkeys(STATUSES, 0)
        by_source: dict[str, dict[str, int]] = {}
        for source_type, status, count in rows:
            by_status[status] += int(count)
            entry = by_source.setdefault(source_type, {"total": 0, **dict.fromkeys(STATUSES, 0)})
            entry[status] += int(count)
            entry["total"] += int(count)
        return {
            "items": sum(by_status.values()),
            "history": history,
            "by_status": by_status,
            "by_source_type": by_source,
        }

    def ping(self) -> None:
        with self.backend.transaction(write=False) as tx:
            tx.execute("SELECT 1")


def retrying(work: Callable[[], T], attempts: int = 5) -> T:
    """Run a transaction again when the database aborted it to resolve a conflict
    (the handoff uses it too)."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except TransactionConflict:
            if attempt == attempts:
                raise
            time.sleep(0.005 * attempt)
    raise AssertionError("unreachable")


def item_dict(row: Row) -> dict[str, Any]:
    names = [n.strip() for n in ITEM_COLUMNS.split(",")]
    out = dict(zip(names, row, strict=True))
    out["data"] = json.loads(out["data"])
    return out


def _events_of(bodies: Iterable[Mapping[str, Any]]) -> list[events.Event]:
    """The events of freshly stored results (a duplicate changed nothing: no event)."""
    return [
        events.Event(b["status"], b["dedupe_key"], int(b["version"]), b["content_hash"])
        for b in bodies
        if b.get("status") in ("accepted", "updated")
    ]


def _reused(key: str) -> Outcome:
    body = problem(
        422,
        "idempotency-key-reused",
        "this Idempotency-Key was first used with a different body",
        [{"field": "Idempotency-Key", "message": "already used for another payload"}],
    )
    return Outcome(422, body)


def _from_outcome(index: int, key: str, outcome: Outcome) -> dict[str, Any]:
    if outcome.status_code >= 400:
        status = "conflict" if outcome.status_code == 409 else "invalid"
        return {
            "index": index,
            "status": status,
            "status_code": outcome.status_code,
            "dedupe_key": key,
            "problem": outcome.body,
        }
    result = {"index": index, "status_code": outcome.status_code, **outcome.body}
    if outcome.replayed:
        result["replayed"] = True
    return result


def _batch_result(
    index: int, e: Prepared, rows: list[Row], versions: dict[str, int]
) -> dict[str, Any]:
    if rows:
        version = int(rows[0][0])
        status, code = ("accepted", 201) if version == 1 else ("updated", 200)
    else:
        version, status, code = versions[e.item.dedupe_key], "duplicate", 200
    return {
        "index": index,
        "status": status,
        "status_code": code,
        "dedupe_key": e.item.dedupe_key,
        "content_hash": e.item.content_hash,
        "version": version,
    }
