"""What the dashboard's tests share: a workspace built in-process, the dashboard served
on 127.0.0.1 port 0, and a reader of its server-sent events."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from framework_dashboard.app import create_app
from framework_dashboard.progress import Tracker
from framework_dashboard.reader import Reader
from framework_dashboard.serve import BackgroundServer

from framework.workspace import ErrorKind, NewRow, Outcome, Workspace

SECRET = "s3cret-dash-7731"


def build_workspace(path: Path | str, *, job: str = "shop") -> Workspace:
    """A workspace with rows in every state, an error note naming a secret query
    parameter and a few events: what a crawl leaves, without a crawl."""
    ws = Workspace.open(path, create=True)
    rows = ws.store.seed([NewRow("list", f"http://127.0.0.1:9/list?page={n}") for n in range(1, 4)])
    ws.store.commit(
        Outcome(
            rows[0].id,
            ok=True,
            http_status=200,
            new_rows=[NewRow("detail", f"http://127.0.0.1:9/item/{n}") for n in range(4)],
        )
    )
    ws.store.commit(
        Outcome(
            rows[1].id,
            ok=False,
            http_status=404,
            error_kind=ErrorKind.HTTP_4XX,
            error=f"HTTP 404 at http://127.0.0.1:9/list?page=2&token={SECRET}",
            retryable=False,
        )
    )
    ws.events.append({"time": "2026-01-01T00:00:00+00:00", "event": "run_started", "job": job})
    return ws


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    root: Path, *, interval: float = 0.1, targets: dict[str, str] | None = None
) -> Iterator[tuple[BackgroundServer, Reader]]:
    reader = Reader(root, targets=targets, tracker=Tracker(min_interval=interval))
    server = BackgroundServer(create_app(reader, bind="127.0.0.1", interval=interval))
    with server:
        yield server, reader


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    """(status, headers (case-insensitive), body) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - 127.0.0.1 only
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310
            return r.status, r.headers, r.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode("utf-8")


class Stream:
    """One server-sent event stream, parsed message by message."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - 127.0.0.1 only
        self.response = urllib.request.urlopen(request, timeout=30)  # noqa: S310
        self.content_type = self.response.headers.get("Content-Type", "")
        self._buffer = b""

    def messages(self) -> Iterator[dict[str, Any]]:
        while True:
            while b"\n\n" not in self._buffer:
                chunk = self.response.read1(65536)
                if not chunk:
                    return
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            message: dict[str, Any] = {}
            for line in raw.decode("utf-8").split("\n"):
                name, _, value = line.partition(": ")
                if name in ("id", "event", "data", "retry"):
                    message[name] = value
            if "data" in message:
                message["data"] = json.loads(message["data"])
            if message:
                yield message

    def until(
        self, wanted: Callable[[dict[str, Any]], bool], timeout: float = 30
    ) -> list[dict[str, Any]]:
        """The messages up to and with the first one ``wanted`` takes."""
        deadline = time.monotonic() + timeout
        seen = []
        for message in self.messages():
            seen.append(message)
            if wanted(message):
                return seen
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"no such message within {timeout}s; saw {seen[-5:]}")

    def close(self) -> None:
        self.response.close()
