"""The one error tree of the project.

Every error the framework raises on purpose derives from :class:`FrameworkError`
and knows its exit code; only the CLI turns errors into exit codes, library code
never calls ``sys.exit``::

    FrameworkError                    exit 1  unexpected but anticipated failure
    +-- PageLevelError                exit 1  one page cannot be read (or rendered) as the
    |                                         spec says: its row's typed error, the run goes on
    +-- UsageError                    exit 2  bad call or configuration (a human fixes it)
    |   +-- SpecError                 exit 2  invalid spec: ``file:line:col: what; expected what``
    |   +-- JobNotFound               exit 2  no ``projects/<job>/job.yaml`` of that name
    |   +-- WorkspaceError            exit 2  workspace missing, unreadable or of another schema
    |       +-- StoredPageDamaged     exit 2  a stored page is damaged (a reparse: a row error)
    +-- Checkpoint                    exit 3  benign stop: run again later
    |   +-- LockHeld                  exit 3  another process holds the workspace/shipper lock
    +-- Halted                        exit 4  a breaker tripped: a human must look
        +-- WorkspaceFull             exit 4  the workspace's disk is full (nothing lost)
        +-- WorkspaceBroken           exit 4  state.sqlite or its WAL is damaged or lost

Plugins derive their own errors from these classes so the CLI maps them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CHECKPOINT = 3
EXIT_HALTED = 4


class FrameworkError(Exception):
    """Base of every error the framework raises on purpose."""

    exit_code: int = EXIT_FAILURE


class PageLevelError(FrameworkError):
    """What went wrong with one page: the spec cannot read it (not JSON, a conversion
    that fails, a form or a login that is not there, an extraction limit) or the
    browser could not render it. The crawl makes it the row's typed error and goes on;
    it reaches the CLI (exit 1) only when a tool reads a single page (a preview).
    Subclasses that were a ``ValueError`` stay one."""


class UsageError(FrameworkError):
    """A bad call or configuration: a human fixes the call."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec file, located to the character."""

    file: str
    line: int  # 1-based
    col: int  # 1-based
    what: str
    expected: str = ""

    def __str__(self) -> str:
        tail = f"; expected {self.expected}" if self.expected else ""
        return f"{self.file}:{self.line}:{self.col}: {self.what}{tail}"


class SpecError(UsageError):
    """An invalid job spec. Carries every problem found, each with file:line:col."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class JobNotFound(UsageError):
    """No job of that name under the projects folder."""


class WorkspaceError(UsageError):
    """The workspace is missing, unreadable, or written by an incompatible schema."""


class StoredPageDamaged(WorkspaceError):
    """A page kept in the workspace does not decompress (a torn or garbled body). A
    reparse makes it that row's ``damaged`` error and goes on; the crawl fetches it
    again."""


class Checkpoint(FrameworkError):
    """A benign stop (rate limited, a cap reached, interrupted): run again later."""

    exit_code = EXIT_CHECKPOINT


class LockHeld(Checkpoint):
    """Another process holds the lock; this one leaves without touching anything."""


class Halted(FrameworkError):
    """A breaker tripped (auth refused, error rate over threshold): a human must look."""

    exit_code = EXIT_HALTED


class WorkspaceFull(Halted):
    """The disk holding the workspace is full: the write that failed was rolled back,
    so nothing committed is lost; a human frees space, then the crawl resumes."""


class WorkspaceBroken(Halted):
    """The workspace's state is damaged (a truncated or garbled state.sqlite or WAL) or
    lost committed rows (a deleted WAL): restore it from a backup, or start over."""
