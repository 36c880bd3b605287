"""The commands a message tells the user to run next, with the flags that locate the job.

A hint such as ``framework reparse demo`` is wrong for a user who ran ``framework crawl
projects/demo/job.yaml --workspace /data/demo``: it would read the default workspace,
or no spec at all. :class:`Locator` holds how the user named the job and its workspace,
and writes any command with them; :meth:`Locator.located` rewrites the backticked
``framework VERB JOB ...`` commands of a message the library wrote with the job's name
(the library does not know the command line, and should not).
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from framework.redact import redact_url

# The commands that read a job's workspace (each takes --workspace)
WORKSPACE_VERBS = frozenset(("crawl", "reparse", "status", "requeue", "review", "export", "ship"))
# The commands that read the spec itself, and so take a path to it as well as a job name;
# the others take a job name only (a path there is a usage error: project.resolve_job)
SPEC_VERBS = frozenset(("crawl", "reparse", "preview", "validate"))
# `framework VERB REST`, as messages quote a command
_COMMAND = re.compile(r"`framework ([a-z][a-z-]*)((?: [^`]*)?)`")


@dataclass(frozen=True)
class Locator:
    name: str  # the job's name (what the library writes in its messages)
    job: str  # the job as the user gave it: a name or a path to its spec
    workspace: str | None = None  # --workspace, when given

    def command(self, verb: str, *args: str) -> str:
        """``framework VERB JOB ARGS [--workspace W]``, quoted for a shell: JOB as the
        user gave it where the command reads the spec, else the job's name."""
        words = ["framework", verb, self.job if verb in SPEC_VERBS else self.name, *args]
        if self.workspace is not None and verb in WORKSPACE_VERBS:
            # a database URL's password never reaches a hint (they are logged)
            words += ["--workspace", redact_url(self.workspace)]
        return shlex.join(words)

    def located(self, message: str) -> str:
        """``message`` with every backticked command of this job given the user's flags
        (a command of another job, or one already naming a workspace, stays as it is)."""
        if "`framework " not in message:
            return message
        return _COMMAND.sub(self._locate, message)

    def _locate(self, m: re.Match[str]) -> str:
        verb, rest = m.group(1), m.group(2).split()
        if "--workspace" in rest:
            return m.group(0)
        # the job is the first word that is not a flag (`crawl --fresh demo`)
        at = next((i for i, w in enumerate(rest) if not w.startswith("-")), None)
        if at is None and verb not in WORKSPACE_VERBS:
            return m.group(0)  # names no job (`framework validate`)
        if at is not None:
            if rest[at] != self.name:
                return m.group(0)  # another job's command, or one this cannot read
            del rest[at]
        return f"`{self.command(verb, *rest)}`"


class LocatedHints(logging.Filter):
    """A logging filter that gives the commands a log record names the user's flags.

    Added to the loggers of the modules that write hints while a command runs: a
    logger's own filters see (and may change) every record it creates."""

    def __init__(self, locator: Locator) -> None:
        super().__init__()
        self.locator = locator

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        located = self.locator.located(text)
        if located != text:
            record.msg, record.args = located, None
        return True


def relocate(error: BaseException, locator: Locator) -> None:
    """Give the commands an error's message names the user's flags, in place (an error
    whose message is its one argument: the others say themselves)."""
    args = error.args
    if len(args) == 1 and isinstance(args[0], str) and str(error) == args[0]:
        error.args = (locator.located(args[0]),)


@contextmanager
def hints_located(locator: Locator, *modules: str) -> Iterator[None]:
    """While the block runs, the log records of ``modules`` name commands with the
    user's flags (:class:`LocatedHints`)."""
    located = LocatedHints(locator)
    loggers = [logging.getLogger(name) for name in modules]
    for log in loggers:
        log.addFilter(located)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(located)
