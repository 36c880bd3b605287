"""A small, fast HTTP/1.1 server on asyncio for the demo site.

Owns the wire: parsing requests (request line, headers, a ``Content-Length`` body),
persistent connections (keep-alive by default in HTTP/1.1), optional per-request
delays, and serialising answers. What to answer is the handler's business
(:mod:`.site`); this module never looks at paths.

Why not ``http.server``: its per-request header parsing (``email.parser``) and a thread
per connection cost several times more CPU than this, and the benchmark runs Scrapy
and the site on the same two cores. Measured figures are in ``docs/benchmarks.md``.
Requests on one connection are answered in order, one at a time (no pipelining races).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path?query, as sent
    headers: dict[str, str]  # lower-cased names
    body: bytes


@dataclass(frozen=True)
class Answer:
    data: bytes  # the whole response, head and body
    delay: float = 0.0  # seconds to wait before sending it


Handler = Callable[[Request], Answer]


def encode(
    status: int, content_type: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """A complete HTTP/1.1 response. Pre-rendered pages are encoded once, at start."""
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Status"
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Server: framework-demo",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_BAD_REQUEST = encode(400, "text/plain", b"bad request\n", (("Connection", "close"),))
_SERVER_ERROR = encode(500, "text/plain", b"handler error\n")
logger = logging.getLogger(__name__)


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, live: set[_Connection]) -> None:
        self._handler = handler
        self._live = live
        self._buf = bytearray()
        self._busy = False  # an answer is waiting for its delay
        self._closing = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._live.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        self._closing = True

    def close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._serve()

    def _serve(self) -> None:
        while not self._busy and not self._closing:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    self._fail()
                return
            parsed = _parse_head(bytes(self._buf[:end]))
            if parsed is None:
                self._fail()
                return
            method, target, version, headers = parsed
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fail()
                return
            if length < 0 or length > MAX_BODY or "transfer-encoding" in headers:
                self._fail()
                return
            if len(self._buf) < end + 4 + length:
                return
            body = bytes(self._buf[end + 4 : end + 4 + length])
            del self._buf[: end + 4 + length]
            connection = headers.get("connection", "").lower()
            keep = (version == "HTTP/1.1" and connection != "close") or connection == "keep-alive"
            try:
                answer = self._handler(Request(method, target, headers, body))
            except Exception:  # a bug in a handler must not kill the connection silently
                logger.exception("demo site handler failed on %s %s", method, target)
                answer = Answer(_SERVER_ERROR)
            if answer.delay > 0:
                self._busy = True
                asyncio.get_running_loop().call_later(
                    answer.delay, self._send_later, answer.data, keep
                )
                return
            self._send(answer.data, keep)

    def _send_later(self, data: bytes, keep: bool) -> None:
        self._busy = False
        if self._closing:
            return
        self._send(data, keep)
        self._serve()

    def _send(self, data: bytes, keep: bool) -> None:
        assert self._transport is not None
        if not keep:
            # Say so, so the client does not try to reuse the connection.
            data = data.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
        self._transport.write(data)
        if not keep:
            self.close()

    def _fail(self) -> None:
        if self._transport is not None:
            self._transport.write(_BAD_REQUEST)
        self.close()


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]] | None:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


class Server:
    """Serves ``handler`` on an already-bound listening socket inside a running loop."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._live: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self._handler, self._live), sock=sock, backlog=512
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._live):  # keep-alive clients would hold the server open
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
