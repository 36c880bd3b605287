"""The ``framework`` command line: the root only registers commands.

Core commands live one per module in this package; plugins add theirs through the
``framework.commands`` entry point group (each entry point names a ``click.Command``).
This is the only place where errors become exit codes.
"""

from __future__ import annotations

import gc
import sys
from importlib.metadata import entry_points

import click

from framework.errors import EXIT_FAILURE, FrameworkError

CORE_COMMANDS = {
    "validate": "framework.cli.validate:validate",
    "list": "framework.cli.list_jobs:list_jobs",
    "new": "framework.cli.new:new",
    "crawl": "framework.cli.crawl:crawl",
    "status": "framework.cli.status:status",
    "requeue": "framework.cli.requeue:requeue",
    "demo": "framework.cli.demo:demo",
    "export": "framework.cli.export:export",
    "preview": "framework.cli.preview:preview",
    "schema": "framework.cli.schema:schema",
    "reparse": "framework.cli.reparse:reparse",
    "review": "framework.cli.review:review",
    "workspace": "framework.cli.workspace:workspace",
}


class _Root(click.Group):
    """Loads commands lazily so `framework --help` stays fast and a broken plugin
    only breaks its own command."""

    def _sources(self) -> dict[str, str]:
        found = dict(CORE_COMMANDS)
        for ep in entry_points(group="framework.commands"):
            found.setdefault(ep.name, ep.value)
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._sources())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # a core command wins over a plugin's of the same name: no need to read every
        # installed package's entry points (~5 ms) to find it
        target = CORE_COMMANDS.get(cmd_name) or self._sources().get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        module = __import__(module_name, fromlist=[attr])
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="framework")
def cli() -> None:
    """Declarative, resumable scraping on Scrapy, with a separate shipping step."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and map the error tree to exit codes (the only place that does)."""
    try:
        result = cli.main(args=argv, prog_name="framework", standalone_mode=False)
    except FrameworkError as exc:
        click.echo(f"error: {exc}" if not _is_spec_error(exc) else str(exc), err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return 3
    except click.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code == 1 else exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    if isinstance(result, int):
        return result
    return 0


def _is_spec_error(exc: FrameworkError) -> bool:
    from framework.errors import SpecError

    return isinstance(exc, SpecError)


def entry() -> None:  # pragma: no cover - console script shim
    code = main()
    # The interpreter's exit runs full garbage collections over every object the
    # imports made (Scrapy, Twisted, pydantic: 0.18 s after a reparse, see
    # docs/benchmarks.md, "Status on a long history, and the command's own exit"). The
    # command is done and has closed what it wrote (the logs write whole lines
    # straight to their descriptors; atexit handlers, logging's flush among them, still
    # run), so its objects may die with the process: frozen, the collector skips them,
    # and reference counting still frees what is not in a cycle.
    gc.freeze()
    sys.exit(code)


__all__ = ["EXIT_FAILURE", "cli", "main"]
