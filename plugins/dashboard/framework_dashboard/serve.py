"""Running the dashboard under uvicorn: in the foreground (the command) or in a thread
(tests), always on a socket bound here, so port 0 works and the real port is known
before the first request.

Owns the server's lifecycle (the generic part, the socket and the thread, is
:mod:`framework.serving`). A stream (server-sent events) never ends by itself, so a
stop gives open streams one second, not uvicorn's default wait for them to finish.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import uvicorn

from framework.serving import ServerThread, listen, serve

LOCAL = "127.0.0.1"
GRACE_S = 1


def bind(host: str, port: int) -> socket.socket:
    return listen(host, port, backlog=128)


def is_local(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def config(app: Any, *, access_log: bool = False, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        access_log=access_log,
        log_level=log_level,
        http="h11",
        loop="asyncio",
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=GRACE_S,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, which also ends the app's open streams when it is told to stop
    (they would hold the shutdown for its whole grace period)."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._stopping = getattr(getattr(app, "state", None), "stopping", None)

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.stop_streams()
        super().handle_exit(sig, frame)

    def stop_streams(self) -> None:
        if self._stopping is not None:
            self._stopping.set()


def run_foreground(app: Any, sock: socket.socket, *, access_log: bool = False) -> None:
    """Serve until interrupted (SIGINT/SIGTERM)."""
    serve(_Server(config(app, access_log=access_log, log_level="info"), app), sock)


class BackgroundServer(ServerThread):
    """The app in a thread on ``host``:``port`` (0: a free one); a context manager."""

    def __init__(self, app: Any, host: str = LOCAL, port: int = 0) -> None:
        self._streams = _Server(config(app), app)
        super().__init__(self._streams, bind(host, port), host, name="dashboard")

    def stop(self, timeout: float = 30.0) -> None:
        self._streams.stop_streams()
        super().stop(timeout)


__all__ = ["LOCAL", "BackgroundServer", "bind", "is_local", "run_foreground"]
