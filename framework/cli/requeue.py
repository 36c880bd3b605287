"""`framework requeue <job>`: put rows back to pending so the next crawl fetches them.

Owns the command only; the selection is :class:`framework.workspace.RequeueFilter` and
the update is the store's (one transaction). It holds the workspace's ``crawl`` lock
while it runs, so it never races a running crawl (a held lock is exit 3), and records
what it did as a ``requeued`` event in ``events.jsonl``.

Before anything is opened for writing, the state file is read (read-only) and must be a
framework workspace: opening a store for writing switches the file to WAL and creates
the schema, which would graft our tables onto any SQLite database ``--workspace``
happened to point at. A foreign file is a :class:`~framework.errors.WorkspaceError`
(exit 2), with nothing in its folder touched (no lock file, no ``events.jsonl``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import click

from framework.cli.status import open_job_workspace, recorded_max_attempts
from framework.cli.target import workspace_target
from framework.errors import UsageError, WorkspaceError
from framework.project import find_root
from framework.workspace import RequeueFilter, deferrals, utc_now
from framework.workspace.workspace import STATE_FILE


@click.command("requeue")
@click.argument("job")
@click.option("--errors", is_flag=True, help="Rows in status error (the default).")
@click.option("--exhausted", is_flag=True, help="Error rows the next run would not retry.")
@click.option("--kind", default=None, help="Only rows of this kind (e.g. detail, detail.rulings).")
@click.option("--url-contains", "url_contains", default=None, help="Only rows whose URL has S.")
@click.option(
    "--clear-deferrals",
    "clear_deferrals",
    is_flag=True,
    help="Also forget every host's Retry-After deadline (see `framework status`).",
)
@click.option(
    "--workspace", "workspace", default=None, help="Workspace folder or postgresql:// URL."
)
def requeue(
    job: str,
    errors: bool,
    exhausted: bool,
    kind: str | None,
    url_contains: str | None,
    workspace: str | None,
    clear_deferrals: bool,
) -> int:
    """Put matching rows back to pending with a fresh attempt budget.

    All given conditions must hold. Without any option, error rows are requeued;
    --kind or --url-contains alone also match ok rows (to fetch them again on purpose).
    """
    if not (errors or exhausted or kind or url_contains):
        errors = True
    which = RequeueFilter(errors=errors, exhausted=exhausted, kind=kind, url_contains=url_contains)
    target = workspace_target(find_root(), job, workspace)
    if isinstance(target, Path):
        refuse_foreign_state(target / STATE_FILE)
    with open_job_workspace(job, workspace, readonly=False) as ws, ws.lock("crawl"):
        if kind is not None:
            kinds = sorted(ws.store.row_counts())
            if kind not in kinds:  # a misspelt kind would requeue nothing, silently
                raise UsageError(
                    f"--kind {kind!r}: the workspace has no row of that kind; expected "
                    f"one of: {', '.join(kinds) or '(none: nothing crawled yet)'}"
                )
        max_attempts = recorded_max_attempts(ws)
        count = ws.store.requeue(which, max_attempts)
        ws.events.append(
            {
                "event": "requeued",
                "time": utc_now(),
                "count": count,
                "filter": {
                    "errors": errors,
                    "exhausted": exhausted,
                    "kind": kind,
                    "url_contains": url_contains,
                },
                "max_attempts": max_attempts,
            }
        )
        if clear_deferrals:
            cleared = deferrals.clear(ws.store)
            if ws.hosts is not None:  # the deadlines every worker of a database shares
                cleared.update(ws.hosts.deadlines())
                ws.hosts.clear()
            ws.events.append(
                {
                    "event": "deferrals_cleared",
                    "time": utc_now(),
                    "why": "requeue --clear-deferrals",
                    "hosts": {h: deferrals.iso(u) for h, u in sorted(cleared.items())},
                }
            )
            click.echo(f"cleared {len(cleared)} Retry-After deferrals")
    if count:
        click.echo(f"requeued {count} rows")
        return 0
    # nothing matched: say which conditions, so a filter that reaches nothing is seen
    conditions = [
        *(["status error"] if errors else []),
        *(["exhausted (not retried by the next run)"] if exhausted else []),
        *([f"kind {kind}"] if kind is not None else []),
        *([f"URL containing {url_contains!r}"] if url_contains is not None else []),
    ]
    click.echo(
        f"requeued 0 rows: no row matches all of: {'; '.join(conditions)} "
        f"(`framework status {job}` shows the rows by kind and status)"
    )
    return 0


def refuse_foreign_state(state: Path) -> None:
    """WorkspaceError when ``state`` is a readable SQLite database that is not a
    framework workspace (no ``meta`` table with a ``schema_version``, or no ``rows``).

    Read-only (``mode=ro``: the file is never written). A missing file, or one SQLite
    cannot read, is left to :meth:`Workspace.open`, which already says so (missing:
    exit 2; damaged: exit 4, read-only too)."""
    if not state.is_file():
        return
    try:
        con = sqlite3.connect(f"{state.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = (
            con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if "meta" in tables
            else None
        )
    except sqlite3.DatabaseError:
        return
    finally:
        con.close()
    if version is None or "rows" not in tables:
        raise WorkspaceError(
            f"{state}: not a framework workspace (a SQLite file without its schema version); "
            "requeue changed nothing: check --workspace"
        )


__all__ = ["refuse_foreign_state", "requeue"]
