"""``framework dashboard``: serve the read-only dashboard of the project's jobs.

Owns the command's options and its first lines (where it serves, and that it binds
loopback only unless told otherwise). It reads workspaces, never writes one: run it
beside a crawl, a ship or nothing at all.
"""

from __future__ import annotations

from pathlib import Path

import click

from framework.errors import UsageError
from framework.project import find_root
from framework_dashboard.jobs import parse_targets
from framework_dashboard.serve import LOCAL, bind, is_local, run_foreground


@click.command("dashboard")
@click.option(
    "--workspace-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the jobs' workspaces as <job>/ (default: <project>/var).",
)
@click.option(
    "--workspace",
    "targets",
    multiple=True,
    metavar="JOB=DIR|URL",
    help="One job's workspace elsewhere: a folder or a postgresql:// URL (repeatable).",
)
@click.option("--port", default=8900, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default=LOCAL,
    show_default=True,
    help="Address to bind; anything but loopback shows the workspaces to the network.",
)
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.1, 60),
    help="Seconds between two looks at a workspace while a page is open.",
)
@click.option("--access-log/--no-access-log", default=False, show_default=True)
def dashboard(
    workspace_root: Path | None,
    targets: tuple[str, ...],
    port: int,
    host: str,
    interval: float,
    access_log: bool,
) -> int:
    """Serve a read-only dashboard: every job's state and last run, each job's live
    progress, misbehaving URLs, fill rates, drift, holds and shipping, and /metrics for
    Prometheus. Binds 127.0.0.1 unless --host says otherwise."""
    from framework_dashboard.app import create_app
    from framework_dashboard.progress import Tracker
    from framework_dashboard.reader import Reader

    root = find_root()
    if workspace_root is not None and not workspace_root.is_dir():
        raise UsageError(f"--workspace-root {workspace_root}: no such folder")
    reader = Reader(
        root,
        workspace_root=workspace_root,
        targets=parse_targets(targets),
        tracker=Tracker(min_interval=interval),
    )
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    real = f"{host}:{sock.getsockname()[1]}"
    app = create_app(reader, bind=real, interval=interval)
    where = "local only" if is_local(host) else "REACHABLE FROM THE NETWORK"
    click.echo(f"dashboard: http://{real}/ (read-only, bound to {host}: {where})")
    click.echo(f"metrics:   http://{real}/metrics", err=False)
    run_foreground(app, sock, access_log=access_log)
    return 0
