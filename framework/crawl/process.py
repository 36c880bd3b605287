"""Run one job in this process, the way ``scrapy crawl`` does, and say how it ended.

``framework crawl`` uses this; ``scrapy crawl`` runs the very same spider class through
the same spider loader. The end of a run becomes one of the contract's verdicts
(:mod:`framework.crawl.verdict`): drained (every row ok), a checkpoint (run again
later), or halted (a human must look).

Before the crawl writes anything, the workspace is checked whole (a damaged state file,
or commits lost behind the URL log: :mod:`framework.workspace.integrity`); ``--fresh``
starts over instead (a damaged state file is set aside, not deleted). SIGINT/SIGTERM
are :class:`framework.crawl.stopping.SignalStop`'s, not Scrapy's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.settings import Settings
from scrapy.utils.conf import feed_process_params_from_cli
from twisted.python.failure import Failure

from framework import scrapy_settings
from framework.crawl.limits import workspace_target
from framework.crawl.report import nothing_extracted
from framework.crawl.spider import spider_class
from framework.crawl.stopping import SignalStop
from framework.crawl.verdict import (
    CHECKPOINT_REASONS,
    HALT_REASONS,
    REASON_BROKEN,
    REASON_DISK_FULL,
    exit_code,
)
from framework.errors import (
    EXIT_CHECKPOINT,
    EXIT_OK,
    Checkpoint,
    FrameworkError,
    Halted,
    UsageError,
    WorkspaceBroken,
    WorkspaceError,
)
from framework.settings import default
from framework.spec import load_spec
from framework.workspace import RowStatus, Workspace
from framework.workspace.holds import REVIEW
from framework.workspace.integrity import check
from framework.workspace.workspace import STATE_FILE, URLS_FILE

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def log_level(value: str) -> str:
    """``value`` as a log level name (any case), else a one-line UsageError (exit 2):
    Scrapy would fail with a traceback when it configures logging."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise UsageError(f"-L/--loglevel expects one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return level


@dataclass(frozen=True)
class CrawlResult:
    job: str
    reason: str
    workspace: Path | str  # a folder, or a database URL (shown with redact_url only)
    rows: dict[str, dict[str, int]]
    pending: int
    errors: int
    items: dict[str, int]
    fault: FrameworkError | None = None  # a full disk or damaged file that stopped it
    expect_empty: bool = False  # the spec's: a run that stores no item is a success
    # records held back in the workspace, by status (framework/workspace/holds.py)
    held: dict[str, int] = field(default_factory=dict)
    # lists whose records or links differ from the total their pages declare
    # (framework/crawl/completeness.py): a drained crawl with one needs a human
    mismatched: int = 0


def run_crawl(
    spec_path: Path,
    root: Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    output: Sequence[str] = (),
    fresh: bool = False,
) -> CrawlResult:
    """Crawl a job to its end (or a stop) in this process; blocks until done."""
    spec = load_spec(spec_path)
    settings = Settings()
    settings.setmodule(scrapy_settings, priority="project")
    spidercls = spider_class(spec, spec_path, root / "var")
    cmdline: dict[str, Any] = dict(overrides or {})
    if fresh:
        cmdline["FRAMEWORK_FRESH"] = True
    if output:
        cmdline["FEEDS"] = feed_process_params_from_cli(settings, list(output))
    settings.setdict(cmdline, priority="cmdline")
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spidercls)
    jobdir = workspace_target(crawler.settings.get("JOBDIR"))
    # its parent checked; a database has no folder to check (it is transactional)
    if not crawler.settings.getbool("FRAMEWORK_WORKER", default("FRAMEWORK_WORKER")) and isinstance(
        jobdir, Path
    ):
        preflight(
            jobdir, fresh=crawler.settings.getbool("FRAMEWORK_FRESH", default("FRAMEWORK_FRESH"))
        )
    failures: list[BaseException] = []

    def keep(failure: Failure) -> None:
        failures.append(failure.value or RuntimeError("unknown start failure"))

    process.crawl(crawler).addErrback(keep)
    process.start()
    stop = SignalStop.of(crawler)
    if failures:
        # A failure to start (workspace locked, unreadable...) is ours to report as-is.
        if isinstance(failures[0], FrameworkError):
            raise failures[0]
        raise FrameworkError(f"the crawl could not start: {failures[0]!r}") from failures[0]
    reason = (
        spidercls.close_reason
        or (stop.forced if stop is not None else None)
        or crawler.stats.get_value("finish_reason")
        or "unknown"
    )
    spider = getattr(crawler, "spider", None)
    fault = getattr(getattr(spider, "runtime", None), "workspace_fault", None)
    if reason == REASON_BROKEN and isinstance(fault, FrameworkError):
        raise fault  # the state file cannot be read back for a summary
    result = summarize(spec.name, reason, jobdir)
    if spec.expect_empty:
        result = CrawlResult(**{**result.__dict__, "expect_empty": True})
    mismatched = getattr(getattr(getattr(spider, "runtime", None), "report", None), "mismatched", 0)
    if isinstance(mismatched, int) and mismatched:
        result = CrawlResult(**{**result.__dict__, "mismatched": mismatched})
    if isinstance(fault, FrameworkError):
        return CrawlResult(**{**result.__dict__, "fault": fault})
    return result


def preflight(jobdir: Path, *, fresh: bool) -> None:
    """Refuse a damaged workspace before the crawl writes to it (WorkspaceBroken, exit 4,
    one line saying what to do). A ``fresh`` run starts over instead: its rows go anyway,
    and a damaged state file is set aside (renamed, never deleted) for a new one."""
    state = jobdir / STATE_FILE
    urls = jobdir / URLS_FILE
    if not state.is_file() or state.stat().st_size == 0:
        # SQLite would quietly make a new database in place of a deleted or emptied
        # file: only a workspace that never sent a request may start from none.
        if not fresh and urls.is_file() and urls.stat().st_size:
            what = "empty" if state.is_file() else "missing"
            raise WorkspaceBroken(
                f"{state}: the state file is {what} but urls.jsonl names requests made: "
                "restore the workspace folder from a backup, or start over with `crawl --fresh`"
            )
        return
    try:
        with Workspace.open(jobdir, create=False, readonly=True) as ws:
            found = check(ws, deep=True)
            problem = found.problem(ws)
    except WorkspaceBroken:
        if not fresh:
            raise
        _set_aside(state)
        return
    except WorkspaceError:
        return  # not ours to judge here: the crawl's own open says what is wrong
    if problem is None:
        return
    if found.damaged is not None and fresh:
        _set_aside(state)
    elif not fresh:
        raise WorkspaceBroken(problem)


def _set_aside(state: Path) -> None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for suffix in ("", "-wal", "-shm"):
        part = state.with_name(state.name + suffix)
        if part.exists():
            part.rename(part.with_name(f"{part.name}.damaged-{stamp}"))


def summarize(job: str, reason: str, workspace: Path | str) -> CrawlResult:
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        workspace = ws.where if ws.is_database else workspace  # never the password
        rows = {k: {str(st): n for st, n in v.items()} for k, v in ws.store.row_counts().items()}
        items = ws.store.item_counts()
        held = dict(ws.store.hold_counts()["by_status"])
    pending = sum(v.get(str(RowStatus.PENDING), 0) for v in rows.values())
    errors = sum(v.get(str(RowStatus.ERROR), 0) for v in rows.values())
    return CrawlResult(job, reason, workspace, rows, pending, errors, items, held=held)


def held_line(job: str, held: Mapping[str, int]) -> str:
    """What a drained crawl that holds records says (exit 4): how many, and where to
    see them."""
    total = sum(held.values())
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(held.items()))
    todo = f"`framework status {job}` lists them by rule"
    if held.get(REVIEW):
        todo += f", `framework review {job}` accepts or rejects the review_required ones"
    return (
        f"the crawl finished but holds {total} record{'s' if total != 1 else ''} back, "
        f"never shipped ({statuses}): {todo} (a human must look)"
    )


def verdict(result: CrawlResult) -> None:
    """Raise the contract's error for a run that did not drain cleanly: the same exit
    code as :func:`framework.crawl.verdict.exit_code`, which the run_finished event
    records."""
    held = sum(result.held.values())
    code = exit_code(result.reason, result.pending, result.errors, held)
    if code == EXIT_OK and nothing_extracted(result.items, result.expect_empty):
        raise Halted(
            f"{result.job}: the crawl finished but extracted nothing (no item stored); see "
            f"the warnings and `framework status {result.job}`; if an empty result is "
            "expected, say `expect_empty: true` in the spec"
        )
    if code == EXIT_OK and result.mismatched:
        lists = f"{result.mismatched} list{'s' if result.mismatched != 1 else ''}"
        raise Halted(
            f"{result.job}: the crawl finished but {lists} yielded other than the total "
            f"their pages declare (total_mismatch); see the warnings and `framework status "
            f"{result.job}` (a human must look)"
        )
    if code == EXIT_OK:
        return
    if result.reason in (REASON_DISK_FULL, REASON_BROKEN) and result.fault is not None:
        raise result.fault  # one line: the workspace, what is wrong, what to do
    if result.reason in CHECKPOINT_REASONS:
        # rows in error that still have attempts left are retried by the next run too
        # (a down host's rows are errors with their attempts given back)
        waiting = f"{result.pending} rows pending"
        if result.errors:
            waiting += f", {result.errors} in error to retry or review"
        raise Checkpoint(
            f"{result.job}: {CHECKPOINT_REASONS[result.reason]}; {waiting} (run again later)"
        )
    if result.reason in HALT_REASONS:
        raise Halted(f"{result.job}: {HALT_REASONS[result.reason]} (a human must look)")
    if code == EXIT_CHECKPOINT and result.pending:
        raise Checkpoint(f"{result.job}: {result.pending} rows still pending (run again)")
    if not result.errors and held:
        raise Halted(f"{result.job}: {held_line(result.job, result.held)}")
    if not result.errors:
        raise Halted(f"{result.job}: the crawl stopped: {result.reason}")
    raise Halted(
        f"{result.job}: finished with {result.errors} rows in error and "
        f"{result.items.get('incomplete', 0)} incomplete items; see `framework status "
        f"{result.job}`, then `framework requeue` or fix the spec"
    )
