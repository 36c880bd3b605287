"""`framework workspace copy SRC DST`: move a job's workspace between a folder (SQLite)
and a PostgreSQL database, either way, without crawling again.

The state (rows, attempts, items, stored responses, holds, meta) is copied by
:func:`framework.workspace.copy.copy_state` in one snapshot and one transaction; the URL
and event logs follow, line for line (a JSONL file becomes the ``log_lines`` table, and
back). The destination must be empty. Both workspaces' ``crawl`` locks are held, so no
crawl, requeue or review runs on either meanwhile. A database URL is only ever shown
with its password masked. Plugins with state of their own in the workspace (the ship
step's log and index) copy it through the ``framework.workspace_copy`` entry points
(:func:`framework.plugins.workspace_copy_hooks`), after the core's state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from framework.errors import UsageError, WorkspaceError
from framework.workspace import Workspace
from framework.workspace.locate import is_database_url

LOG_CHUNK = 1000  # log lines appended per write


def _target(value: str) -> Any:
    return value if is_database_url(value) else Path(value)


@click.group("workspace")
def workspace() -> None:
    """Workspace tools (copy between SQLite and PostgreSQL)."""


@workspace.command("copy")
@click.argument("source")
@click.argument("destination")
def copy(source: str, destination: str) -> int:
    """Copy the workspace SOURCE into DESTINATION (a folder or a postgresql:// URL;
    it must be empty): rows, attempts, items, stored responses, holds, meta and the
    URL and event logs. A job started on SQLite continues on PostgreSQL, and back.

    Exit 0; 2 when the source is missing, the destination not empty, or either is
    in use by a crawl."""
    from framework.plugins import workspace_copy_hooks
    from framework.workspace.copy import copy_state

    if source == destination:
        raise UsageError("the source and the destination are the same workspace")
    with (
        Workspace.open(_target(source), create=False, readonly=True) as src,
        Workspace.open(_target(destination), create=True) as dst,
        src.lock("crawl"),
        dst.lock("crawl"),
    ):
        if next(iter(dst.urls), None) is not None or next(iter(dst.events), None):
            raise WorkspaceError(
                f"{dst.where}: the destination already has log lines: copy into an empty workspace"
            )
        hooks = workspace_copy_hooks()
        for hook in hooks:  # all refusals before anything is written
            why = hook.refuse(src, dst)
            if why is not None:
                raise WorkspaceError(why)
        counts = copy_state(src.store, dst.store)
        lines = {
            name: _copy_log(getattr(src, name), getattr(dst, name)) for name in ("urls", "events")
        }
        extra = [said for hook in hooks if (said := hook.copy(src, dst))]
    click.echo(
        f"copied {src.where} -> {dst.where}: {counts.rows} rows, {counts.attempts} attempts, "
        f"{counts.items} items, {counts.responses} stored responses, {counts.holds} holds, "
        f"{lines['urls']} URL lines, {lines['events']} events"
        + "".join(f", {said}" for said in extra),
        err=True,
    )
    return 0


def _copy_log(source: Any, destination: Any) -> int:
    """Every line of one log into the other, in order; the number copied. Lines were
    masked when first written: they are copied as they are."""
    n, chunk = 0, []
    for record in source:
        chunk.append(record)
        if len(chunk) >= LOG_CHUNK:
            destination.append_many(chunk, redacted=True)
            n, chunk = n + len(chunk), []
    if chunk:
        destination.append_many(chunk, redacted=True)
        n += len(chunk)
    return n
