"""A server on a socket bound here: in the foreground, or in a thread.

Owns the part of serving that does not depend on what is served: bind the listening
socket first (so port 0 works and the real port is known before the first request),
run a server on it until told to stop, and the thread that runs one for tests and
benchmarks (:class:`ServerThread`). A server is anything shaped like
``uvicorn.Server`` (:class:`Server`); this module imports no server library, and the
core serves nothing itself: it is here because two plugins that must not import each
other (``framework_ingest``, ``framework_dashboard``) both serve. Each brings its own
server class and settings.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol, Self


class Server(Protocol):
    """What this module needs of a server (``uvicorn.Server`` has it)."""

    started: bool
    should_exit: bool

    def run(self, sockets: list[socket.socket] | None = None) -> None: ...


def listen(
    host: str,
    port: int,
    *,
    backlog: int,
    factory: Callable[[int, int, int], socket.socket] = socket.socket,
) -> socket.socket:
    """A TCP socket listening on ``host``:``port`` (0: a free one), inheritable.

    The protocol is named (IPPROTO_TCP), not left 0: asyncio sets TCP_NODELAY only on
    accepted sockets whose proto says TCP, and without it Nagle and delayed ACKs cost
    about 40 ms per keep-alive response."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = factory(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def serve(server: Server, sock: socket.socket) -> None:
    """Run ``server`` on ``sock`` until it stops (SIGINT/SIGTERM), then close ``sock``."""
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class ServerThread:
    """``server`` in a daemon thread on ``sock``, which ``host`` names (for :attr:`url`).

    ``start()`` returns once the server accepts connections; ``stop()`` shuts it down,
    joins the thread and closes the socket. A context manager. ``name`` names the thread
    (``<name>-<port>``) and, in the error of a server that did not start, the server."""

    def __init__(self, server: Server, sock: socket.socket, host: str, *, name: str) -> None:
        self._server = server
        self._sock = sock
        self.host = host
        self.port = int(sock.getsockname()[1])
        self._what = name.replace("-", " ")
        self._thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"{name}-{self.port}",
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self._what} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():  # a server that never started has nothing to join
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["Server", "ServerThread", "listen", "serve"]
