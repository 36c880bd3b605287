"""Files the framework writes in a workspace: never through a symbolic link.

A workspace can be copied, shared or unpacked from someone else (``ship --workspace
DIR`` on a copied folder is a documented route). A symlink planted there under the
name of a log or a lock would have the framework append site-chosen lines to, or
truncate, whatever it points at (a shell's rc file, say). Every log and lock is opened
with ``O_NOFOLLOW``, and the SQLite state files, which SQLite opens itself, are checked
before it does. New files are private to their owner (0600), and new folders too
(0700): they hold logged-in pages. What exists already keeps its mode (the owner's
choice), whatever the umask would give a new one.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from framework.errors import WorkspaceError

__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "create_private",
    "link_refused",
    "make_private_dir",
    "open_nofollow",
    "refuse_links",
]

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def link_refused(path: str | os.PathLike[str]) -> WorkspaceError:
    return WorkspaceError(
        f"{os.fspath(path)} is a symbolic link: the framework never writes through one "
        "(it would write wherever the link points); replace it with a file or remove it"
    )


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = PRIVATE_FILE) -> int:
    """``os.open(path, flags, mode)`` that refuses a symlink as the last component."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(path) from None
        raise


def refuse_links(folder: Path, names: Iterable[str]) -> None:
    """Refuse the folder if any of ``names`` in it is a symlink (files that another
    library opens, where ``O_NOFOLLOW`` cannot be passed)."""
    for name in names:
        if (folder / name).is_symlink():
            raise link_refused(folder / name)


def make_private_dir(folder: Path) -> None:
    """``folder`` and its missing parents made, each new one 0700 (``mkdir -p``, and
    ``Path.mkdir(parents=True)``, would make the parents by the umask: 0755)."""
    if folder.is_dir():
        return
    parent = folder.parent
    if parent != folder:
        make_private_dir(parent)
    folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)


def create_private(path: Path) -> None:
    """``path`` made an empty 0600 file when missing (never through a link), so that a
    library that creates it otherwise (SQLite: 0644 under the usual umask, and its
    ``-wal``/``-shm`` files take the database's mode) finds it private."""
    try:
        fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except (FileExistsError, FileNotFoundError):  # a missing folder: the library says so
        return
    os.close(fd)
