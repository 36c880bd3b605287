"""A fork server for the suite's child processes (``python -m tests.zygote SOCKET``).

Most tests run ``framework`` in a child process, because Twisted's reactor cannot be
restarted inside pytest and because what they test is often the process itself (exit
codes, signals, kill -9). A new interpreter spends most of a short crawl importing
Scrapy, Twisted, pydantic and the framework. This server imports them once and forks a
child per request: the child is a real process with its own pid, descriptors, working
directory, environment, signals and exit status, so ``kill -9``, ``SIGINT`` and process
groups behave as they do for ``python -c ...``; only the imports are already done.

Protocol (one Unix-socket connection per child): the client sends one JSON line
``{"argv": [...], "cwd": ..., "env": {...}, "setsid": bool}`` with three descriptors
(stdin, stdout, stderr) attached; the server answers ``{"pid": N}`` once forked and
``{"rc": N}`` when the child is reaped (negative: killed by that signal, as
``subprocess`` says). A client that hangs up while its child runs gets the child
killed. ``argv`` is what follows ``python``: ``-c CODE ARGS...`` or ``-m MODULE ARGS...``.

Single-threaded on purpose: a process that forks must hold no lock another thread owns.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

# What a crawl, a ship, the ingest server and the CLI import on their way in: the
# costly part of a child's start. Importing them must not install Twisted's reactor
# (each child installs its own) nor start a thread.
PRELOAD = (
    "framework.cli",
    "framework.cli.crawl",
    "framework.crawl.process",
    "framework.crawl.runtime",
    "framework.crawl.spider",
    "framework.crawl.reparse",
    "framework.crawl.preview",
    "framework.workspace.status",
    "framework.export",
    "scrapy.crawler",
    "scrapy.cmdline",
    "framework_ship.run",
    "framework_ingest.cli",
    "framework_ingest.app",
)

# the interpreter's own path, without the folder this server was started from: a
# child's path is what ``python -c`` would give it (its working directory first)
_BASE_PATH = [p for p in sys.path[1:] if p]


class Job:
    def __init__(self, header: dict[str, Any], fds: list[int]) -> None:
        self.argv: list[str] = header["argv"]
        self.cwd: str = header["cwd"]
        self.env: dict[str, str] = header["env"]
        self.setsid: bool = header.get("setsid", False)
        self.fds = fds


def _recv_job(conn: socket.socket) -> Job | None:
    data = b""
    fds: list[int] = []
    while not data.endswith(b"\n"):
        chunk, got, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        fds.extend(got)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None
        data += chunk
    return Job(json.loads(data), fds)


def _send(conn: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the client gave up: nothing to tell
        conn.sendall(json.dumps(message).encode() + b"\n")


def serve(path: str) -> Job:
    """Accept jobs for ever; return only in a forked child, with the job it is to run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    # SIGTERM ends the server as a normal exit, so that what runs at exit (coverage's
    # data of the imports every child shares) runs; children get the default back
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "reap")
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    by_conn: dict[socket.socket, int] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                job = _recv_job(conn)
                if job is None:
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    for other in by_conn:
                        other.close()
                    conn.close()
                    return job
                for fd in job.fds:
                    os.close(fd)
                _send(conn, {"pid": pid})
                children[pid] = conn
                by_conn[conn] = pid
                sel.register(conn, selectors.EVENT_READ, "client")
            elif key.data == "reap":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = children.pop(pid, None)
                    if conn is not None:
                        by_conn.pop(conn, None)
                        sel.unregister(conn)
                        _send(conn, {"rc": os.waitstatus_to_exitcode(status)})
                        conn.close()
            else:  # a client spoke or hung up: it only ever hangs up
                conn = key.fileobj  # type: ignore[assignment]
                assert isinstance(conn, socket.socket)
                with contextlib.suppress(OSError):
                    if conn.recv(1):
                        continue
                sel.unregister(conn)
                pid = by_conn.pop(conn)
                children.pop(pid, None)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                conn.close()


def run_child(job: Job) -> None:
    """Become the process ``python ARGV`` would have started, then exit as it would."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if job.setsid:
        os.setsid()
    for target, fd in enumerate(job.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    if job.env.get("PYTHONUNBUFFERED"):
        sys.stdout.reconfigure(write_through=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(write_through=True)  # type: ignore[union-attr]
    extra = [p for p in job.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    flag, target_arg, *args = job.argv
    sys.path[:] = ["" if flag == "-c" else os.getcwd(), *extra, *_BASE_PATH]
    if flag == "-c":
        sys.argv = ["-c", *args]
        code = compile(target_arg, "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - python -c
    elif flag == "-m":
        import runpy

        sys.argv = [target_arg, *args]
        runpy.run_module(target_arg, run_name="__main__", alter_sys=True)
    else:
        raise SystemExit(f"zygote: cannot run {job.argv!r}")


def main() -> None:
    path = sys.argv[1]
    for name in PRELOAD:
        __import__(name)
    job = serve(path)
    run_child(job)  # a SystemExit from the child's code ends it as it would end python


if __name__ == "__main__":
    main()
