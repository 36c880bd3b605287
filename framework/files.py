"""Files the framework writes in a workspace: never through a symbolic link.

A workspace can be copied, shared or unpacked from someone else (``ship --workspace
DIR`` on a copied folder is a documented route). A symlink planted there under the
name of a log or a lock would have the framework append site-chosen lines to, or
truncate, whatever it points at (a shell's rc file, say). Every log and lock is opened
with ``O_NOFOLLOW``, and the SQLite state files, which SQLite opens itself, are checked
before it does. New files are private to their owner (0600): they hold logged-in pages.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from framework.errors import WorkspaceError

__all__ = ["link_refused", "open_nofollow", "refuse_links"]


def link_refused(path: str | os.PathLike[str]) -> WorkspaceError:
    return WorkspaceError(
        f"{os.fspath(path)} is a symbolic link: the framework never writes through one "
        "(it would write wherever the link points); replace it with a file or remove it"
    )


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
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
