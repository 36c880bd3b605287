"""``framework export JOB -o FILE``: every stored item of a job's workspace to a file.

A crawl's ``-o`` writes only the records that run completed (Scrapy's feed export);
this writes the whole harvest from the workspace, read-only (see :mod:`framework.export`).
"""

from __future__ import annotations

import click

from framework.cli.target import workspace_target
from framework.cli.words import counted
from framework.export import FORMATS, export_items, format_of
from framework.project import find_root


@click.command("export")
@click.argument("job")
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE",
    help="file to write (.jsonl, .json, .csv, .xml), replaced whole; '-' for stdout",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(FORMATS)),
    help="format when the extension does not say (default for '-': jsonl)",
)
@click.option("--workspace", default=None, help="workspace folder or postgresql:// URL")
@click.option("--only-complete", is_flag=True, help="only items whose sub-tabs all arrived")
@click.option("--since", metavar="ISO", help="only items stored or changed since this time")
@click.option(
    "--keep-formulas",
    is_flag=True,
    help="CSV: write cells starting with = + - @ as stored (a spreadsheet may run them)",
)
def export(
    job: str,
    output: str,
    fmt: str | None,
    workspace: str | None,
    only_complete: bool,
    since: str | None,
    keep_formulas: bool,
) -> int:
    """Write every item stored in JOB's workspace to FILE (not only the last run's).

    Exit 0; 2 on a bad call (unknown format, no workspace). The workspace is only
    read, so this works while a crawl runs."""
    fmt = format_of(output, fmt)  # before opening anything: a bad name is one line
    path = workspace_target(find_root(), job, workspace)
    result = export_items(
        path, output, fmt=fmt, only_complete=only_complete, since=since, keep_formulas=keep_formulas
    )
    where = "stdout" if output == "-" else output
    said = f"{job}: {counted(result.items, 'item')} written to {where} ({result.format})"
    if not result.stored:
        said += f"; the workspace stores no item yet (`framework status {job}` says why)"
    elif (only_complete or since) and result.items < result.stored:  # (a crawl may add some)
        left = " and ".join(
            flag for flag, on in (("--only-complete", only_complete), ("--since", since)) if on
        )
        said += f"; {result.stored - result.items} of the {result.stored} stored left out by {left}"
    click.echo(said, err=True)
    return 0
