"""Where a workspace's state lives: a folder (its ``state.sqlite``) or a PostgreSQL URL.

Owns the one decision "which store backs this target" and opening it; it knows nothing
of locks or logs (:mod:`framework.workspace.workspace` keeps those for a folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.errors import WorkspaceError
from framework.files import make_private_dir

STATE_FILE = "state.sqlite"  # as framework.workspace.workspace.STATE_FILE
PG_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a folder."""
    return isinstance(target, str) and target.startswith(PG_SCHEMES)


def no_workspace(path: str | Path, state: str = STATE_FILE) -> WorkspaceError:
    """The error for a workspace that does not exist yet, saying what makes one."""
    return WorkspaceError(
        f"no workspace at {path} (no {state}): nothing was crawled into it yet; "
        "`framework crawl JOB` makes it"
    )


def open_store(target: str | Path, *, readonly: bool = False, create: bool = True) -> Any:
    """A :class:`~framework.workspace.store.Store` on ``target``: a PostgreSQL URL, a
    workspace folder, or a ``state.sqlite`` file. ``create`` makes a missing folder and
    its state (a database's schema is always created when missing, unless
    ``readonly``)."""
    if is_database_url(target):
        from framework.workspace.postgres import PostgresStore

        return PostgresStore.open(str(target), readonly=readonly)
    from framework.workspace.sqlite import SqliteStore

    path = Path(target)
    state = path if path.suffix == ".sqlite" else path / STATE_FILE
    if not state.is_file():
        if readonly or not create:
            raise no_workspace(path, state.name)
        if state.parent.exists() and not state.parent.is_dir():
            raise WorkspaceError(f"{state.parent} exists and is not a folder")
        make_private_dir(state.parent)
    return SqliteStore.open(state, readonly=readonly)


__all__ = ["PG_SCHEMES", "is_database_url", "no_workspace", "open_store"]
