"""The crawl's limits, read from Scrapy settings in one place.

Every default is the settings table's (:func:`framework.settings.default`):
a value is written there once, and :class:`Limits` built without settings (tools,
tests, the reparse) has the same defaults as a crawl.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.crawl.group import DB_WINDOW_MS, WINDOW_MS
from framework.errors import UsageError
from framework.settings import default
from framework.workspace.locate import is_database_url

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from framework.spec.models import JobSpec

# stored (compressed) bodies per workspace; 0: no budget (an operator's `-s` sets it)
RESPONSES_BUDGET_MB: float = default("FRAMEWORK_RESPONSES_BUDGET_MB")


@dataclass
class Limits:
    max_attempts: int = default("FRAMEWORK_MAX_ATTEMPTS")
    max_requests: int = default("FRAMEWORK_MAX_REQUESTS")  # 0: no cap
    stop_on_429: bool = default("FRAMEWORK_STOP_ON_429")
    error_rate_max: float = default("FRAMEWORK_ERROR_RATE_MAX")
    error_rate_window: int = default("FRAMEWORK_ERROR_RATE_WINDOW")
    retry_after_cap: float = default("FRAMEWORK_RETRY_AFTER_CAP")
    # no deadline is kept further ahead than this
    retry_after_max: float = default("FRAMEWORK_RETRY_AFTER_MAX")
    # seconds before a row's 2nd attempt in a run, doubling... up to backoff_max
    backoff_base: float = default("FRAMEWORK_RETRY_BACKOFF_BASE")
    backoff_max: float = default("FRAMEWORK_RETRY_BACKOFF_MAX")
    # connect/dns failures in a row that make a host "down"
    down_host_after: int = default("FRAMEWORK_DOWN_HOST_AFTER")
    store_responses: bool = True  # keep ok pages' bodies for `framework reparse` (the spec's)
    responses_budget: int = 0  # bytes of stored (compressed) bodies; 0: no budget
    halt_on_drift: bool = default("FRAMEWORK_HALT_ON_DRIFT")  # a fallback's page stops the run

    @classmethod
    def from_settings(cls, s: BaseSettings, spec: JobSpec) -> Limits:
        """The limits a crawl's settings give (the table's defaults, the spec's
        ``settings:``, then ``-s``); the spec's own keys where a setting is unset."""
        return cls(
            # the spider's settings carry the spec's max_attempts; `-s` may override it
            max_attempts=s.getint("FRAMEWORK_MAX_ATTEMPTS", spec.max_attempts),
            max_requests=s.getint("FRAMEWORK_MAX_REQUESTS", cls.max_requests),
            stop_on_429=s.getbool("FRAMEWORK_STOP_ON_429", cls.stop_on_429),
            error_rate_max=s.getfloat("FRAMEWORK_ERROR_RATE_MAX", cls.error_rate_max),
            error_rate_window=s.getint("FRAMEWORK_ERROR_RATE_WINDOW", cls.error_rate_window),
            retry_after_cap=s.getfloat("FRAMEWORK_RETRY_AFTER_CAP", cls.retry_after_cap),
            retry_after_max=s.getfloat("FRAMEWORK_RETRY_AFTER_MAX", cls.retry_after_max),
            backoff_base=s.getfloat("FRAMEWORK_RETRY_BACKOFF_BASE", cls.backoff_base),
            backoff_max=s.getfloat("FRAMEWORK_RETRY_BACKOFF_MAX", cls.backoff_max),
            down_host_after=s.getint("FRAMEWORK_DOWN_HOST_AFTER", cls.down_host_after),
            # the spec's store_responses, unless `--no-store-responses` / `-s` says
            store_responses=s.getbool("FRAMEWORK_STORE_RESPONSES", spec.store_responses),
            responses_budget=int(
                s.getfloat("FRAMEWORK_RESPONSES_BUDGET_MB", RESPONSES_BUDGET_MB) * 2**20
            ),
            halt_on_drift=s.getbool("FRAMEWORK_HALT_ON_DRIFT", cls.halt_on_drift),
        )


def commit_window_ms(value: Any, database: bool) -> float:
    """``FRAMEWORK_COMMIT_WINDOW_MS`` as set, else the default of the workspace's kind
    (a database or a folder: group.py)."""
    if value is None or value == "":
        return DB_WINDOW_MS if database else WINDOW_MS
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"FRAMEWORK_COMMIT_WINDOW_MS: {value!r} is not a number") from None


def workspace_target(jobdir: str) -> str | Path:
    """JOBDIR as a workspace target: a database URL as it is, else a folder."""
    return jobdir if is_database_url(jobdir) else Path(jobdir)
