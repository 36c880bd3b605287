"""`framework workspace copy` for the ship step: its log and index move with the job.

Owns what a copied workspace needs so that ``framework ship`` there skips every key
already delivered with the same content: the latest outcome per key (``ship_latest`` on
PostgreSQL, ``ship-index.sqlite`` in a folder) and the ship log lines (the history).
Registered as the ``ship`` entry point of ``framework.workspace_copy``.

* folder -> PostgreSQL: every line of ``ship-log.jsonl`` becomes a ``ship_log`` row,
  under one ``shippers`` row standing for the copy; ``ship_latest`` is the index rebuilt
  from that log (the same replay ``framework ship`` does).
* PostgreSQL -> folder: the ``ship_log`` rows that were recorded (not the fenced ones,
  which never counted) become the JSONL lines, and ``ship_latest`` is written as the
  index, marked as caught up with that log: a key marked to ship again after a fenced
  late success stays marked (a replay of the lines alone would lose that).

Not copied: claims (the leases of shippers running at that moment; the copy holds the
``crawl`` locks, which shippers do not take, so a shipper should not run meanwhile) and
Retry-After deadlines (a host's pause, by the clock of the machine that set it). A
destination with ship state of its own is refused before any state is copied into it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from framework.files import open_nofollow
from framework_ship.index import INDEX_FILE, INDEX_VERSION, ShipIndex, _prepare, connect_index
from framework_ship.pg_db import ShipDb
from framework_ship.shiplog import Attempt, read_attempts

_CHUNK = 1000

_INSERT_LOG = (
    "INSERT INTO ship_log (time, shipper, dedupe_key, content_hash, attempt, http_status, "
    "outcome, latency_ms, error_class, batch_id, route, detail, token, fenced) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NULL, false)"
)


class ShipCopy:
    """The :class:`framework.plugins.WorkspaceCopyHook` of the ship step."""

    def refuse(self, source: Any, destination: Any) -> str | None:
        if destination.is_database:
            db = ShipDb(destination.store.url, readonly=True)
            try:
                if not db.has_ship_tables():
                    return None
                got = (
                    db._conn()
                    .execute(
                        "SELECT EXISTS (SELECT 1 FROM ship_log) "
                        "OR EXISTS (SELECT 1 FROM ship_latest)"
                    )
                    .fetchone()
                )
            finally:
                db.close()
            busy = bool(got and got[0])
        else:
            # a link counts (lexists): it is refused when written, not written through
            busy = any(
                os.path.lexists(p)
                for p in (destination.ship_log_path, destination.path / INDEX_FILE)
            )
        if busy:
            return (
                f"{destination.where}: the destination already has a ship log: "
                "copy into an empty workspace"
            )
        return None

    def copy(self, source: Any, destination: Any) -> str | None:
        if source.is_database and destination.is_database:
            return None  # not a copy this command makes (folder <-> database only)
        if source.is_database:
            n = _pg_to_folder(source, destination)
        else:
            n = _folder_to_pg(source, destination)
        return None if n is None else f"{n} ship log lines"


def _folder_to_pg(source: Any, destination: Any) -> int | None:
    log_path = source.ship_log_path
    if not log_path.exists():
        return None
    # The index as `framework ship` would rebuild it from this log, in memory: the
    # folder's own index file may lag its log by a few lines after a kill.
    index = ShipIndex._from_log(log_path)
    with ShipIndex.open(source.path, log_path, readonly=True) as own:
        last_run = own.last_run()  # `framework status` shows it; the log does not hold it
    db = ShipDb.open_ship(destination.store.url)
    try:

        def work(conn: Any) -> int:
            now = time.time()
            got = conn.execute(
                "INSERT INTO shippers (host, pid, started_at, heartbeat_at, stopped_at, "
                "summary) VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    socket.gethostname(),
                    os.getpid(),
                    now,
                    now,
                    now,
                    None if last_run is None else json.dumps(last_run),
                ),
            ).fetchone()
            shipper = int(got[0])
            n = 0
            with conn.cursor() as cur:
                chunk: list[tuple[Any, ...]] = []
                for record, _end in read_attempts(log_path):
                    chunk.append(
                        (
                            str(record.get("time") or ""),
                            shipper,
                            str(record["dedupe_key"]),
                            str(record.get("content_hash", "")),
                            int(record.get("attempt") or 0),  # type: ignore[call-overload]
                            record.get("http_status"),
                            str(record.get("outcome", "error")),
                            float(record.get("latency_ms") or 0.0),  # type: ignore[arg-type]
                            record.get("error_class"),
                            record.get("batch_id"),
                            record.get("route"),
                            record.get("detail"),  # masked when first written
                        )
                    )
                    if len(chunk) >= _CHUNK:
                        cur.executemany(_INSERT_LOG, chunk)
                        n, chunk = n + len(chunk), []
                if chunk:
                    cur.executemany(_INSERT_LOG, chunk)
                    n += len(chunk)
                rows = index._db.execute("SELECT key, hash, outcome, ok_hash FROM latest")
                while batch := rows.fetchmany(_CHUNK):
                    cur.executemany(
                        "INSERT INTO ship_latest (dedupe_key, hash, outcome, ok_hash) "
                        "VALUES (%s, %s, %s, %s)",
                        batch,
                    )
            return n

        n: int = db._run(work)
    finally:
        db.close()
        index.close()
    return n


def _pg_to_folder(source: Any, destination: Any) -> int | None:
    db = ShipDb(source.store.url, readonly=True)
    try:
        if not db._version(db._conn()) or not db.has_ship_tables():
            return None
        conn = db._conn()
        log_path = destination.ship_log_path
        n = 0
        # One snapshot for the log and the index: a shipper may still record meanwhile.
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # new and private (0600); O_EXCL: never through a link, even a dangling one
            created = open_nofollow(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            with os.fdopen(created, "wb") as fh, conn.cursor(name="ship_copy") as cur:
                cur.execute(
                    "SELECT time, dedupe_key, content_hash, attempt, http_status, outcome, "
                    "latency_ms, error_class, batch_id, route, detail FROM ship_log "
                    "WHERE NOT fenced ORDER BY id"
                )
                while batch := cur.fetchmany(_CHUNK):
                    fh.write(b"".join(_attempt(r).to_line() for r in batch))
                    n += len(batch)
                fh.flush()
                os.fsync(fh.fileno())
            latest = conn.execute(
                "SELECT dedupe_key, hash, outcome, ok_hash FROM ship_latest ORDER BY dedupe_key"
            ).fetchall()
            last = conn.execute(
                "SELECT summary FROM shippers WHERE summary IS NOT NULL "
                "ORDER BY stopped_at DESC, id DESC LIMIT 1"
            ).fetchone()
    finally:
        db.close()
    _write_index(destination.path / INDEX_FILE, log_path, latest, last[0] if last else None)
    return n


def _attempt(r: tuple[Any, ...]) -> Attempt:
    """A ``ship_log`` row (the columns :func:`_pg_to_folder` selects) as a logged attempt;
    its ``detail`` was masked when first recorded."""
    return Attempt(
        time=r[0], dedupe_key=r[1], content_hash=r[2], attempt=r[3], http_status=r[4],
        outcome=r[5], latency_ms=r[6], error_class=r[7], batch_id=r[8], route=r[9],
        detail=r[10],
    )  # fmt: skip


def _write_index(path: Any, log_path: Any, latest: list[Any], last_run: str | None) -> None:
    """``ship-index.sqlite`` holding ``latest``, caught up with the whole log (so the
    next opener applies nothing from it)."""
    st = os.stat(log_path)
    index = connect_index(path)
    try:
        _prepare(index)
        index.execute("BEGIN")
        index.executemany(
            "INSERT INTO latest (key, hash, outcome, ok_hash) VALUES (?, ?, ?, ?)",
            [(k, bytes(h), o, None if ok is None else bytes(ok)) for k, h, o, ok in latest],
        )
        meta = [
            ("log_offset", str(st.st_size)),
            ("log_ino", str(st.st_ino)),
            ("version", str(INDEX_VERSION)),
        ]
        if last_run is not None:
            meta.append(("last_run", json.dumps(json.loads(last_run))))
        index.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", meta)
        index.execute("COMMIT")
    finally:
        index.close()
