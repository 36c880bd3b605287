"""Running the dashboard under uvicorn: in the foreground (the command) or in a thread
(tests), always on a socket bound here, so port 0 works and the real port is known
before the first request.

Owns the server's lifecycle. A stream (server-sent events) never ends by itself, so a
stop gives open streams one second, not uvicorn's default wait for them to finish.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

import uvicorn

LOCAL = "127.0.0.1"
GRACE_S = 1


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


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
    server = _Server(config(app, access_log=access_log, log_level="info"), app)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """The app in a thread on ``host``:``port`` (0: a free one); a context manager."""

    def __init__(self, app: Any, host: str = LOCAL, port: int = 0) -> None:
        self._sock = bind(host, port)
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self._server = _Server(config(app), app)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name=f"dashboard-{self.port}",
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._server.stop_streams()
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["LOCAL", "BackgroundServer", "bind", "is_local", "run_foreground"]
