"""What one ship run is asked to do: :class:`ShipOptions`, checked when built.

Owns the run's knobs and their defaults (the CLI's defaults come from here too) and
the usage errors of values no run can take. It reads no flag, file or environment
variable (that is :mod:`framework_ship.cli`) and decides nothing about items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from framework.errors import UsageError
from framework.settings import default
from framework_ship.policy import RetryPolicy

# Measured (bench/bench_ship.py, docs/benchmarks.md) against the reference server:
# 250 was the fastest size in one scan and within 13% of 500 in the other, while it
# stays half the server's default limit (500: a 413 above) and a request under 100 KB.
DEFAULT_BATCH_SIZE = 250
# What requests in flight get at a stop before they are abandoned: the crawl's
# FRAMEWORK_STOP_GRACE default, one number for both.
STOP_GRACE_S: float = default("FRAMEWORK_STOP_GRACE")


@dataclass(frozen=True)
class ShipOptions:
    endpoint: str
    fallback_path: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    concurrency: int = 1
    timeout: float = 30.0
    max_items: int | None = None
    only: Sequence[str] = ()
    include_incomplete: bool = False
    retry_rejected: bool = False
    dry_run: bool = False
    max_error_rate: float = 0.5
    error_window: int = 50
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    stop_grace: float = STOP_GRACE_S

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError("--batch-size must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.timeout <= 0:
            raise UsageError("--timeout must be positive")
        if self.max_items is not None and self.max_items < 0:
            raise UsageError("--max-items must not be negative")
        if not 0 < self.max_error_rate <= 1:
            raise UsageError("--max-error-rate is a fraction in (0, 1]")
        if self.error_window < 1:
            raise UsageError("--error-window must be at least 1")
        if self.stop_grace < 0:
            raise UsageError("--stop-grace must not be negative")


__all__ = ["DEFAULT_BATCH_SIZE", "STOP_GRACE_S", "ShipOptions"]
