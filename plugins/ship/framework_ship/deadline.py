"""The shared Retry-After deadline of one endpoint host, kept in the workspace.

Owns ``<workspace>/ship-deadline-<host>.json``: the instant before which nobody may
send to that host because the server said ``Retry-After``. Rules, learnt the hard way
(a deleted deadline file raced with a fresh ban):

* the deadline only ever moves later; :meth:`Deadline.push` of an earlier instant is a
  no-op;
* the file is never deleted; an expired deadline simply lies in the past;
* writes are atomic (temp file + ``os.replace``) and serialised by an ``flock`` on a
  sidecar lock file, so two shippers cannot move it backwards between read and write;
* every shipper reads it before every send (:meth:`Deadline.until`, cheap: the file is
  re-read only when its ``stat`` changes).

It does not decide whether to sleep or to stop; the run loop does, against the cap.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from framework.locks import hold

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def host_of(endpoint: str) -> str:
    """The host (and port) an endpoint URL points at: the unit a ban applies to."""
    parts = urlsplit(endpoint)
    return (parts.netloc or parts.path).lower().rsplit("@", 1)[-1]


def deadline_path(directory: Path, host: str) -> Path:
    return directory / f"ship-deadline-{_SAFE.sub('_', host)}.json"


class Deadline:
    """The Retry-After deadline of one host (epoch seconds; 0 when never set)."""

    def __init__(self, directory: Path, host: str, clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.path = deadline_path(directory, host)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._clock = clock
        self._cache_key: tuple[int, int, int] | None = None
        self._until = 0.0
        self._mutex = threading.Lock()

    def until(self) -> float:
        """The current deadline, re-read only when the file changed."""
        with self._mutex:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return self._until
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key != self._cache_key:
                self._until = max(self._until, self._read())
                self._cache_key = key
            return self._until

    def remaining(self) -> float:
        """Seconds from now until the deadline (0 when it is past)."""
        return max(0.0, self.until() - self._clock())

    def push(self, until: float, reason: str = "") -> float:
        """Move the deadline to ``until`` if that is later; return the deadline now."""
        with self._mutex, self._flock():
            current = max(self._until, self._read())
            if until <= current:
                self._until = current
                return current
            record = {
                "host": self.host,
                "until": until,
                "until_iso": _iso(until),
                "set_at": _iso(self._clock()),
                "reason": reason,
            }
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(record, fh)
                    fh.write("\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            self._until = until
            self._cache_key = None
            return until

    def _read(self) -> float:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0.0
        try:
            value = json.loads(raw).get("until", 0.0)
            return float(value)
        except (ValueError, TypeError, AttributeError):
            # A damaged file must not lift a ban: keep what we knew.
            return self._until

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        # blocking: the other holders are shippers writing the same small file
        with hold(self._lock_path, block=True):
            yield


def read_deadline(directory: Path, host: str | None = None) -> dict[str, object] | None:
    """The latest deadline record under ``directory`` (for status); None if none."""
    paths = (
        [deadline_path(directory, host)]
        if host is not None
        else sorted(directory.glob("ship-deadline-*.json"))
    )
    best: dict[str, object] | None = None
    for path in paths:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and (
            best is None or float(record.get("until", 0)) > float(str(best.get("until", 0)))
        ):
            best = record
    return best


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
