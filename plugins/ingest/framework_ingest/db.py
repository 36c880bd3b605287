"""The storage seam: one small interface, two backends, plain versioned SQL migrations.

A :class:`Backend` hands out transactions; a :class:`Tx` runs SQL written with ``?``
placeholders (the PostgreSQL backend translates them), values always bound as
parameters. This module owns URL parsing, the migration runner and the backends'
connections (one per thread: :class:`framework.connections.ThreadConnections`,
the workspace stores' too); the SQL of the
contract lives in :mod:`framework_ingest.store`, and the backends in
:mod:`framework_ingest.sqlite_backend` and :mod:`framework_ingest.postgres_backend`.
It must not know about HTTP.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

from framework.redact import redact_url
from framework_ingest.errors import IngestConfigError

Row = tuple[Any, ...]
Params = Sequence[Any]

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class Tx(ABC):
    """One open transaction. Commits when its context exits cleanly, rolls back otherwise."""

    @abstractmethod
    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement; return its rows (``[]`` for statements without any)."""

    def execute_each(self, sql: str, params_seq: Sequence[Params]) -> list[list[Row]]:
        """Run one statement per parameter set and return each one's rows, in order.
        Backends override this when they can do it in fewer round trips."""
        return [self.execute(sql, p) for p in params_seq]


class Backend(ABC):
    """A database the ingest endpoint stores into. Safe to use from many threads."""

    dialect: str

    @abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        """Open a transaction; ``write`` ones are serialized against each other."""

    @abstractmethod
    def run_script(self, sql: str) -> None:
        """Run a multi-statement migration script inside the current migration lock."""

    @abstractmethod
    def migration_lock(self) -> AbstractContextManager[Tx]:
        """A write transaction that also excludes every other migrating process."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection this backend opened."""

    def migrate(self) -> list[int]:
        """Apply the migrations not applied yet; return the versions applied now."""
        applied_now: list[int] = []
        with self.migration_lock() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            done = {int(r[0]) for r in tx.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in migrations(self.dialect):
                if version in done:
                    continue
                self.run_script(sql)
                tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, utcnow()),
                )
                applied_now.append(version)
        return applied_now


def migrations(dialect: str) -> Iterator[tuple[int, str, str]]:
    """The packaged migrations of one dialect, in version order."""
    folder = resources.files("framework_ingest") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    yield from sorted(found)


def utcnow() -> str:
    """Now, as fixed-width ISO-8601 UTC text (sorts as text)."""
    return format_time(datetime.now(UTC))


def format_time(moment: datetime) -> str:
    """Fixed-width UTC text; raises OverflowError for a moment outside years 1-9999 in UTC."""
    utc = moment.astimezone(UTC)
    # Not strftime's %Y: the C library writes year 1 as "1", breaking the fixed width.
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"


def open_backend(url: str) -> Backend:
    """Open (and migrate) the database named by ``url``.

    ``sqlite:///relative.db``, ``sqlite:////abs/path.db`` (``?busy_timeout=<ms>``: how
    long a write waits for another process's lock before answering 503; default 30 s) or
    ``postgresql://...`` (``postgres://`` too); anything else is an
    :class:`IngestConfigError`.
    """
    backend: Backend
    if url.startswith("sqlite:///"):
        from framework_ingest.sqlite_backend import SqliteBackend

        path, _, query = url[len("sqlite:///") :].partition("?")
        if not path:
            raise IngestConfigError(f"no file in database URL {url!r}; e.g. sqlite:///ingest.db")
        options = dict(parse_qsl(query))
        busy = options.pop("busy_timeout", None)
        if options or (busy is not None and not busy.isdigit()):
            raise IngestConfigError(
                f"unsupported options in {url!r}; only ?busy_timeout=<milliseconds>"
            )
        backend = SqliteBackend(path, busy_timeout_ms=int(busy) if busy else None)
    elif url.startswith(("postgresql://", "postgres://")):
        from framework_ingest.postgres_backend import PostgresBackend

        backend = PostgresBackend(url)
    else:
        raise IngestConfigError(
            f"unsupported database URL {redact_url(url)!r}; "
            "expected sqlite:///path.db or postgresql://user@host/db"
        )
    try:
        backend.migrate()
    except BaseException:
        backend.close()
        raise
    return backend
