"""``framework list``: the jobs under ``projects/``, with their source type and file."""

from __future__ import annotations

import json

import click

from framework.project import find_root, job_files


@click.command("list")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON array of {name, source_type, file, error}.",
)
def list_jobs(as_json: bool) -> None:
    """List jobs: name, source_type and spec file (reads each spec's keys, no
    validation). A spec that cannot be read shows `?` and, on stderr, why."""
    from framework.errors import SpecError
    from framework.spec.load import read_document

    root = find_root()
    rows: list[dict[str, str | None]] = []
    for name, path in job_files(root).items():
        source_type = "?"
        error: str | None = None
        try:
            data = read_document(path).data
        except SpecError as exc:
            data, error = None, str(exc).splitlines()[0]
        if isinstance(data, dict) and isinstance(data.get("source_type"), str):
            source_type = data["source_type"]
        elif error is None:
            error = f"{path}: no source_type (a string) at the top level"
        try:
            shown = str(path.relative_to(root))
        except ValueError:
            shown = str(path)
        rows.append({"name": name, "source_type": source_type, "file": shown, "error": error})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no jobs under {root / 'projects'}", err=True)
        return
    width = max(len(str(r["name"])) for r in rows)
    st_width = max(len(str(r["source_type"])) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['source_type']:<{st_width}}  {r['file']}")
    for r in rows:
        if r["error"] is not None:  # said, not failed: listing is no validation
            click.echo(f"{r['name']}: {r['error']} (`framework validate` checks it)", err=True)
