"""`framework crawl <job>`: the same spider as `scrapy crawl`, with the contract's exit codes."""

from __future__ import annotations

from pathlib import Path

import click

from framework.cli.hints import Locator, hints_located, relocate
from framework.cli.target import chosen
from framework.errors import FrameworkError, UsageError
from framework.project import find_root, resolve_job
from framework.workspace.locate import is_database_url


def _setting(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in values:
        name, sep, value = raw.partition("=")
        if not sep or not name:
            raise UsageError(f"-s expects NAME=VALUE, got {raw!r}")
        out[name] = value
    return out


@click.command()
@click.argument("job")
@click.option(
    "--workspace",
    help="workspace folder (JOBDIR), or postgresql:// URL (every such crawl is one worker)",
)
@click.option("--fresh", is_flag=True, help="forget the rows (items stay) and start over")
@click.option("--max-requests", type=click.IntRange(min=1), help="stop after N requests (exit 3)")
@click.option("--stop-on-429", is_flag=True, help="stop at the first 429 (exit 3)")
@click.option(
    "--halt-on-drift",
    is_flag=True,
    help="stop (exit 4) before storing a page whose field matched only a fallback selector",
)
@click.option(
    "--no-store-responses",
    "no_store",
    is_flag=True,
    help="do not keep the pages' bodies (`framework reparse` then has nothing to read)",
)
@click.option(
    "-s", "--set", "settings", multiple=True, metavar="NAME=VALUE", help="a Scrapy setting"
)
@click.option(
    "-o", "--output", multiple=True, metavar="FILE", help="append this run's completed items"
)
@click.option(
    "-O", "--overwrite-output", "overwrite", multiple=True, metavar="FILE", help="-o, replacing"
)
@click.option(
    "--processes",
    default="1",
    metavar="N|auto",
    help="crawl with N processes sharing the workspace (auto: one per core)",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="serve the job's /metrics (Prometheus) on 127.0.0.1:PORT while it crawls "
    "(0: any free port, logged); needs the dashboard plugin",
)
@click.option("-q", "--quiet", is_flag=True, help="warnings and errors only, no progress line")
@click.option("-v", "--verbose", is_flag=True, help="Scrapy's whole log, with its stats at the end")
@click.option(
    "-L",
    "--loglevel",
    default=None,
    help="log level: CRITICAL, ERROR, WARNING, INFO (default), DEBUG",
)
def crawl(
    job: str,
    workspace: str | None,
    fresh: bool,
    max_requests: int | None,
    stop_on_429: bool,
    halt_on_drift: bool,
    no_store: bool,
    settings: tuple[str, ...],
    output: tuple[str, ...],
    overwrite: tuple[str, ...],
    processes: str,
    metrics_port: int | None,
    quiet: bool,
    verbose: bool,
    loglevel: str | None,
) -> int:
    """Crawl JOB (a job name or a path to its job.yaml), resuming its workspace.

    Exit 0 when drained (every row ok), 3 on a checkpoint (rate-limited, --max-requests,
    interrupted: run again later), 4 when a breaker halted it or rows ended in error
    (a human must look), 2 on usage or spec errors. With --processes N, the worst of
    the N processes' codes (one killed by a signal counts as interrupted: 3).
    """
    from framework.crawl.output import output_settings, summary
    from framework.crawl.process import log_level, run_crawl, verdict
    from framework.crawl.workers import processes as worker_count
    from framework.export import feed_settings

    if loglevel:
        loglevel = log_level(loglevel)  # a bad level is a one-line usage error (exit 2)
    # -o/-O are Scrapy's feeds of THIS run's completed items (`framework export` writes
    # every stored item); an unknown format is one line (exit 2), not a traceback
    feeds = feed_settings(output, overwrite)
    root = find_root()
    spec_path = resolve_job(job, root)
    settings_given = _setting(settings)
    overrides: dict[str, object] = dict(settings_given)
    if workspace:
        overrides["JOBDIR"] = workspace
    elif "JOBDIR" not in overrides and chosen(None):
        overrides["JOBDIR"] = chosen(None)  # FRAMEWORK_WORKSPACE
    if max_requests:
        overrides["FRAMEWORK_MAX_REQUESTS"] = max_requests
    if no_store:
        overrides["FRAMEWORK_STORE_RESPONSES"] = False
    if stop_on_429:
        overrides["FRAMEWORK_STOP_ON_429"] = True
    if halt_on_drift:
        overrides["FRAMEWORK_HALT_ON_DRIFT"] = True
    if metrics_port is not None:
        overrides["FRAMEWORK_METRICS_PORT"] = metrics_port  # framework/crawl/metrics.py
    if quiet and verbose:
        raise UsageError("use either -q (quiet) or -v (verbose), not both")
    # progress line, Scrapy's start-up boilerplate hidden unless -v (before the process)
    overrides.update(output_settings(quiet=quiet, verbose=verbose, loglevel=loglevel))
    if feeds:
        overrides["FEEDS"] = feeds
    n = worker_count(processes)
    if n > 1 and is_database_url(str(overrides.get("JOBDIR", ""))):
        raise UsageError(
            "--processes is for a folder workspace; on a database workspace every "
            "`framework crawl JOB --workspace postgresql://...` is a worker: start N of them"
        )
    locator = _locator(job, spec_path, workspace or settings_given.get("JOBDIR"))
    if n > 1:
        if "FRAMEWORK_METRICS_PORT" in overrides:
            # each worker would serve the same workspace's figures on the same port
            raise UsageError(
                "--metrics-port serves one crawl process; with --processes, run "
                "`framework dashboard` beside the crawl and scrape its /metrics"
            )
        if feeds:
            raise UsageError(
                "-o/-O write one feed per process: with --processes, export the items "
                "afterwards with `framework export`"
            )
        return crawl_processes(
            spec_path, root, n, overrides=overrides, fresh=fresh, locator=locator
        )
    with hints_located(locator, *HINT_LOGGERS):
        result = run_crawl(spec_path, root, overrides=overrides, fresh=fresh)
    click.echo(locator.located(summary(result)), err=True)
    try:
        verdict(result)
    except FrameworkError as exc:  # its next step, with the flags this crawl was given
        relocate(exc, locator)
        raise
    return 0


# The modules whose log lines name a command to run next (`framework reparse J`, ...)
HINT_LOGGERS = (
    "framework.crawl.runtime",
    "framework.crawl.process",
    "framework.crawl.spider",
    "framework.crawl.findings",
)


def _locator(job: str, spec_path: Path, workspace: str | None) -> Locator:
    from framework.spec import load_spec

    return Locator(load_spec(spec_path).name, job, workspace)


def crawl_processes(
    spec_path: Path,
    root: Path,
    n: int,
    *,
    overrides: dict[str, object],
    fresh: bool,
    locator: Locator | None = None,
) -> int:
    """`--processes N`: N workers on one workspace (framework/crawl/workers.py); the
    summary of the workspace, then the worst of their exit codes."""
    from framework.crawl.output import summary
    from framework.crawl.process import summarize
    from framework.crawl.workers import job_settings, run_workers, shared_politeness
    from framework.spec import load_spec

    settings = job_settings(spec_path, root, overrides)
    jobdir = Path(settings.get("JOBDIR"))
    each = {**overrides, **shared_politeness(settings, n)}
    code = run_workers(spec_path, root, jobdir, n, overrides=each, fresh=fresh)
    job = load_spec(spec_path).name
    text = summary(summarize(job, f"{n} processes, exit {code}", jobdir))
    click.echo(locator.located(text) if locator is not None else text, err=True)
    return code
