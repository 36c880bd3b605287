"""Append-only JSON Lines logs (``urls.jsonl``, ``events.jsonl``, ``ship-log.jsonl``).

Owns the line format and the torn-line rule; it does not decide what goes in a line
(the crawl, ship and CLI writers do) and never rewrites a whole line that was written.

* A line is written whole: one ``os.write`` of ``json + "\\n"`` on an ``O_APPEND`` file
  descriptor, so appenders in several processes never interleave inside a line.
* Each append holds an exclusive ``flock`` on the log file for the few microseconds
  it takes. Under that lock it looks at the last byte: a file that does not end with
  ``"\\n"`` holds a torn line left by a writer killed mid-write. The tail is repaired
  before the new line goes in: a tail that parses as one whole JSON object is terminated
  with ``"\\n"`` (the writer died between the object and its newline), anything else is
  truncated away (it never was a record). Because every appender takes the same lock,
  the repair can never cut a line another process is writing.
* A line is compact JSON with non-ASCII letters as they are, and every character that
  acts rather than shows (DEL, the C1 controls, the bidirectional marks, U+2028/U+2029)
  written as a ``\\u`` escape (:mod:`framework.jsontext`): a site's text in a URL or a
  key cannot drive the terminal of whoever reads the log.
* Readers skip invalid lines and a last line without ``"\\n"`` (torn, or being written
  right now) and count them in :attr:`JsonlLog.skipped`.
* :func:`framework.redact.redact` masks secret-looking keys (and secret query
  parameters inside URL strings) in every record before it is written: defence in
  depth, writers should not hand secrets here in the first place.
* A writer that knows secret *values* (the crawl: the values of a spec's
  ``{env:NAME}`` references) sets :attr:`JsonlLog.masker`, which every record passes
  through before it is written, whoever appends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.files import open_nofollow
from framework.jsontext import json_line, json_object
from framework.locks import locked

# Redaction is framework.redact's (the ingest door needs it and must not import a
# workspace); these names stay importable from here for older callers.
from framework.redact import (
    REDACTED as REDACTED,
)
from framework.redact import (
    is_secret_key as is_secret_key,
)
from framework.redact import (
    is_secret_param as is_secret_param,
)
from framework.redact import (
    redact as redact,
)
from framework.redact import (
    redact_url as redact_url,
)

_BLOCK = 65536  # bytes read at a time when reading a log backwards


def dumps_line(record: Mapping[str, Any]) -> bytes:
    """One whole line: compact JSON, what acts rather than shows escaped
    (:func:`framework.jsontext.json_line`), anything not JSON as its text."""
    return json_line(record, default=str)


class JsonlLog:
    """One JSON Lines file. Appends are whole lines; reads skip torn lines."""

    def __init__(self, path: str | Path, *, fsync: bool = False, redact: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync  # fsync after each line: survives an OS crash, costs a disk flush
        self.redact = redact
        self.skipped = 0  # lines skipped by the last read (either direction)
        self.repaired = 0  # torn tails repaired by this writer
        # Replaces known secret values in a record (set by the crawl; see the docstring).
        self.masker: Callable[[Any], Any] | None = None
        self._fd: int | None = None

    # writing -----------------------------------------------------------------
    def append(self, record: Mapping[str, Any], *, redacted: bool = False) -> None:
        """Append one whole line. ``redacted=True``: the caller built the record from
        known, secret-free fields and masked its URLs itself (``redact_url``), so the
        generic walk is skipped (the crawl's per-request hot path)."""
        if self.masker is not None:
            record = self.masker(record)
        self._write(dumps_line(redact(record) if self.redact and not redacted else record))

    def append_many(self, records: Sequence[Mapping[str, Any]], *, redacted: bool = False) -> None:
        """Append whole lines in one write (the lines of one group commit), so a kill
        leaves all or none of them (a torn last line is repaired by the next writer)."""
        lines = []
        for record in records:
            if self.masker is not None:
                record = self.masker(record)
            lines.append(dumps_line(redact(record) if self.redact and not redacted else record))
        if lines:
            self._write(b"".join(lines))

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = open_nofollow(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        fd = self._fd
        with locked(fd):
            self._repair(fd)
            view = memoryview(data)
            while view:  # a regular file takes it in one write; a short write continues
                view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)

    def _repair(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        # Read back through the torn tail to the last newline.
        with open(self.path, "rb") as f:
            start = max(0, size - 65536)
            while True:
                f.seek(start)
                block = f.read(size - start)
                cut = block.rfind(b"\n")
                if cut >= 0:
                    cut += start + 1
                    break
                if start == 0:
                    cut = 0
                    break
                start = max(0, start - 65536)
            f.seek(cut)
            tail = f.read(size - cut)
        self.repaired += 1
        if json_object(tail) is not None:
            os.write(fd, b"\n")
        else:
            os.ftruncate(fd, cut)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort for forgotten logs
        with contextlib.suppress(Exception):  # interpreter shutdown: nobody to tell
            self.close()

    # reading -----------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.read()

    def read(self) -> Iterator[dict[str, Any]]:
        """Stream every whole record; count skipped lines in :attr:`skipped`."""
        self.skipped = 0
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in finally, generator
        except FileNotFoundError:
            return
        try:
            for raw in f:
                record = self._parse(raw)
                if record is None:
                    self.skipped += 1
                else:
                    yield record
        finally:
            f.close()

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any] | None:
        if not raw.endswith(b"\n"):
            return None  # torn, or still being written
        return json_object(raw)

    def tail(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` whole records, reading backwards in blocks (never the whole
        file unless it is needed)."""
        if n <= 0:
            return []
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            return []
        with f:
            pos = f.seek(0, os.SEEK_END)
            buf, need = b"", n
            while True:
                while pos > 0 and buf.count(b"\n") <= need:
                    step = min(65536, pos)
                    pos -= step
                    f.seek(pos)
                    buf = f.read(step) + buf
                lines = buf.split(b"\n")
                lines.pop()  # after the last newline: empty, or a torn line
                if pos > 0:
                    lines.pop(0)  # cut by the block edge
                records = [r for r in (self._parse(raw + b"\n") for raw in lines) if r]
                if len(records) >= n or pos == 0:
                    return records[-n:]
                need *= 2  # invalid lines were skipped: read further back

    def newest_first(self, events: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every whole record, newest first, reading backwards in blocks: what a reader
        of the latest events needs costs the log's recent end, not its whole length.
        With ``events``, only the records whose ``event`` is one of them: a line that
        does not hold one of those names as a JSON string is passed over unparsed (the
        names are ASCII, which JSON writers do not escape), so a reader that must go
        far back pays a search per block, not a parse per line. The lines read that are
        not records are counted in :attr:`skipped`, as :meth:`read` counts them."""
        self.skipped = 0
        names = frozenset(events) if events is not None else None
        # one search of a whole block passes over a block of other events at C speed
        named = (
            re.compile(b"|".join(re.escape(json.dumps(n).encode()) for n in sorted(names)))
            if names
            else None
        )
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            return
        with f:
            pos = f.seek(0, os.SEEK_END)
            head = b""  # read, not yet yielded: the end of a line that began further back
            while pos > 0:
                step = min(_BLOCK, pos)
                pos -= step
                f.seek(pos)
                head = f.read(step) + head
                if pos > 0:
                    cut = head.find(b"\n")
                    if cut < 0:
                        continue  # one line longer than the blocks read so far
                    head, body = head[: cut + 1], head[cut + 1 :]
                else:
                    head, body = b"", head
                # after body's last newline: the file's torn or empty tail on the first
                # block, nothing on the others (each ends where a line began)
                whole = body.rfind(b"\n") + 1
                if whole < len(body):
                    self.skipped += 1  # torn, or being written right now
                if names is not None and (named is None or not named.search(body, 0, whole)):
                    continue
                lines = body[:whole].split(b"\n")
                lines.pop()  # after the last newline: empty
                for raw in reversed(lines):
                    if named is not None and not named.search(raw):
                        continue
                    record = self._parse(raw + b"\n")
                    if record is None:
                        self.skipped += 1
                    elif names is None or record.get("event") in names:
                        yield record

    def last(self, events: Collection[str]) -> dict[str, Any] | None:
        """The newest record whose ``event`` is one of ``events`` (None: there is none)."""
        for record in self.newest_first(events):
            return record
        return None


__all__ = [
    "REDACTED",
    "JsonlLog",
    "dumps_line",
    "is_secret_key",
    "is_secret_param",
    "redact",
    "redact_url",
]
