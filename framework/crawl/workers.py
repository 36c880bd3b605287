"""`framework crawl JOB --processes N`: N crawl processes on one workspace.

Owns the parent's side (prepare the workspace once, fork N workers, forward signals,
wait, answer the worst exit code of theirs) and what a worker needs beyond a normal
crawl: its share of the crawl lock and its lease heartbeat. The rows each worker
fetches are the lease protocol's (:mod:`framework.workspace.leases`); the worker itself
is an ordinary crawl (:func:`framework.crawl.process.run_crawl`) with
``FRAMEWORK_WORKER`` set, so everything a crawl does it does too.

The crawl lock: a single-process crawl holds ``crawl.lock`` exclusively. The parent
takes it exclusively too while it prepares (integrity check, ``--fresh``, freeing the
leases of a crawl that was killed), then turns it into a shared lock that each worker
also takes shared: a second crawl, `requeue` or `review` is refused while any of them
runs, and a worker killed by ``kill -9`` leaves the others holding it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import signal
import socket
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.errors import (
    EXIT_CHECKPOINT,
    EXIT_HALTED,
    EXIT_OK,
    EXIT_USAGE,
    FrameworkError,
    UsageError,
)
from framework.files import make_private_dir, open_nofollow
from framework.locks import hold, lock_fd, lock_held, read_holder, unlock_fd
from framework.settings import default
from framework.workspace import Workspace, deferrals, utc_now

if TYPE_CHECKING:
    from scrapy.settings import Settings

    from framework.workspace.leases import Leases

logger = logging.getLogger(__name__)

WORKER_SETTING = "FRAMEWORK_WORKER"  # set in each child: claim rows by lease
LEASE_SETTING = "FRAMEWORK_LEASE_SECONDS"
BATCH_SETTING = "FRAMEWORK_LEASE_BATCH"  # rows a worker holds at most (0: from concurrency)
# the worst first: a usage error, a halt, a checkpoint, then success
_SEVERITY = {EXIT_USAGE: 4, EXIT_HALTED: 3, EXIT_CHECKPOINT: 2, EXIT_OK: 0}


def processes(value: str) -> int:
    """``--processes`` as a count: a number of at least 1, or ``auto`` (the cores)."""
    if value.strip().lower() == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--processes expects a number of at least 1 or auto, got {value!r}")
    return n


@contextlib.contextmanager
def shared_crawl_lock(ws: Workspace) -> Iterator[None]:
    """A worker's share of ``crawl.lock`` (see the module's docstring)."""
    with hold(ws.lock_path("crawl"), shared=True):
        yield


class Heartbeat:
    """Renews a worker's leases every third of a lease on the reactor; what it finds
    lost (taken over while this process was paused) is handed to ``on_lost``."""

    def __init__(self, leases: Leases, on_lost: Any = None) -> None:
        from twisted.internet.task import LoopingCall

        self.leases = leases
        self.on_lost = on_lost
        self._call = LoopingCall(self._beat)
        self.interval = leases.lease_seconds / 3

    def start(self) -> None:
        self._call.start(self.interval, now=False)

    def _beat(self) -> None:
        try:
            lost = self.leases.heartbeat()
        except Exception:  # a busy or full disk: the next beat tries again
            logger.exception("lease heartbeat failed")
            return
        if lost and self.on_lost is not None:
            self.on_lost(lost)

    def stop(self) -> None:
        if self._call.running:
            self._call.stop()


# ------------------------------------------------------------------------ parent side
def run_workers(
    spec_path: Path,
    root: Path,
    jobdir: Path,
    n: int,
    *,
    overrides: Mapping[str, Any],
    fresh: bool,
) -> int:
    """Prepare the workspace, run ``n`` worker processes to their end, and return the
    worst of their exit codes (a worker killed by a signal counts as interrupted: 3)."""
    from framework.crawl.process import preflight
    from framework.workspace.leases import reset

    preflight(jobdir, fresh=fresh)
    make_private_dir(jobdir)  # the workspace: 0700 when new (framework/files.py)
    path = jobdir / "crawl.lock"
    fd = -1
    try:
        with Workspace.open(jobdir, create=True) as ws:
            path = ws.lock_path("crawl")
            fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
            if not lock_fd(fd, block=False):
                raise lock_held(path, read_holder(path))
            info = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": utc_now(),
                "processes": n,
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            # alone here: what a killed crawl leased is free at once
            freed = reset(ws.store)
            if fresh:  # once, here: the workers then resume the fresh workspace
                ws.store.reset_rows()
                ws.events.append(
                    {"time": utc_now(), "event": "rows_reset", "why": "fresh run requested"}
                )
                deferrals.clear(ws.store)
            if freed:
                logger.info("%d leases of stopped workers freed", freed)
        # The workspace is closed (its connections and checkpoint thread) before the
        # workers are forked: a child must not inherit an open SQLite connection or a
        # thread's lock. The lock turns shared: the workers take their share before
        # this one lets go.
        lock_fd(fd, shared=True)
        return _fork_and_wait(spec_path, root, jobdir, n, overrides, fd)
    finally:
        if fd >= 0:
            os.ftruncate(fd, 0)
            unlock_fd(fd)
            os.close(fd)


def _fork_and_wait(
    spec_path: Path,
    root: Path,
    jobdir: Path,
    n: int,
    overrides: Mapping[str, Any],
    lock_fd: int,
) -> int:
    """Fork the ``n`` workers and reap them. Forked, not started afresh: this process has
    already imported Scrapy, Twisted, lxml and the job (the CLI built its settings), so a
    worker starts crawling at once instead of spending ~1 s of CPU importing them again
    (measured: docs/benchmarks.md). No reactor runs here and no thread (the workspace is
    closed), so a child starts from a clean state and installs its own."""
    settings = {**overrides, "JOBDIR": str(jobdir), WORKER_SETTING: True}
    preload(job_settings(spec_path, root, settings))
    pids: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    sigs = {signal.SIGINT, signal.SIGTERM}
    old = {s: signal.getsignal(s) for s in sigs}
    codes: dict[int, int] = {}
    # Held back while forking: a signal is forwarded to every worker started so far,
    # and a child must not run the parent's handler before it has set its own.
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        for s in sigs:
            signal.signal(s, forward)
        try:
            for _ in range(n):
                pids.append(_fork_worker(spec_path, root, settings, lock_fd, sigs))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        # reaped as each ends, not in order: a killed worker must not linger as a
        # zombie, whose pid would still look alive to the others (leases.pid_alive)
        while len(codes) < len(pids):
            pid, status = os.waitpid(-1, 0)  # a signal's handler runs, then it waits on
            if pid in pids:
                codes[pid] = os.waitstatus_to_exitcode(status)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return worst([codes[pid] for pid in pids])


def _fork_worker(
    spec_path: Path,
    root: Path,
    settings: Mapping[str, Any],
    lock_fd: int,
    sigs: set[signal.Signals],
) -> int:
    """Start one worker as a fork of this process (``sigs`` blocked); return its pid.
    The child never returns: it runs the crawl and leaves with ``os._exit`` (the
    parent's cleanup, its ``finally`` that unlocks the crawl lock, must not run in a
    child)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1  # as an uncaught exception would exit (its traceback is printed)
    try:
        # the parent's copy of the lock stays the parent's: closing this duplicate does
        # not release it (flock belongs to the open file, released when all close)
        os.close(lock_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        random.seed()  # not the parent's sequence, shared by every worker
        code = _work(spec_path, root, settings)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        os._exit(code)


# Scrapy's components, imported when a crawler is built: loaded once here instead
_COMPONENT_DICTS = (
    "DOWNLOAD_HANDLERS",
    "DOWNLOADER_MIDDLEWARES",
    "SPIDER_MIDDLEWARES",
    "EXTENSIONS",
    "ITEM_PIPELINES",
)
_COMPONENTS = (
    "DOWNLOADER",
    "DOWNLOADER_CLIENTCONTEXTFACTORY",
    "SCHEDULER",
    "SCHEDULER_PRIORITY_QUEUE",
    "SCHEDULER_MEMORY_QUEUE",
    "SCHEDULER_START_MEMORY_QUEUE",
    "STATS_CLASS",
    "LOG_FORMATTER",
    "REQUEST_FINGERPRINTER_CLASS",
    "ROBOTSTXT_PARSER",
    "TWISTED_DNS_RESOLVER",
    "DUPEFILTER_CLASS",
    "ITEM_PROCESSOR",
)


def preload(settings: Settings) -> None:
    """Import, in the parent, the classes each worker's crawler will load (measured:
    ~185 modules, 0.2-0.4 s of CPU per worker when each imports them after the fork).
    Only imports: no reactor is installed (Scrapy's modules do not import one), so
    every child still installs its own. One that fails to import is left to the
    worker, which reports it as a crawl that cannot start."""
    from scrapy.utils.misc import load_object

    paths: list[Any] = [settings.get(name) for name in _COMPONENTS]
    for name in _COMPONENT_DICTS:
        paths.extend(settings.getwithbase(name))
    for path in paths:
        if isinstance(path, str) and path:
            with contextlib.suppress(Exception):
                load_object(path)


def worst(codes: list[int]) -> int:
    """The worst exit code: usage (2) over halted (4) over checkpoint (3) over ok; a
    worker killed by a signal (a negative code) was interrupted: a checkpoint."""
    mapped = [EXIT_CHECKPOINT if c < 0 else c for c in codes]
    return max(mapped, key=lambda c: _SEVERITY.get(c, 5 if c else 0), default=EXIT_OK)


def job_settings(spec_path: Path, root: Path, overrides: Mapping[str, Any]) -> Settings:
    """The settings a crawl of the job runs with (the project's, the job's and its
    spec's, then the command's), as :func:`framework.crawl.process.run_crawl` builds them."""
    from scrapy.settings import Settings

    from framework import scrapy_settings
    from framework.crawl.spider import spider_class
    from framework.spec import load_spec

    settings = Settings()
    settings.setmodule(scrapy_settings, priority="project")
    spider_class(load_spec(spec_path), spec_path, root / "var").update_settings(settings)
    settings.setdict(dict(overrides), priority="cmdline")
    return settings


def shared_politeness(settings: Settings, n: int) -> dict[str, Any]:
    """What each of ``n`` workers gets so that together they keep the job's per-host
    politeness: a share of CONCURRENT_REQUESTS_PER_DOMAIN (at least 1 each) and ``n``
    times DOWNLOAD_DELAY. Their CPU adds up; their pressure on a host does not."""
    per_host = settings.getint(
        "CONCURRENT_REQUESTS_PER_DOMAIN", default("CONCURRENT_REQUESTS_PER_DOMAIN")
    )
    out: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": max(1, math.ceil(per_host / n))}
    delay = settings.getfloat("DOWNLOAD_DELAY", default("DOWNLOAD_DELAY"))
    if delay > 0:
        out["DOWNLOAD_DELAY"] = delay * n
    return out


# ------------------------------------------------------------------------- child side
def _work(spec_path: Path, root: Path, settings: Mapping[str, Any]) -> int:
    """One worker: a crawl of the same workspace, leasing the rows it fetches; returns
    its exit code as `framework crawl` would (the parent prints the summary)."""
    import click

    from framework.crawl.process import run_crawl, verdict

    try:
        result = run_crawl(spec_path, root, overrides=settings)
        verdict(result)
    except FrameworkError as exc:
        click.echo(f"worker {os.getpid()}: error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_CHECKPOINT
    return EXIT_OK


__all__ = [
    "BATCH_SETTING",
    "LEASE_SETTING",
    "WORKER_SETTING",
    "Heartbeat",
    "job_settings",
    "preload",
    "processes",
    "run_workers",
    "shared_crawl_lock",
    "shared_politeness",
    "worst",
]
