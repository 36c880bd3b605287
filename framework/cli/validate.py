"""``framework validate``: check spec files before any request is made.

Prints ``ok <file>`` per valid spec on stdout; every problem of the invalid ones goes
out through the raised :class:`SpecError` (the CLI root prints it and exits 2).
"""

from __future__ import annotations

from pathlib import Path

import click

from framework.errors import SpecError, SpecProblem
from framework.project import find_root, job_files, resolve_job


@click.command("validate")
@click.argument("targets", nargs=-1, metavar="[SPEC|JOB]...")
def validate(targets: tuple[str, ...]) -> None:
    """Validate job specs (files, folders or job names; default: every job under projects/).

    Exit 0 when every spec is valid, 2 otherwise with one `file:line:col: ...` line per problem.
    """
    from framework.spec import load_spec

    root = find_root()
    problems: list[SpecProblem] = []
    files: list[Path]
    if targets:
        files = [resolve_job(t, root) for t in targets]
    else:
        files = list(job_files(root, problems=problems).values())
        if not files and not problems:
            raise click.UsageError(f"no jobs under {root / 'projects'}; name a spec file")
    for path in files:
        try:
            load_spec(path)
        except SpecError as exc:
            problems.extend(exc.problems)
        else:
            click.echo(f"ok {path}")
    if problems:
        raise SpecError(problems)
