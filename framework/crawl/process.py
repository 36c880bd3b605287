"""Run one job in this process, the way ``scrapy crawl`` does, and say how it ended.

``framework crawl`` uses this; ``scrapy crawl`` runs the very same spider class through
the same spider loader. The end of a run becomes one of the contract's verdicts:
drained (every row ok), a checkpoint (run again later), or halted (a human must look).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.settings import Settings
from scrapy.utils.conf import feed_process_params_from_cli
from twisted.python.failure import Failure

from framework import scrapy_settings
from framework.crawl.runtime import (
    REASON_ALREADY_DONE,
    REASON_ERROR_RATE,
    REASON_FINISHED,
)
from framework.crawl.spider import spider_class
from framework.errors import Checkpoint, FrameworkError, Halted
from framework.spec import load_spec
from framework.workspace import RowStatus, Workspace

CHECKPOINT_REASONS = {
    "max_requests": "the --max-requests cap was reached",
    "rate_limited": "the site rate-limited the crawl",
    "shutdown": "interrupted",
}


@dataclass(frozen=True)
class CrawlResult:
    job: str
    reason: str
    workspace: Path
    rows: dict[str, dict[str, int]]
    pending: int
    errors: int
    items: dict[str, int]


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
    failures: list[BaseException] = []

    def keep(failure: Failure) -> None:
        failures.append(failure.value or RuntimeError("unknown start failure"))

    process.crawl(crawler).addErrback(keep)
    process.start()
    if failures:
        # A failure to start (workspace locked, unreadable...) is ours to report as-is.
        if isinstance(failures[0], FrameworkError):
            raise failures[0]
        raise FrameworkError(f"the crawl could not start: {failures[0]!r}") from failures[0]
    reason = spidercls.close_reason or (crawler.stats.get_value("finish_reason") or "unknown")
    jobdir = Path(crawler.settings.get("JOBDIR"))
    return summarize(spec.name, reason, jobdir)


def summarize(job: str, reason: str, workspace: Path) -> CrawlResult:
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        rows = {k: {str(st): n for st, n in v.items()} for k, v in ws.store.row_counts().items()}
        items = ws.store.item_counts()
    pending = sum(v.get(str(RowStatus.PENDING), 0) for v in rows.values())
    errors = sum(v.get(str(RowStatus.ERROR), 0) for v in rows.values())
    return CrawlResult(job, reason, workspace, rows, pending, errors, items)


def verdict(result: CrawlResult) -> None:
    """Raise the contract's error for a run that did not drain cleanly."""
    if result.reason in CHECKPOINT_REASONS:
        raise Checkpoint(
            f"{result.job}: {CHECKPOINT_REASONS[result.reason]}; {result.pending} rows pending"
            " (run again later)"
        )
    if result.reason == REASON_ERROR_RATE:
        raise Halted(f"{result.job}: the error-rate breaker stopped the crawl (a human must look)")
    if result.reason not in (REASON_FINISHED, REASON_ALREADY_DONE):
        raise Halted(f"{result.job}: the crawl stopped: {result.reason}")
    if result.pending:
        raise Checkpoint(f"{result.job}: {result.pending} rows still pending (run again)")
    if result.errors:
        raise Halted(
            f"{result.job}: finished with {result.errors} rows in error and "
            f"{result.items.get('incomplete', 0)} incomplete items; see `framework status "
            f"{result.job}`, then `framework requeue` or fix the spec"
        )
