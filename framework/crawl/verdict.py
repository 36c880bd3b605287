"""How a crawl ended, as the cron contract's exit code: one table for everyone.

The crawl command turns the end of a run into its exit code with :func:`verdict`, and
the run's ``run_finished`` event records the same :func:`exit_code`, so that `status`
tells what the crawl answered. It knows close reasons as plain strings (the runtime and
Scrapy name them) and imports nothing of the crawl, so the runtime may use it too.

    0  drained: every row ok (or nothing to do)
    3  a checkpoint: rows still to fetch, interrupted, rate-limited, a cap reached
    4  a human must look: rows in error, records held (a broken rule of the spec, a
       change over a limit: framework/workspace/holds.py), a breaker, a full disk, a
       damaged workspace
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import EXIT_CHECKPOINT, EXIT_HALTED, EXIT_OK

REASON_FINISHED = "finished"  # Scrapy's, and the runtime's
REASON_ALREADY_DONE = "already_done"
REASON_ERROR_RATE = "error_rate"
REASON_SHUTDOWN = "shutdown"  # Scrapy's: a first SIGINT/SIGTERM
REASON_ABORTED = "aborted"  # a second SIGINT/SIGTERM: stopped at once, still recorded
REASON_DISK_FULL = "disk_full"  # a commit failed for lack of space (rolled back)
REASON_BROKEN = "workspace_broken"  # the state file turned out damaged mid-run

# reason -> what the one line says; each is a checkpoint (exit 3)
CHECKPOINT_REASONS = {
    "max_requests": "the --max-requests cap was reached",
    "rate_limited": "the site rate-limited the crawl",
    "host_down": "a host refused every connection or could not be resolved",
    # a page matched a `blocked:` rule (crawl/blocking.py); the line above names it
    "blocked": "the site served a page the spec says means blocked (a captcha, a ban)",
    REASON_SHUTDOWN: "interrupted",
    REASON_ABORTED: "aborted by a second signal",
}
# reason -> what the one line says; each needs a human (exit 4)
HALT_REASONS = {
    REASON_ERROR_RATE: "the error-rate breaker stopped the crawl",
    REASON_DISK_FULL: "the disk is full",
    REASON_BROKEN: "the workspace is damaged",
    "drift": "a field matched only a fallback selector (--halt-on-drift)",
    # the spec's `login:` (crawl/session.py); the line before names what went wrong
    "login_failed": "the login failed (the error above says why)",
    "session_lost": "the session kept expiring right after each login (max_relogins)",
}


def exit_code(reason: str, pending: int, errors: int, held: int = 0) -> int:
    """The exit code of a run that ended with ``reason`` and left ``pending`` rows
    pending, ``errors`` rows in error and ``held`` records held back in the workspace
    (never shipped until the spec, the site or a review settles them: a drained crawl
    that holds some is not done, or a cron loop would never notice them)."""
    if reason in CHECKPOINT_REASONS:
        return EXIT_CHECKPOINT
    if reason in HALT_REASONS or reason not in (REASON_FINISHED, REASON_ALREADY_DONE):
        return EXIT_HALTED
    if pending:
        return EXIT_CHECKPOINT
    if errors or held:
        return EXIT_HALTED
    return EXIT_OK


def row_totals(rows: Mapping[str, Mapping[Any, int]]) -> tuple[int, int]:
    """(pending, error) totals of ``row_counts``-shaped counts (kind -> status -> n);
    status keys may be ``RowStatus`` members or their string values."""
    pending = sum(n for by in rows.values() for st, n in by.items() if str(st) == "pending")
    errors = sum(n for by in rows.values() for st, n in by.items() if str(st) == "error")
    return pending, errors


__all__ = [
    "CHECKPOINT_REASONS",
    "HALT_REASONS",
    "REASON_ABORTED",
    "REASON_BROKEN",
    "REASON_DISK_FULL",
    "exit_code",
    "row_totals",
]
