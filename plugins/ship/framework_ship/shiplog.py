"""The ship log: ``<workspace>/ship-log.jsonl``, one line per delivery attempt.

Owns the line format and the two ways of touching the file: appending attempts
(:class:`ShipLog`) and reading them back (:func:`read_attempts`). Each line::

    {"v": 1, "time": "2026-11-29T23:40:00.123Z", "dedupe_key": "src:1",
     "content_hash": "sha256:...", "attempt": 1, "http_status": 201,
     "outcome": "accepted", "latency_ms": 3.1, "error_class": null,
     "batch_id": "b7f0c2a1", "route": "/v1/items", "detail": null}

``outcome`` is the attempt's result: ``accepted`` / ``updated`` / ``duplicate`` /
``rejected`` / ``error`` (a failed attempt; a later line may say it succeeded).
``skipped`` items are not attempts and are never logged.

Rules: a line is written whole by one ``os.write`` on an ``O_APPEND`` descriptor as the
attempt ends (no user-space buffer, so ``kill -9`` loses at most the attempt in flight);
a torn last line (crash mid-write) is terminated before the next append and skipped on
read; a key or a server's text cannot act on a terminal (DEL, the C1 controls, the
bidirectional marks and U+2028/U+2029 are written as ``\\u`` escapes:
:func:`framework.jsontext.json_line`); nothing secret is ever written (no headers, no
token, no request body, and the server's ``detail`` goes through the run's
:class:`~framework_ship.mask.Masker`). The reader-side index of "latest outcome per
key" lives in :mod:`framework_ship.index`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from framework.files import open_nofollow
from framework.jsontext import json_line

LOG_VERSION = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt of one item, as logged."""

    dedupe_key: str
    content_hash: str
    attempt: int
    http_status: int | None
    outcome: str
    latency_ms: float
    error_class: str | None = None
    batch_id: str | None = None
    route: str | None = None
    detail: str | None = None
    time: str = ""

    def to_line(self, now: str | None = None, mask: Callable[[str], str] | None = None) -> bytes:
        # Built by hand, not dataclasses.asdict (which deep-copies): this runs once per
        # item per attempt, 10,000 times a second in batch mode.
        record = {
            "v": LOG_VERSION,
            "time": self.time or now or utc_now(),
            "dedupe_key": self.dedupe_key,
            "content_hash": self.content_hash,
            "attempt": self.attempt,
            "http_status": self.http_status,
            "outcome": self.outcome,
            "latency_ms": round(float(self.latency_ms), 2),
            "error_class": self.error_class,
            "batch_id": self.batch_id,
            "route": self.route,
            # The server's words: masked, a problem may quote the Authorization header.
            "detail": self.detail if mask is None or self.detail is None else mask(self.detail),
        }
        return json_line(record)


def utc_now() -> str:
    """``2026-11-29T23:40:00.123Z`` (cheap: it stamps every attempt, so the formatted
    second is kept and only the milliseconds are formatted anew)."""
    global _SECOND
    now = time.time()
    second = int(now)
    cached = _SECOND  # one tuple: threads always see a matching pair
    if cached[0] != second:
        cached = _SECOND = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{int(now * 1000) % 1000:03d}Z"


_SECOND: tuple[int, str] = (-1, "")  # (unix second, its formatted text)


class ShipLog:
    """Appends attempts; ``on_written(attempts, end_offset)`` runs under the same lock
    right after each write, so an index fed from it sees lines in file order."""

    def __init__(
        self,
        path: Path,
        on_written: Callable[[Sequence[Attempt], int], None] | None = None,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.path = path
        self.on_written = on_written
        self.mask = mask
        self._lock = threading.Lock()
        self._fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._terminate_torn_line()

    def _terminate_torn_line(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                # A crash mid-write left half a line; end it so the next line is whole.
                os.write(self._fd, b"\n")

    def write(self, attempts: Sequence[Attempt]) -> None:
        if not attempts:
            return
        now = utc_now()
        data = b"".join(a.to_line(now, self.mask) for a in attempts)
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.on_written is not None:
                self.on_written(attempts, os.lseek(self._fd, 0, os.SEEK_CUR))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> ShipLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_attempts(path: Path, start: int = 0) -> Iterator[tuple[dict[str, object], int]]:
    """Stream ``(record, end_offset)`` for each whole, valid line from byte ``start``.

    A line without its newline (the torn tail of a crash) is not yielded; a line that is
    not a JSON object (a torn line that was later terminated) is skipped.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - a generator closes it in finally
    except FileNotFoundError:
        return
    try:
        fh.seek(start)
        offset = start
        rest = b""
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                return
            buf = rest + chunk
            lines = buf.split(b"\n")
            rest = lines.pop()
            for line in lines:
                offset += len(line) + 1
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "dedupe_key" in record:
                    yield record, offset
    finally:
        fh.close()
