"""Advisory file locks (``flock``): the one place that calls it.

The kernel's flock is the truth: it is dropped when its holder dies, even by
``kill -9``. A lock file's text only says who holds it (JSON, written by the holder and
emptied on release); lock files are never deleted, since deleting one races with a
process that has just opened it. Users: the workspace's ``crawl.lock`` and ``ship.lock``
(framework.workspace.workspace), the crawl workers' shares of ``crawl.lock``
(framework.crawl.workers), the JSON Lines appends (framework.workspace.jsonl) and the
shipper's deadline file (framework_ship.deadline).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from framework.errors import LockHeld
from framework.files import open_nofollow
from framework.jsontext import json_object

__all__ = ["held_by", "hold", "lock_fd", "lock_held", "locked", "read_holder", "unlock_fd"]


def lock_fd(fd: int, *, shared: bool = False, block: bool = True) -> bool:
    """Take (or change to) an exclusive or ``shared`` lock on ``fd``; False when
    ``block`` is off and another process holds a conflicting one."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode if block else mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock_fd(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def locked(fd: int, *, shared: bool = False) -> Iterator[None]:
    """Hold a lock on an open ``fd`` for the block, waiting for it (short critical
    sections: a log append, a deadline write)."""
    lock_fd(fd, shared=shared)
    try:
        yield
    finally:
        unlock_fd(fd)


@contextmanager
def hold(path: Path, *, shared: bool = False, block: bool = False) -> Iterator[int]:
    """Open (create) the lock file at ``path`` without following a link and hold its
    lock for the block; yields the descriptor (the holder writes its text through it).
    Not ``block``: a lock another process holds raises :class:`LockHeld` naming it."""
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        if not lock_fd(fd, shared=shared, block=block):
            raise lock_held(path, read_holder(path))
        try:
            yield fd
        finally:
            unlock_fd(fd)
    finally:
        os.close(fd)


def held_by(path: Path) -> dict[str, Any] | None:
    """Who holds the lock file at ``path`` right now, without taking it: asks the flock
    itself (a shared, non-blocking probe on its own descriptor), so a holder killed by
    ``kill -9`` or a reused pid is never reported as running; the file's text then
    names the holder. Usable before any workspace is opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if not lock_fd(fd, shared=True, block=False):
            return read_holder(path) or {"pid": None, "host": None, "started": None}
        unlock_fd(fd)
        return None
    finally:
        os.close(fd)


def lock_held(path: Path, holder: dict[str, Any] | None) -> LockHeld:
    """The one-line error for a lock that ``holder`` holds."""
    who = (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
        f"since {holder.get('started', '?')}"
        if holder and holder.get("pid") is not None
        else "another process"
    )
    return LockHeld(f"{path} is held by {who}")


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder a lock file's text names, or None (empty, unreadable, not JSON)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return json_object(text) if text else None
