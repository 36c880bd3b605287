"""``framework schema``: the JSON Schema of a job spec, for editors and scripts.

The same text as the shipped ``framework/spec/job.schema.json`` (see
:mod:`framework.spec.schema`), generated from the models.
"""

from __future__ import annotations

import click


@click.command("schema")
@click.option("--path", "show_path", is_flag=True, help="print where the shipped file is")
def schema(show_path: bool) -> None:
    """Print the JSON Schema of job.yaml (the templates point editors at the shipped copy
    with a `# yaml-language-server: $schema=...` first line)."""
    from framework.spec.schema import SCHEMA_FILE, schema_text

    if show_path:
        click.echo(str(SCHEMA_FILE))
        return
    click.echo(schema_text(), nl=False)
