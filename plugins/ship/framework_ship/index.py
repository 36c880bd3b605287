"""The side index of the ship log: latest outcome and latest success per dedupe key.

Owns ``<workspace>/ship-index.sqlite``, a cache derived from ``ship-log.jsonl`` (the
log stays the truth). Re-running a shipper over 1,000,000 items must not hold a dict
of a million keys, so the "latest success per (key, hash)" question is answered by a
point lookup in a small SQLite table (16-byte digests, a bounded page cache) instead.

Consistency: the index records the log offset it has applied up to, in the same
transaction as the rows. On open it applies the log from that offset (after a
``kill -9`` between a log write and an index commit this replays a few lines; the
upserts are idempotent). A log that shrank or was replaced (another inode) rebuilds the
index from scratch. Read-only openers (``--dry-run``, ``framework status``) never write:
they read the file read-only and keep the unapplied tail of the log in memory.

The file is created 0600 (it names what was shipped, from logged-in pages), and a
symlink named like it or its journal is refused before SQLite opens it (SQLite follows
links: it would write its pages wherever the link points, in a copied workspace a
shell's rc file say). A read-only opener does not refuse it; it reads the log instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.files import create_private, refuse_links
from framework.jsontext import json_object
from framework_ship.shiplog import Attempt, read_attempts

INDEX_FILE = "ship-index.sqlite"
# what SQLite writes of it: the file and its rollback journal (journal_mode=DELETE)
_INDEX_FILES = (INDEX_FILE, f"{INDEX_FILE}-journal")
INDEX_VERSION = 1
SUCCESS = ("accepted", "updated", "duplicate")
# The index is a cache of the log (rebuildable), so it commits rarely and does not
# fsync: losing its last seconds only means replaying them from the log.
_COMMIT_EVERY = 20_000
_COMMIT_SECONDS = 2.0
_LOOKUP_CHUNK = 500  # under SQLite's bound-parameter limit
_BUFFER_ROWS = 256  # one executemany per this many attempts (one by one: per item otherwise)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS latest (
    key TEXT PRIMARY KEY,
    hash BLOB NOT NULL,       -- content hash of the latest attempt
    outcome TEXT NOT NULL,    -- outcome of the latest attempt
    ok_hash BLOB              -- content hash of the latest success, if any
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# A success sets everything; only a failure needs the previous ok_hash kept.
_PUT_SUCCESS = "INSERT OR REPLACE INTO latest (key, hash, outcome, ok_hash) VALUES (?1, ?2, ?3, ?2)"
_UPSERT = """
INSERT INTO latest (key, hash, outcome, ok_hash)
VALUES (?1, ?2, ?3, CASE WHEN ?3 IN ('accepted', 'updated', 'duplicate') THEN ?2 END)
ON CONFLICT(key) DO UPDATE SET
    hash = excluded.hash,
    outcome = excluded.outcome,
    ok_hash = COALESCE(excluded.ok_hash, latest.ok_hash)
"""


def digest(content_hash: str) -> bytes:
    """16 bytes that identify a content hash (the sha256 prefix when it is one)."""
    if content_hash.startswith("sha256:") and len(content_hash) >= 7 + 32:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(content_hash[7 : 7 + 32])
    return hashlib.sha256(content_hash.encode()).digest()[:16]


def refuse_index_links(directory: Path) -> None:
    """A :class:`~framework.errors.WorkspaceError` naming the index (or its journal) in
    ``directory`` when it is a symlink: SQLite would write through it."""
    refuse_links(directory, _INDEX_FILES)


def connect_index(path: Path) -> sqlite3.Connection:
    """A writer's connection to the index file ``path``: a symlink there (or at its
    journal) refused, a new file created 0600 (its journal takes that mode)."""
    refuse_links(path.parent, (path.name, f"{path.name}-journal"))
    create_private(path)
    return sqlite3.connect(path, check_same_thread=False, isolation_level=None)


def _prepare(db: sqlite3.Connection) -> None:
    # A rollback journal, not WAL: a read-only opener (dry run, status) then creates
    # no -wal/-shm files.
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA synchronous=OFF")
    db.executescript(_SCHEMA)
    db.execute("SELECT count(*) FROM meta").fetchone()


@dataclass(frozen=True)
class Latest:
    hash: bytes
    outcome: str
    ok_hash: bytes | None


class ShipIndex:
    def __init__(self, db: sqlite3.Connection, log_path: Path, readonly: bool) -> None:
        self._db = db
        self._log_path = log_path
        self.readonly = readonly
        self._lock = threading.Lock()
        self._overlay: dict[str, Latest] = {}  # read-only: the unapplied log tail
        self._pending = 0
        self._end_offset = 0
        self._buffer: list[tuple[str, bytes, str]] = []  # applied rows not yet written
        self._last_commit = time.monotonic()

    # opening ------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, log_path: Path, readonly: bool = False) -> ShipIndex:
        path = directory / INDEX_FILE
        if readonly:
            # a link is not read (nor refused: status and --dry-run only look)
            if path.exists() and not any((directory / n).is_symlink() for n in _INDEX_FILES):
                try:
                    db = sqlite3.connect(
                        f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                        isolation_level=None,
                    )  # fmt: skip
                    db.execute("PRAGMA busy_timeout=5000")
                    db.execute("SELECT count(*) FROM latest").fetchone()  # probe it now
                    index = cls(db, log_path, readonly=True)
                    index._catch_up()
                    return index
                except sqlite3.DatabaseError:
                    # A hot journal left by a killed shipper (only a writer may roll it
                    # back), or a damaged file: read the log itself instead.
                    db.close()
            return cls._from_log(log_path)
        db = connect_index(path)
        try:
            _prepare(db)
        except sqlite3.DatabaseError:
            # A damaged cache (power loss without fsync): rebuild it from the log.
            db.close()
            for suffix in ("", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            db = connect_index(path)
            _prepare(db)
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("PRAGMA cache_size=-8000")  # 8 MB page cache, whatever the index size
        index = cls(db, log_path, readonly=False)
        index._catch_up()
        return index

    @classmethod
    def _from_log(cls, log_path: Path) -> ShipIndex:
        """A read-only index built in memory from the whole log (nothing on disk)."""
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        db.executescript(_SCHEMA)
        index = cls(db, log_path, readonly=False)
        index._apply_from(0)
        index.readonly = True
        return index

    def _meta(self, name: str) -> str | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else str(row[0])

    def _catch_up(self) -> None:
        try:
            st = os.stat(self._log_path)
            ino, size = st.st_ino, st.st_size
        except FileNotFoundError:
            ino, size = 0, 0
        offset = int(self._meta("log_offset") or 0)
        known_ino = int(self._meta("log_ino") or 0)
        if offset and (ino != known_ino or size < offset):
            if self.readonly:
                # The index is stale and we may not rewrite it: read the log afresh.
                fresh = ShipIndex._from_log(self._log_path)
                self._db.close()
                self._db, self._overlay = fresh._db, {}
                return
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM latest")
            self._db.execute("DELETE FROM meta")
            self._db.execute("COMMIT")
            offset = 0
        self._apply_from(offset)

    def _apply_from(self, offset: int) -> None:
        batch: list[tuple[str, bytes, str]] = []
        end = offset
        for record, end in read_attempts(self._log_path, offset):
            batch.append(
                (
                    str(record["dedupe_key"]),
                    digest(str(record.get("content_hash", ""))),
                    str(record.get("outcome", "error")),
                )
            )
            if len(batch) >= 10_000:
                self._apply_rows(batch, end)
                batch = []
        self._apply_rows(batch, end, force_commit=True)

    # writing (the shipper, under the ship log's lock) ---------------------------
    def on_written(self, attempts: Sequence[Attempt], end_offset: int) -> None:
        rows = [(a.dedupe_key, digest(a.content_hash), a.outcome) for a in attempts]
        self._apply_rows(rows, end_offset)

    def _apply_rows(
        self, rows: Sequence[tuple[str, bytes, str]], end_offset: int, force_commit: bool = False
    ) -> None:
        with self._lock:
            if self.readonly:
                for key, h, outcome in rows:
                    prior = self._lookup_locked(key)
                    ok = h if outcome in SUCCESS else (prior.ok_hash if prior else None)
                    self._overlay[key] = Latest(h, outcome, ok)
                return
            self._buffer.extend(rows)
            self._end_offset = end_offset
            if len(self._buffer) >= _BUFFER_ROWS or force_commit:
                self._drain_locked()
            if not self._db.in_transaction:
                if not force_commit:
                    return
                self._db.execute("BEGIN")
            now = time.monotonic()
            if (
                force_commit
                or self._pending >= _COMMIT_EVERY
                or now - self._last_commit >= _COMMIT_SECONDS
            ):
                self._commit_locked()
                self._last_commit = now

    def _drain_locked(self) -> None:
        """Write the buffered rows, in log order (a success and a later failure of one
        key must land in that order), one executemany per run of the same kind."""
        rows, self._buffer = self._buffer, []
        if not rows:
            return
        if not self._db.in_transaction:
            self._db.execute("BEGIN")
        start = 0
        while start < len(rows):
            ok = rows[start][2] in SUCCESS
            end = start
            while end < len(rows) and (rows[end][2] in SUCCESS) == ok:
                end += 1
            self._db.executemany(_PUT_SUCCESS if ok else _UPSERT, rows[start:end])
            start = end
        self._pending += len(rows)

    def _commit_locked(self) -> None:
        """Commit the applied rows together with how far into the log they reach."""
        self._drain_locked()
        if not self._db.in_transaction:
            return
        self._set_offset(self._end_offset)
        self._db.execute("COMMIT")
        self._pending = 0

    def _set_offset(self, end_offset: int) -> None:
        try:
            ino = os.stat(self._log_path).st_ino
        except FileNotFoundError:
            ino = 0
        self._db.executemany(
            "INSERT INTO meta (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            [
                ("log_offset", str(end_offset)),
                ("log_ino", str(ino)),
                ("version", str(INDEX_VERSION)),
            ],
        )

    def set_last_run(self, summary: dict[str, object]) -> None:
        if self.readonly:
            return
        with self._lock:
            if not self._db.in_transaction:
                self._db.execute("BEGIN")
            self._db.execute(
                "INSERT INTO meta (name, value) VALUES ('last_run', ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (json.dumps(summary, sort_keys=True),),
            )
            self._commit_locked()

    def flush(self) -> None:
        with self._lock:
            if not self.readonly:
                self._commit_locked()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._db.close()

    # reading ------------------------------------------------------------------
    def lookup(self, key: str) -> Latest | None:
        with self._lock:
            return self._lookup_locked(key)

    def _lookup_locked(self, key: str) -> Latest | None:
        if not self.readonly:
            self._drain_locked()
        found = self._overlay.get(key)
        if found is not None:
            return found
        row = self._db.execute(
            "SELECT hash, outcome, ok_hash FROM latest WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return Latest(bytes(row[0]), str(row[1]), None if row[2] is None else bytes(row[2]))

    def lookup_many(self, keys: Sequence[str]) -> dict[str, Latest]:
        """``lookup`` for a chunk of keys in one query (the run loop asks per chunk of
        the item stream, not per item)."""
        found: dict[str, Latest] = {}
        with self._lock:
            if not self.readonly:
                self._drain_locked()
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                part = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(part))
                for key, h, outcome, ok in self._db.execute(
                    f"SELECT key, hash, outcome, ok_hash FROM latest WHERE key IN ({marks})",
                    tuple(part),
                ):
                    found[str(key)] = Latest(
                        bytes(h), str(outcome), None if ok is None else bytes(ok)
                    )
            for key in keys:
                if key in self._overlay:
                    found[key] = self._overlay[key]
        return found

    def outcome_counts(self) -> dict[str, int]:
        """How many keys have each latest outcome."""
        with self._lock:
            if not self.readonly:
                self._drain_locked()
            counts: dict[str, int] = {}
            for outcome, n in self._db.execute(
                "SELECT outcome, count(*) FROM latest GROUP BY outcome"
            ):
                counts[str(outcome)] = int(n)
            for key, latest in self._overlay.items():
                row = self._db.execute(
                    "SELECT outcome FROM latest WHERE key = ?", (key,)
                ).fetchone()
                if row is not None:
                    counts[str(row[0])] -= 1
                counts[latest.outcome] = counts.get(latest.outcome, 0) + 1
            return {k: v for k, v in counts.items() if v}

    def last_run(self) -> dict[str, object] | None:
        raw = self._meta("last_run")
        return None if raw is None else json_object(raw)

    def __enter__(self) -> ShipIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
