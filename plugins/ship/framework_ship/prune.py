"""`framework ship --prune`: compact ``ship-log.jsonl`` without changing any decision.

Owns the compaction of the ship log. The log grows by one line per attempt forever;
what a later run needs from it is only, per dedupe key, what the side index keeps
(:mod:`framework_ship.index`): the latest attempt (its content hash and outcome) and the
latest success. Pruning keeps

* one success line per key and version (content hash): the latest one of each, so the
  history of which versions were delivered stays, and the last of them is still the
  key's latest success;
* the latest line of every key whose latest line is not a success (a rejection held for
  review, an error still to ship), after those,

in the log's order, and drops the rest (failed attempts that were retried, repeated
successes of one version, torn lines). Replaying the pruned log gives every key the
same (latest hash, latest outcome, latest success hash) as the full log, so a run after
pruning ships, skips and holds exactly what it would have before.

Safety: it holds the shipper lock (no run appends meanwhile), writes the kept lines to
a temporary file in the workspace, fsyncs it, renames it over the log and fsyncs the
folder: a crash leaves either the old log or the new one, whole. The side index is then
rebuilt from the new log (it sees another inode), keeping the last run's summary. The
plan is kept in a temporary SQLite file, not in memory: a log of a million keys must
not need a dict of a million keys.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from framework_ship.index import SUCCESS, ShipIndex, digest

PRUNE_PREFIX = "ship-log.jsonl.prune-"


@dataclass(frozen=True)
class PruneResult:
    lines_before: int  # whole, valid lines
    lines_after: int
    bytes_before: int
    bytes_after: int
    keys: int
    written: bool

    def line(self) -> str:
        verb = "pruned" if self.written else "would prune (dry run, nothing written)"
        return (
            f"ship --prune: {verb} ship-log.jsonl from {self.lines_before:,} to "
            f"{self.lines_after:,} lines ({_mb(self.bytes_before)} -> {_mb(self.bytes_after)}), "
            f"{self.keys:,} keys: one success line per key and version, and the latest "
            "line of each key not delivered since"
        )


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line with its newline) of each whole line; a torn tail (no
    newline) is not yielded."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh):
            if raw.endswith(b"\n"):
                yield number, raw


def _plan(log_path: Path, db: sqlite3.Connection) -> tuple[int, int]:
    """Fill ``keep(line)`` with the line numbers to keep; returns (valid lines, keys)."""
    db.execute("CREATE TABLE ok (key TEXT, hash BLOB, line INTEGER, PRIMARY KEY (key, hash))")
    db.execute("CREATE TABLE last (key TEXT PRIMARY KEY, line INTEGER, success INTEGER)")
    db.execute("BEGIN")
    valid = 0
    ok_rows: list[tuple[str, bytes, int]] = []
    last_rows: list[tuple[str, int, int]] = []

    def flush() -> None:
        db.executemany("INSERT OR REPLACE INTO ok VALUES (?, ?, ?)", ok_rows)
        db.executemany("INSERT OR REPLACE INTO last VALUES (?, ?, ?)", last_rows)
        ok_rows.clear()
        last_rows.clear()

    for number, raw in _lines(log_path):
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a torn line a later append terminated: the index skips it too
        if not isinstance(record, dict) or "dedupe_key" not in record:
            continue
        valid += 1
        key = str(record["dedupe_key"])
        success = str(record.get("outcome", "error")) in SUCCESS
        if success:
            ok_rows.append((key, digest(str(record.get("content_hash", ""))), number))
        last_rows.append((key, number, int(success)))
        if len(last_rows) >= 10_000:
            flush()
    flush()
    db.execute("CREATE TABLE keep (line INTEGER PRIMARY KEY)")
    db.execute("INSERT OR IGNORE INTO keep SELECT line FROM ok")
    db.execute("INSERT OR IGNORE INTO keep SELECT line FROM last WHERE success = 0")
    db.execute("COMMIT")
    keys = int(db.execute("SELECT count(*) FROM last").fetchone()[0])
    return valid, keys


def prune_log(directory: Path, log_path: Path, dry_run: bool = False) -> PruneResult:
    """Compact the log in ``directory`` (the workspace). The caller holds the shipper
    lock (unless ``dry_run``, which writes nothing)."""
    for stale in directory.glob(PRUNE_PREFIX + "*"):
        if not dry_run:
            stale.unlink(missing_ok=True)  # left by a prune that crashed before its rename
    if not log_path.exists():
        return PruneResult(0, 0, 0, 0, 0, written=False)
    size_before = log_path.stat().st_size
    plan_dir = tempfile.mkdtemp(prefix="ship-prune-", dir=None if dry_run else directory)
    plan_path = Path(plan_dir) / "plan.sqlite"
    db = sqlite3.connect(plan_path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        valid, keys = _plan(log_path, db)
        kept = db.execute("SELECT line FROM keep ORDER BY line")
        if dry_run:
            kept_lines = 0
            size_after = 0
            wanted = _next(kept)
            for number, raw in _lines(log_path):
                if number == wanted:
                    kept_lines += 1
                    size_after += len(raw)
                    wanted = _next(kept)
            return PruneResult(valid, kept_lines, size_before, size_after, keys, written=False)
        # The last run's summary lives only in the index, which the new log rebuilds.
        with ShipIndex.open(directory, log_path) as index:
            last_run = index.last_run()
        kept_lines, size_after = _rewrite(log_path, directory, kept)
    finally:
        db.close()
        plan_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.rmdir(plan_dir)
    # Opening sees another inode and rebuilds the index from the pruned log.
    with ShipIndex.open(directory, log_path) as index:
        if last_run is not None:
            index.set_last_run(last_run)
    return PruneResult(valid, kept_lines, size_before, size_after, keys, written=True)


def _next(cursor: sqlite3.Cursor) -> int:
    row = cursor.fetchone()
    return -1 if row is None else int(row[0])


def _rewrite(log_path: Path, directory: Path, kept: sqlite3.Cursor) -> tuple[int, int]:
    """Write the kept lines (in log order) to a temp file, fsync, rename over the log,
    fsync the folder. Returns (lines, bytes) written."""
    mode = log_path.stat().st_mode & 0o7777  # the log keeps its permissions
    fd, tmp_name = tempfile.mkstemp(prefix=PRUNE_PREFIX, dir=directory)
    tmp = Path(tmp_name)
    lines = size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            wanted = _next(kept)
            for number, raw in _lines(log_path):
                if number == wanted:
                    out.write(raw)
                    lines += 1
                    size += len(raw)
                    wanted = _next(kept)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)  # mkstemp's file is private (0600)
        os.replace(tmp, log_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return lines, size


__all__ = ["PruneResult", "prune_log"]
