"""The demo site as one object: data + pages + faults + counters behind a real server.

Owns the site's life cycle (bind, serve in a background thread or in the foreground,
stop), routing a request to its pre-rendered answer, the request counters, and the
control endpoints. Markup lives in :mod:`.pages`, wire handling in :mod:`.http`, fault
rules in :mod:`.faults`, expected results in :mod:`.truth`.

In-process (tests)::

    with DemoSite(cases=70, faults=[Fault("/cases?page=3", 429, times=2, retry_after=1)]) as site:
        crawl(site.url + "/cases"); assert site.hits("/cases?page=3") == 3

As a process (crash tests, ``make demo``, benchmarks); the first stdout line is the URL::

    python -m framework.demo.site --port 0 --cases 70 --delay 0.05 --fault '/cases/*@503*1,ra=1'

Control endpoints (never counted): ``GET /_stats`` (JSON counters), ``POST /_stats/reset``,
``GET /_faults`` and ``POST /_faults`` with ``{"faults": [...], "delay": 0.0}`` (replaces
the rules; each fault is the JSON form of :class:`~framework.demo.faults.Fault`).
Servers bind to loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import signal
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from framework.demo.data import DEFAULT_CASES, DEFAULT_SEED, Dataset, generate
from framework.demo.faults import Fault, FaultState
from framework.demo.http import Answer, Request, Server, encode
from framework.demo.js import js_routes
from framework.demo.pages import JSON, api_slice, render
from framework.demo.truth import SOURCE_TYPE, Truth

_NOT_FOUND = (404, encode(404, "text/plain", b"not found\n"))
_NOT_ALLOWED = (405, encode(405, "text/plain", b"method not allowed\n"))
_BAD_BODY = (400, encode(400, "text/plain", b"expected a form body case=<id>\n"))


class DemoSite:
    """A running (after :meth:`start`) court-case site on loopback."""

    def __init__(
        self,
        cases: int = DEFAULT_CASES,
        seed: int = DEFAULT_SEED,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Iterable[Fault] = (),
        delay: float = 0.0,
        edge_cases: bool = True,
        source_type: str = SOURCE_TYPE,
    ) -> None:
        if not _is_loopback(host):
            raise ValueError(f"the demo site binds to loopback only, not {host!r}")
        self.host = host
        self.data: Dataset = generate(cases, seed, edge_cases)
        self._port = port
        self._source_type = source_type
        self._lock = threading.Lock()
        self._faults = FaultState(tuple(faults))
        self._delay = delay
        self._hits: Counter[tuple[str, str]] = Counter()
        self._statuses: Counter[tuple[str, str, int]] = Counter()
        self._routes: dict[str, tuple[int, bytes]] = {}
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.url = ""

    # -- life cycle -------------------------------------------------------------------

    def bind(self) -> str:
        """Bind the socket and render every page (links need the real port)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.listen(512)
        sock.setblocking(False)
        self._sock = sock
        port = sock.getsockname()[1]
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self.url = f"http://{host}:{port}"
        self._routes = {
            key: (page.status, encode(page.status, page.content_type, page.body))
            # the JS-rendered variant (/js/...) shares the data and the counters
            for key, page in {
                **render(self.data, self.url),
                **js_routes(self.data, self.url),
            }.items()
        }
        return self.url

    def start(self) -> DemoSite:
        """Serve in a daemon thread; returns once the server accepts connections."""
        if not self.url:
            self.bind()
        self._thread = threading.Thread(target=self._run_thread, name="demo-site", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("the demo site failed to start") from self._error
        return self

    def stop(self) -> None:
        """Close every connection and join the thread (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            # The loop may close between the check and the call.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> DemoSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve in the calling thread until SIGINT/SIGTERM (the command-line mode)."""
        if not self.url:
            self.bind()
        asyncio.run(self._serve(install_signals=True))

    def _run_thread(self) -> None:
        try:
            asyncio.run(self._serve(install_signals=False))
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self, install_signals: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(sig, self._stop.set)
        server = Server(self._handle)
        assert self._sock is not None, "bind() first"
        await server.start(self._sock)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.close()

    # -- what tests look at -----------------------------------------------------------

    @property
    def truth(self) -> Truth:
        """Ground truth for this site, counting faults that always fail as failures."""
        with self._lock:
            permanent = self._faults.permanent_targets()
        return Truth(self.data, self.url, self._source_type, always_failing=permanent)

    def hits(self, path: str, method: str | None = None) -> int:
        """How often ``path`` (``/p?q``, or a full URL of this site) was requested."""
        target = _target(path)
        with self._lock:
            return sum(
                n
                for (m, t), n in self._hits.items()
                if t == target and (method is None or m == method)
            )

    def stats(self) -> dict[str, Any]:
        with self._lock:
            hits = dict(self._hits)
            statuses = dict(self._statuses)
        by_path: Counter[str] = Counter()
        requests: dict[str, dict[str, Any]] = {}
        for (method, target), n in hits.items():
            by_path[target] += n
            requests[f"{method} {target}"] = {
                "method": method,
                "target": target,
                "count": n,
                "statuses": {},
            }
        for (method, target, status), n in statuses.items():
            requests[f"{method} {target}"]["statuses"][str(status)] = n
        return {
            "total": sum(hits.values()),
            "by_path": dict(by_path),
            "requests": sorted(requests.values(), key=lambda r: (r["target"], r["method"])),
        }

    def reset_stats(self) -> None:
        with self._lock:
            self._hits.clear()
            self._statuses.clear()

    def set_faults(self, faults: Iterable[Fault], delay: float | None = None) -> None:
        """Replace the fault rules (their hit counts start over) and optionally the delay."""
        with self._lock:
            self._faults.replace(tuple(faults))
            if delay is not None:
                self._delay = delay

    # -- serving ----------------------------------------------------------------------

    def _handle(self, req: Request) -> Answer:
        if req.target.startswith("/_"):
            return Answer(self._control(req))
        with self._lock:
            self._hits[(req.method, req.target)] += 1
            fault = self._faults.answer(req.method, req.target)
            delay = self._delay
        if fault is not None:
            page, headers = fault
            status, data = page.status, encode(page.status, page.content_type, page.body, headers)
        else:
            status, data = self._route(req)
        with self._lock:
            self._statuses[(req.method, req.target, status)] += 1
        return Answer(data, delay)

    def _route(self, req: Request) -> tuple[int, bytes]:
        found = self._routes.get(f"{req.method} {req.target}")
        if found is not None:
            if req.method == "POST" and not self._body_ok(req):
                return _BAD_BODY
            return found
        if req.method == "GET" and req.target.startswith("/api/cases?"):
            query = parse_qs(urlsplit(req.target).query)
            try:
                offset = int(query.get("offset", [""])[0])
            except ValueError:
                return _NOT_FOUND
            return 200, encode(200, JSON, api_slice(self.data, offset))
        other = "POST" if req.method == "GET" else "GET"
        if f"{other} {req.target}" in self._routes:
            return _NOT_ALLOWED
        return _NOT_FOUND

    @staticmethod
    def _body_ok(req: Request) -> bool:
        # The documents tab is a POST whose form names the case the path names.
        case = req.target.split("/")[2]
        form = parse_qs(req.body.decode("utf-8", "replace"))
        return form.get("case") == [case]

    def _control(self, req: Request) -> bytes:
        if req.target == "/_stats" and req.method == "GET":
            return _json_answer(self.stats())
        if req.target == "/_stats/reset" and req.method == "POST":
            self.reset_stats()
            return _json_answer({"ok": True})
        if req.target == "/_faults":
            if req.method == "POST":
                try:
                    doc = json.loads(req.body or b"{}")
                    faults = [Fault.from_json(f) for f in doc.get("faults", [])]
                    delay = doc.get("delay")
                    self.set_faults(faults, None if delay is None else float(delay))
                except (ValueError, TypeError, AttributeError) as exc:
                    return encode(400, "text/plain", f"bad fault document: {exc}\n".encode())
            with self._lock:
                current = [f.to_json() for f in self._faults.faults]
                delay_now = self._delay
            return _json_answer({"faults": current, "delay": delay_now})
        return _NOT_FOUND[1]


def _json_answer(value: Any) -> bytes:
    return encode(200, JSON, json.dumps(value).encode("utf-8"))


def _target(path: str) -> str:
    if "://" in path:
        parts = urlsplit(path)
        return parts.path + (f"?{parts.query}" if parts.query else "")
    return path


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m framework.demo.site",
        description="Serve the demo court-case site; prints its base URL on the first line.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--no-edge-cases", action="store_true", help="no broken pages")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="PATTERN@STATUS[*TIMES][,ra=N|,ra-date=N]",
        help="inject an error answer (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        faults = [Fault.parse(text) for text in args.fault]
        site = DemoSite(
            args.cases,
            args.seed,
            host=args.host,
            port=args.port,
            faults=faults,
            delay=args.delay,
            edge_cases=not args.no_edge_cases,
        )
        url = site.bind()
    except (ValueError, OSError) as exc:
        print(f"demo site: {exc}", file=sys.stderr)
        return 2
    print(url, flush=True)
    site.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
