"""PostgreSQL backend: psycopg 3, one connection per thread (the server's thread pool
bounds how many), transactions through ``Connection.transaction()``.

SQL arrives written with ``?`` placeholders and is translated to psycopg's ``%s`` once
per statement text. Migrations take a transaction-scoped advisory lock so that two
servers starting together do not both create the schema. This module owns connections
and transactions only; the SQL lives in the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache

import psycopg
import psycopg.errors

from framework.connections import ThreadConnections
from framework.redact import redact_url
from framework_ingest.db import Backend, Params, Row, Tx
from framework_ingest.errors import BackendUnavailable, TransactionConflict

# An arbitrary constant naming "the ingest schema migration" among advisory locks.
_MIGRATION_LOCK_ID = 0x1D6E57


@lru_cache(maxsize=256)
def _translate(sql: str) -> str:
    return sql.replace("?", "%s")


class _PgTx(Tx):
    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        cur = self._conn.execute(_translate(sql), tuple(params) if params else None)
        return cur.fetchall() if cur.description is not None else []

    def execute_each(self, sql: str, params_seq: Sequence[Params]) -> list[list[Row]]:
        if not params_seq:
            return []
        # executemany(returning=True) pipelines the statements: one round trip, not N.
        with self._conn.cursor() as cur:
            cur.executemany(_translate(sql), [tuple(p) for p in params_seq], returning=True)
            out: list[list[Row]] = []
            while True:
                out.append(cur.fetchall() if cur.description is not None else [])
                if not cur.nextset():
                    break
        return out


class PostgresBackend(Backend):
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self._conns = ThreadConnections(self._connect, lambda c: not (c.closed or c.broken))

    def _conn(self) -> psycopg.Connection:
        return self._conns.get()

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise BackendUnavailable(
                f"cannot connect to {redact_url(self.url)}: {type(exc).__name__}"
            ) from exc

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        conn = self._conn()
        try:
            with conn.transaction():
                yield _PgTx(conn)
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            raise TransactionConflict(f"transaction aborted: {type(exc).__name__}") from exc
        except psycopg.OperationalError as exc:
            raise BackendUnavailable(f"database unavailable: {type(exc).__name__}") from exc

    @contextmanager
    def migration_lock(self) -> Iterator[Tx]:
        with self.transaction(write=True) as tx:
            tx.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK_ID,))
            yield tx

    def run_script(self, sql: str) -> None:
        # No parameters: psycopg sends the whole script as one simple query.
        self._conn().execute(sql.encode("utf-8"))

    def close(self) -> None:
        self._conns.close()
