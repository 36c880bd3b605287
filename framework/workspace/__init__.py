"""The workspace: one folder per job, the job's JOBDIR, and the only state a crawl keeps.

This package is the public door (``__all__``); its modules are private details::

    var/<job>/                    default place (`--workspace DIR` / `-s JOBDIR=` move it)
    |-- state.sqlite              queue rows, attempt history, items, meta (WAL mode)
    |-- state.sqlite-wal          \\ SQLite's write-ahead log and its index: part of the
    |-- state.sqlite-shm          /  state, never delete them by hand
    |-- urls.jsonl                one line per request actually sent          (crawl)
    |-- events.jsonl              run started/resumed/finished, spec changed,
    |                             requeued ... the audit trail                (crawl, CLI)
    |-- ship-log.jsonl            one line per delivery attempt               (ship)
    |-- crawl.lock                flock held while a crawl or requeue runs
    `-- ship.lock                 flock held while ship runs

* :class:`Workspace` opens the folder (``Workspace.open(path)``) and its locks.
* :class:`SqliteStore` is the embedded :class:`Store` (the storage contract; a
  database workspace's is PostgreSQL's, the SQL of both written once in ``sql.py``,
  ``read.py`` and ``write.py``).
* :class:`JsonlLog` appends whole lines and tolerates a torn last line.

The format on disk is documented in ``docs/workspace.md``; readers (status, ship) rely
on it. Nothing secret is ever written to any of these files.
"""

from __future__ import annotations

from framework.redact import redact, redact_url
from framework.workspace.fill import last_extraction, rates
from framework.workspace.jsonl import JsonlLog
from framework.workspace.leases import pid_alive
from framework.workspace.locate import is_database_url
from framework.workspace.postgres_base import PgBase  # psycopg itself loads on first use
from framework.workspace.records import (
    CommitResult,
    ErrorKind,
    ItemWrite,
    NewRow,
    Outcome,
    PartWrite,
    Row,
    RowStatus,
    StoredItem,
    canonical_json,
    content_hash,
)
from framework.workspace.sqlite import SqliteStore, utc_now
from framework.workspace.status import build_status
from framework.workspace.store import RequeueFilter, Store
from framework.workspace.workspace import Workspace

__all__ = [
    "CommitResult",
    "ErrorKind",
    "ItemWrite",
    "JsonlLog",
    "NewRow",
    "Outcome",
    "PartWrite",
    "PgBase",
    "RequeueFilter",
    "Row",
    "RowStatus",
    "SqliteStore",
    "Store",
    "StoredItem",
    "Workspace",
    "build_status",
    "canonical_json",
    "content_hash",
    "is_database_url",
    "last_extraction",
    "pid_alive",
    "rates",
    "redact",
    "redact_url",
    "utc_now",
]
