"""``framework list``: the jobs under ``projects/``, with their source type and file."""

from __future__ import annotations

import json

import click

from framework.project import find_root, job_files


@click.command("list")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON array of {name, source_type, file}."
)
def list_jobs(as_json: bool) -> None:
    """List jobs: name, source_type and spec file (reads each spec's keys, no validation)."""
    from framework.errors import SpecError
    from framework.spec.load import read_document

    root = find_root()
    rows = []
    for name, path in job_files(root).items():
        source_type = "?"
        try:
            data = read_document(path).data
        except SpecError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("source_type"), str):
            source_type = data["source_type"]
        try:
            shown = str(path.relative_to(root))
        except ValueError:
            shown = str(path)
        rows.append({"name": name, "source_type": source_type, "file": shown})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no jobs under {root / 'projects'}", err=True)
        return
    width = max(len(r["name"]) for r in rows)
    st_width = max(len(r["source_type"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['source_type']:<{st_width}}  {r['file']}")
