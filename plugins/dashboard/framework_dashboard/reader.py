"""One job's whole picture, read through the core's public read API.

Owns what the pages and /metrics are made of: ``framework status --json``'s report
(:func:`framework.workspace.status.build_status`, with the plugins' sections such as
the ship side), the last run's findings summed over every worker
(:mod:`~framework_dashboard.findings`), the live counts
(:mod:`~framework_dashboard.progress`) and, from ``ship-log.jsonl``, the last delivery
attempt and the door's answers by HTTP status. Every workspace is opened read-only, for
the length of one read: a crawl, a requeue or a ship running meanwhile is never waited
for and never blocked. Everything it returns is masked (``redact``) before a page
sees it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.cli.status import recorded_max_attempts
from framework.errors import FrameworkError
from framework.redact import redact
from framework.workspace import JsonlLog, Workspace, build_status, rates
from framework_dashboard import tail
from framework_dashboard.findings import last_run_findings
from framework_dashboard.jobs import Job, discover
from framework_dashboard.progress import JobProgress, Tracker

SHIP_OK = ("accepted", "updated", "duplicate")


@dataclass
class ShipLogCounts:
    """What the ship log says beyond ``status``'s latest outcome per key: every
    attempt by outcome and by the door's HTTP status, and the last attempt."""

    cursor: int = 0
    attempts: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    last: dict[str, Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, path: Path) -> dict[str, Any]:
        with self.lock:
            log = JsonlLog(path)
            while True:
                lines, cursor = tail.after(log, self.cursor)
                if cursor < self.cursor:  # pruned (compacted): counted afresh
                    self.attempts.clear()
                    self.answers.clear()
                self.cursor = cursor
                for _, line in lines:
                    self.attempts[str(line.get("outcome") or "unknown")] += 1
                    status = line.get("http_status")
                    self.answers[str(status) if status is not None else "none"] += 1
                    self.last = line
                if not lines:
                    break
            return {
                "attempts": dict(sorted(self.attempts.items())),
                "answers": dict(sorted(self.answers.items())),
                "last_attempt": self.last,
            }


class Reader:
    """The jobs of one project, read on demand."""

    def __init__(
        self,
        root: Path,
        *,
        workspace_root: Path | None = None,
        targets: dict[str, str] | None = None,
        top: int = 20,
        tracker: Tracker | None = None,
    ) -> None:
        self.root = root
        self.workspace_root = workspace_root
        self.targets = dict(targets or {})
        self.top = top
        self.tracker = tracker or Tracker()
        self._ship: dict[str, ShipLogCounts] = {}
        self._lock = threading.Lock()

    def jobs(self) -> dict[str, Job]:
        """Looked up again on every call: a job added to the project shows at once."""
        return discover(self.root, self.workspace_root, self.targets)

    def job(self, name: str) -> Job | None:
        return self.jobs().get(name)

    def open(self, job: Job) -> Workspace:
        return Workspace.open(job.target, create=False, readonly=True)

    def report(self, job: Job, *, top: int | None = None) -> dict[str, Any]:
        """``status --json``'s report with the dashboard's additions, or
        ``{"state": "no_workspace"}`` / ``{"state": "unreadable", "error": ...}``."""
        if not job.exists():
            return {"state": "no_workspace", "workspace": job.where}
        try:
            with self.open(job) as ws:
                report = build_status(
                    ws, max_attempts=recorded_max_attempts(ws), top=top or self.top
                )
                findings = last_run_findings(ws)
                report["run_findings"] = findings
                report["fill_rates"]["last_run_all_workers"] = rates(findings["fill"])
                if not ws.is_database:
                    report["ship_log"] = self._ship_counts(job).read(ws.ship_log_path)
        except (FrameworkError, sqlite3.Error, OSError) as exc:
            return {"state": "unreadable", "workspace": job.where, "error": str(exc)}
        except Exception as exc:  # a database that went away: the page says so
            if type(exc).__module__.startswith("psycopg"):
                return {"state": "unreadable", "workspace": job.where, "error": str(exc)}
            raise
        masked: dict[str, Any] = redact(report)
        return masked

    def progress(self, job: Job) -> tuple[JobProgress, dict[str, Any]]:
        return self.tracker.sample(job.name, lambda: self.open(job), recorded_max_attempts)

    def events(self, job: Job, cursor: int) -> tuple[list[tail.Line], int]:
        with self.open(job) as ws:
            return tail.after(ws.events, cursor, limit=200)

    def recent_events(self, job: Job, n: int) -> tuple[list[tail.Line], int]:
        with self.open(job) as ws:
            return tail.recent(ws.events, n)

    def _ship_counts(self, job: Job) -> ShipLogCounts:
        with self._lock:
            return self._ship.setdefault(job.name, ShipLogCounts())


def safely(call: Callable[[], Any], fallback: Any) -> Any:
    """``call()``, or ``fallback`` when the workspace cannot be read right now (a
    database restarting, a file being replaced): a page keeps what it showed."""
    try:
        return call()
    except (FrameworkError, sqlite3.Error, OSError):
        return fallback


__all__ = ["Reader", "ShipLogCounts", "safely"]
