"""``framework reparse JOB``: extract the stored pages again with the current spec.

No request is made: the pages are the ones the crawl kept in the workspace (see
:mod:`framework.crawl.reparse`). Items are updated in place, new follow links and
sub-tabs become pending rows for the next ``framework crawl``.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from framework import progress
from framework.cli.hints import LocatedHints, Locator
from framework.cli.target import workspace_target
from framework.cli.words import counted
from framework.errors import Halted, UsageError, WorkspaceError
from framework.project import find_root, resolve_job
from framework.redact import redact_url


@click.command("reparse")
@click.argument("job")
@click.option("--workspace", default=None, help="workspace folder or postgresql:// URL")
@click.option(
    "--processes",
    default="auto",
    show_default=True,
    metavar="N|auto",
    help="processes that parse the pages, the one that writes among them; auto: one per "
    "idle core (measured now, over 0.1 s), 1 for fewer than 1,000 stored pages",
)
@click.option(
    "--all",
    "every_kind",
    is_flag=True,
    help="read the pages of every kind, also those whose part of the spec did not change "
    "since they were read",
)
@click.option("-q", "--quiet", is_flag=True, help="warnings and errors only, no progress line")
def reparse(job: str, workspace: str | None, processes: str, every_kind: bool, quiet: bool) -> int:
    """Re-extract the pages stored in JOB's workspace with the current spec, without
    fetching anything: changed items get a new content hash (and ship again), new links
    become pending rows for the next crawl. Pages of a kind whose part of the spec (and
    the job-level keys, the extraction limits, the framework's code) is the one they
    were read with are left as they are, unless --all.

    Exit 0, also when pages are left to fetch (new links it found: it says the crawl
    command that fetches them); 4 when the spec extracts nothing and no page is left to
    fetch, or pages that were read before now fail (see `framework status`); 2 on a bad
    call or a workspace with no stored pages."""
    from framework.crawl.cores import CoreSample

    # before the imports below (~0.3 s): they are the window `--processes auto`
    # measures the idle cores over, instead of a sleep
    started = CoreSample()
    from framework.crawl.reparse import reparse as run
    from framework.spec import load_spec

    root = find_root()
    spec_path = resolve_job(job, root)
    spec = load_spec(spec_path)
    path = workspace_target(root, spec.name, workspace)
    # the commands it names next carry the flags that found this job and workspace
    locator = Locator(spec.name, job, workspace)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.addFilter(LocatedHints(locator))
    log = logging.getLogger("framework")
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    try:
        result = run(
            spec_path,
            path,
            progress.mode(quiet),
            _processes(processes),
            every_kind,
            started,
            spec=spec,
        )
    finally:
        log.removeHandler(handler)
    c = result.counts
    if not c["pages"] and not c["skipped"] and not c["unchanged_kind"]:
        raise WorkspaceError(
            f"{spec.name}: the workspace keeps no pages to read again (crawled with "
            "store_responses: false, or not crawled yet); `framework crawl --fresh` "
            "fetches them"
        )
    click.echo(
        f"{spec.name}: reparsed {counted(c['pages'], 'stored page')}, no request made; items "
        f"{c['items_new']} new, {c['items_changed']} changed, {c['items_unchanged']} unchanged;"
        f" {counted(c['rows_new'], 'new row')} pending; {counted(c['errors'], 'page')} failed; "
        f"{counted(c.get('type_failed', 0), 'value')} failed their type; "
        f"{_held(c)}{counted(len(result.warnings), 'other warning' if _held(c) else 'warning')}",
        err=True,
    )
    if result.type_failed:
        # which fields, each with one example: a count alone sends the user to status
        click.echo(
            f"{spec.name}: values that failed their type: "
            + "; ".join(_failure(f) for f in result.type_failed)
            + f" (see `{locator.command('status')}`)",
            err=True,
        )
    if c["unchanged_kind"]:
        kinds = ", ".join(result.unchanged_kinds)
        which = "a kind whose" if len(result.unchanged_kinds) == 1 else "kinds whose"
        click.echo(
            f"{spec.name}: {counted(c['unchanged_kind'], 'stored page')} of {which} spec did not "
            f"change since they were read ({kinds}) left as they are; --all reads them too",
            err=True,
        )
    if c["narrow"]:
        fields = "; ".join(f"{k}: {', '.join(f)}" for k, f in sorted(result.narrow.items()))
        click.echo(
            f"{spec.name}: {counted(c['narrow'], 'stored page')} read for the fields whose spec "
            f"changed ({fields}), the others taken from their items; --all reads them whole",
            err=True,
        )
    for kind, why in sorted(result.whole.items()):
        click.echo(f"{spec.name}: {kind} read whole, not field by field: {why}", err=True)
    if result.nothing_extracted:
        raise Halted(
            f"{spec.name}: the spec extracts nothing from the stored pages (see the warnings"
            f" and `{locator.command('status')}`); if that is expected, say "
            "`expect_empty: true`"
        )
    if c.get("damaged"):
        raise Halted(
            f"{spec.name}: damaged pages in the workspace ({counted(c['damaged'], 'stored page')}"
            " that do not decompress): their rows are `damaged` errors and the other pages "
            f"were read; `{locator.command('crawl')}` fetches them again"
        )
    if c["newly_failed"]:
        raise Halted(
            f"{spec.name}: {counted(c['newly_failed'], 'stored page')} that were read before "
            "cannot be read with this spec; see "
            f"`{locator.command('status')}`, then fix the spec and reparse again"
        )
    pending = c.get("rows_pending", 0)
    if pending:  # the reparse is done; the pages it (or an earlier run) queued are next
        queued = (
            f"{counted(c['rows_new'], 'new page')} queued"
            if c["rows_new"] == pending
            else f"{counted(pending, 'page')} to fetch ({c['rows_new']} new)"
        )
        click.echo(f"{spec.name}: {queued}: run `{locator.command('crawl')}`", err=True)
    return 0


def _held(c: dict[str, int]) -> str:
    """The records this run held back, as the summary says them ("" for none): the
    warnings above name their rules, and `framework status` lists their keys."""
    invalid, review = c.get("items_invalid", 0), c.get("items_review", 0)
    if not invalid and not review:
        return ""
    parts = [f"{invalid} invalid"] * bool(invalid) + [f"{review} for review"] * bool(review)
    return f"{counted(invalid + review, 'record')} held ({', '.join(parts)}: see status); "


def _failure(entry: dict[str, Any]) -> str:
    """``detail.filed 21 of 400 records (e.g. not a date: 'N/A' at URL)``."""
    examples = entry.get("examples") or []
    at = f" at {redact_url(examples[0])}" if examples else ""
    return (
        f"{entry['kind']}.{entry['field']} {entry['count']} of "
        f"{counted(entry.get('records', 0), 'record')} (e.g. {entry.get('text')}{at})"
    )


def _processes(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--processes: expected a number of 1 or more, or auto; got {value!r}")
    return n
